//! Failure classification: every failed call says what kind of failure it was.

/// What went wrong with a call. `sy-collect` maps these onto `sy_records::ErrorClass`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// TCP connect refused or reset before an HTTP answer.
    Connect,
    /// No answer, or no first token, in time.
    Timeout,
    /// HTTP 4xx.
    Http4xx,
    /// HTTP 5xx.
    Http5xx,
    /// An `error` event inside a started stream.
    StreamError,
    /// The stream ended without `[DONE]`.
    StreamDropped,
    /// The stream finished without a non-empty token.
    NoContent,
    /// An answer that could not be parsed.
    Protocol,
    /// Cancelled by the caller (Ctrl-C).
    Cancelled,
    /// The deployment refused the request as misconfigured — e.g. a pin to a worker with several
    /// data-parallel ranks that names no rank. Retrying cannot help.
    Configuration,
}

impl FailureKind {
    /// Whether a retry may succeed (a new worker, a restarted server, a passing stall).
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            FailureKind::Connect
                | FailureKind::Timeout
                | FailureKind::Http5xx
                | FailureKind::StreamError
                | FailureKind::StreamDropped
        )
    }

    /// From an HTTP status that is not a success.
    pub fn from_status(status: u16) -> Self {
        if (400..500).contains(&status) {
            FailureKind::Http4xx
        } else {
            FailureKind::Http5xx
        }
    }
}

/// A failed call: its kind, the HTTP status if there was one, and a message for the record.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct CallError {
    pub kind: FailureKind,
    pub status: Option<u16>,
    pub message: String,
    /// Overrides the kind's transience when a caller knows more than the status: e.g. an HTTP
    /// 400 for a pinned request while the frontend has not (re)discovered the pinned instance
    /// yet is transient although 4xx normally is not. `None`: the kind decides.
    pub retryable: Option<bool>,
}

impl CallError {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            status: None,
            message: message.into(),
            retryable: None,
        }
    }

    /// A failed HTTP answer. A 5xx whose message says a pin lacks its data-parallel rank is a
    /// [`FailureKind::Configuration`] error, not a transient one.
    pub fn status(status: u16, message: impl Into<String>) -> Self {
        let message = message.into();
        let kind = if status >= 500 && says_pin_incomplete(&message) {
            FailureKind::Configuration
        } else {
            FailureKind::from_status(status)
        };
        Self {
            kind,
            status: Some(status),
            message,
            retryable: None,
        }
    }

    /// Classifies a transport error from reqwest.
    pub fn from_reqwest(what: &str, e: &reqwest::Error) -> Self {
        let kind = if e.is_timeout() {
            FailureKind::Timeout
        } else if e.is_connect() {
            FailureKind::Connect
        } else if e.is_decode() {
            FailureKind::Protocol
        } else if e.is_body() {
            FailureKind::StreamDropped
        } else {
            FailureKind::Connect
        };
        // reqwest's Display does not include the bearer token; the URL has no credentials.
        Self::new(kind, with_sources(what, e))
    }

    /// Classifies a transport error of the timed client ([`crate::transport`]).
    pub fn from_transport(what: &str, e: &hyper_util::client::legacy::Error) -> Self {
        let kind = if e.is_connect() {
            FailureKind::Connect
        } else {
            // The request was sent (or the pooled connection died under it): no answer came.
            FailureKind::StreamDropped
        };
        Self::new(kind, with_sources(what, e))
    }

    /// Whether a retry may succeed: the caller's override if set, else the kind's default.
    pub fn is_transient(&self) -> bool {
        self.retryable.unwrap_or_else(|| self.kind.is_transient())
    }

    /// Whether this is an HTTP 400 whose message says the pinned instance is unknown or gone
    /// (some frontends say so; Dynamo 1.6.1 answers only `Invalid request`, so the caller must
    /// also check the frontend's instance list).
    pub fn says_unknown_instance(&self) -> bool {
        if self.status != Some(400) {
            return false;
        }
        let m = self.message.to_ascii_lowercase();
        (m.contains("instance") || m.contains("worker"))
            && [
                "unknown",
                "not found",
                "no such",
                "not available",
                "does not exist",
            ]
            .iter()
            .any(|w| m.contains(w))
    }
}

/// `what: error: source: source…` — the whole chain of a transport error, for the record.
fn with_sources(what: &str, e: &(dyn std::error::Error + 'static)) -> String {
    let mut message = format!("{what}: {e}");
    let mut source = e.source();
    while let Some(s) = source {
        message.push_str(&format!(": {s}"));
        source = s.source();
    }
    message
}

/// Whether a server message says a pinned request lacks the data-parallel rank it needs (Dynamo
/// 1.6.1 logs "Pinned worker … requires an explicit dp_rank"; its HTTP answer says only "Failed
/// to generate completions", which the collector never provokes: every pin carries the reserved
/// rank).
fn says_pin_incomplete(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("dp_rank") && (m.contains("requires") || m.contains("missing"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_overrides_the_kind() {
        let mut e = CallError::status(400, "frontend HTTP 400: Invalid request");
        assert_eq!(e.kind, FailureKind::Http4xx);
        assert!(!e.is_transient());
        e.retryable = Some(true);
        assert!(e.is_transient());
        let mut f = CallError::status(503, "x");
        assert!(f.is_transient());
        f.retryable = Some(false);
        assert!(!f.is_transient());
    }

    #[test]
    fn a_pin_without_its_rank_is_a_configuration_error() {
        let e = CallError::status(
            500,
            "frontend HTTP 500: Pinned worker 7 requires an explicit dp_rank because it has multiple or unknown DP ranks",
        );
        assert_eq!(e.kind, FailureKind::Configuration);
        assert!(!e.is_transient(), "never silently retried");
        assert_eq!(
            CallError::status(500, "Failed to generate completions").kind,
            FailureKind::Http5xx
        );
    }

    #[test]
    fn unknown_instance_messages() {
        assert!(
            CallError::status(400, "frontend HTTP 400: instance 123 not found")
                .says_unknown_instance()
        );
        assert!(
            CallError::status(400, "frontend HTTP 400: Unknown worker instance 7")
                .says_unknown_instance()
        );
        // Dynamo 1.6.1's actual answer carries no detail.
        assert!(
            !CallError::status(400, "frontend HTTP 400: Invalid request").says_unknown_instance()
        );
        // Only a 400.
        assert!(!CallError::status(503, "instance 1 not found").says_unknown_instance());
    }
}
