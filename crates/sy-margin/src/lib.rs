//! sy-margin: 90th-percentile error margins of the predicted TTFT advantage on the uncertainty split.

pub mod stats;
