//! Why a target could not be started.

/// A target that could not be started.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The simulator configuration file cannot be read or is invalid (bad input); the message
    /// names the file.
    #[error(transparent)]
    SimConfig(sy_sim::SimError),
    /// The embedded simulator did not start (a runtime failure).
    #[error("cannot start the simulator: {0}")]
    SimStart(#[source] sy_sim::SimError),
}

impl TargetError {
    /// Whether the caller's input is at fault (exit 2) rather than the machine (exit 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(self, TargetError::SimConfig(_))
    }
}
