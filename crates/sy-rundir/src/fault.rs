//! Whose fault an error is: the input's (a file, row, field or flag that is not what was
//! expected: exit code 2) or the system's (I/O, network: exit code 1).
//!
//! Every library error enum says so with an `is_bad_input` method and implements [`Fault`]
//! ([`impl_fault!`]); the tools' edge (`sy_cli::ToolError`) turns any [`Fault`] into the message
//! and the exit code the user sees, so a library never depends on the command-line crate.

/// An error that knows whether it is the input's fault.
pub trait Fault: std::fmt::Display {
    /// Whether the error is the input's fault (exit code 2) rather than the system's (1).
    fn is_bad_input(&self) -> bool;
}

/// Implements [`Fault`] for error types with an inherent `is_bad_input(&self) -> bool`:
/// `sy_rundir::impl_fault!(MarginError, InputsError);`, beside the error types.
#[macro_export]
macro_rules! impl_fault {
    ($($t:ty),+ $(,)?) => {
        $(
            impl $crate::Fault for $t {
                fn is_bad_input(&self) -> bool {
                    <$t>::is_bad_input(self)
                }
            }
        )+
    };
}

impl_fault!(crate::RunError, crate::ArtifactError);

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fault(e: &dyn Fault) -> bool {
        e.is_bad_input()
    }

    #[test]
    fn the_trait_answers_as_the_error_does() {
        let bad = crate::RunError::TooLarge {
            path: PathBuf::from("x"),
            limit: 1,
        };
        assert!(fault(&bad));
        let artifact = crate::ArtifactError::Invalid {
            path: PathBuf::from("fit.json"),
            artifact: crate::Artifact::Fit,
            message: "no".to_string(),
        };
        assert!(fault(&artifact));
    }
}
