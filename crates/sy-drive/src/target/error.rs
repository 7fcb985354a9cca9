//! Why a target could not be started.

/// A target that could not be started.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The simulator configuration file cannot be read or is invalid (bad input); the message
    /// names the file.
    #[cfg(feature = "sim")]
    #[error(transparent)]
    SimConfig(sy_sim::SimError),
    /// The embedded simulator did not start (a runtime failure).
    #[cfg(feature = "sim")]
    #[error("cannot start the simulator: {0}")]
    SimStart(#[source] sy_sim::SimError),
    /// `--target sim` asked of a build without the embedded simulator (bad input).
    #[error(
        "this build has no embedded simulator (--target sim): it is compiled only with the `sim` \
         feature (cargo build --release --features sim -p <tool>; scripts/demo.sh builds it); \
         against a Dynamo deployment use --target dynamo"
    )]
    SimNotBuilt,
}

impl TargetError {
    /// Whether the caller's input is at fault (exit 2) rather than the machine (exit 1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            #[cfg(feature = "sim")]
            TargetError::SimConfig(_) => true,
            #[cfg(feature = "sim")]
            TargetError::SimStart(_) => false,
            TargetError::SimNotBuilt => true,
        }
    }
}
