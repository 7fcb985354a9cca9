//! Why the preflight could not run, or why a GET against a Dynamo service gave no body.

use super::*;

/// Why the preflight could not run or stops the run. Bad input only when a blocking problem is
/// the plan's.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error(
        "preflight failed: {} (run `sy-collect preflight` for the full table; --no-preflight \
         skips it)",
        .problems.join("; ")
    )]
    Blocked {
        problems: Vec<String>,
        /// The worst problem is the plan's (exit 2), not the deployment's (exit 1).
        plan_at_fault: bool,
    },
    #[error(
        "target unreachable: the frontend at {frontend_url} did not answer GET /v1/models \
         ({source}): {HINT}"
    )]
    FrontendUnreachable {
        frontend_url: String,
        #[source]
        source: GetError,
    },
    #[error("GET {frontend_url}/v1/models: not an OpenAI model list: {source}")]
    NotAModelList {
        frontend_url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "target unreachable: the selection service at {selection_url} did not answer GET \
         /workers ({source}): {HINT}"
    )]
    SelectionUnreachable {
        selection_url: String,
        #[source]
        source: sy_dynamo::CallError,
    },
    #[error("preflight failed: no pilot run")]
    NoPilot,
}

impl PreflightError {
    /// Whether the plan is at fault (exit 2) rather than the deployment (exit 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            PreflightError::Blocked {
                plan_at_fault: true,
                ..
            }
        )
    }
}

/// Why one GET against a Dynamo service gave no body.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// No answer (the transport's message).
    #[error("{0}")]
    Unreachable(String),
    #[error("{0}")]
    Body(#[source] reqwest::Error),
    /// Not 2xx: the status and the start of the body.
    #[error("HTTP {status}: {body}")]
    Status { status: u16, body: String },
}
