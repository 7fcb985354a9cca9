//! The font every figure is drawn with.
//!
//! plotters needs a font to draw (and even to measure) text, in SVG as in PNG. sy-report uses
//! plotters' pure-Rust `ab_glyph` text backend with a font compiled into the crate:
//! `fonts/SyReportSans.ttf`, a 22 KB subset of DejaVu Sans (licence: `fonts/LICENSE-DejaVu.txt`).
//! So every figure has its titles, tick labels, legends and colour bars on any machine, and the
//! same pixels on every machine. `SY_REPORT_FONT=/path/to/font.ttf` draws with another font; a
//! file that cannot be read or parsed there is an error that names it (never a silent figure
//! without text).

use std::path::PathBuf;
use std::sync::OnceLock;

use plotters::style::FontStyle;

use crate::ReportError;

/// The bundled font.
const BUNDLED: &[u8] = include_bytes!("../fonts/SyReportSans.ttf");

/// Name of the bundled font (for messages).
pub const BUNDLED_NAME: &str = "Sy Report Sans (a subset of DejaVu Sans, compiled in)";

/// The environment variable naming another TrueType font.
pub const FONT_ENV: &str = "SY_REPORT_FONT";

static FONT: OnceLock<Result<String, String>> = OnceLock::new();

fn load() -> Result<String, String> {
    let (bytes, name): (&'static [u8], String) = match std::env::var_os(FONT_ENV) {
        Some(path) => {
            let path = PathBuf::from(path);
            let bytes = std::fs::read(&path).map_err(|e| {
                format!(
                    "{FONT_ENV}={}: cannot read the font: {e} (unset {FONT_ENV} to use the bundled font)",
                    path.display()
                )
            })?;
            // plotters keeps fonts for the life of the process: leak the bytes once.
            (
                Box::leak(bytes.into_boxed_slice()),
                path.display().to_string(),
            )
        }
        None => (BUNDLED, BUNDLED_NAME.to_string()),
    };
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| {
        format!("{name}: not a TrueType font plotters can use (set {FONT_ENV} to a .ttf file)")
    })?;
    Ok(name)
}

/// Registers the font once; returns its name, or an error naming the unusable font file.
pub fn font() -> Result<&'static str, ReportError> {
    FONT.get_or_init(load)
        .as_deref()
        .map_err(|m| ReportError::Font(m.clone()))
}
