//! sy-collect: the calibration load generator that drives Dynamo and records paired probes.
