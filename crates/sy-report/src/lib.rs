//! Plots (plotters, SVG and PNG) and the generated report.md of a calibration run.
