//! sy-fit: no-load Q tables, standardiser statistics and ridge load corrections from calibration records.
