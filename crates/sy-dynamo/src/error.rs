//! Failure classification: every failed call says what kind of failure it was.

pub use sy_wire::ErrorClass;

/// A failed call: its kind, the HTTP status if there was one, and a message for the record.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct CallError {
    pub kind: ErrorClass,
    pub status: Option<u16>,
    pub message: String,
    /// Overrides the kind's transience when a caller knows more than the status: e.g. an HTTP
    /// 400 for a pinned request while the frontend has not (re)discovered the pinned instance
    /// yet is transient although 4xx normally is not. `None`: the kind decides.
    pub retryable: Option<bool>,
}

impl CallError {
    pub fn new(kind: ErrorClass, message: impl Into<String>) -> Self {
        Self {
            kind,
            status: None,
            message: message.into(),
            retryable: None,
        }
    }

    /// A failed HTTP answer. A 5xx whose message says a pin lacks its data-parallel rank is a
    /// [`ErrorClass::Configuration`] error, not a transient one.
    pub fn status(status: u16, message: impl Into<String>) -> Self {
        let message = message.into();
        let kind = if status >= 500 && says_pin_incomplete(&message) {
            ErrorClass::Configuration
        } else {
            ErrorClass::from_status(status)
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
            ErrorClass::Timeout
        } else if e.is_connect() {
            ErrorClass::Connect
        } else if e.is_decode() {
            ErrorClass::Protocol
        } else if e.is_body() {
            ErrorClass::StreamDropped
        } else {
            ErrorClass::Connect
        };
        // reqwest's Display does not include the bearer token; the URL has no credentials.
        Self::new(kind, with_sources(what, e))
    }

    /// Classifies a transport error of the timed client ([`crate::transport`]).
    pub fn from_transport(what: &str, e: &hyper_util::client::legacy::Error) -> Self {
        let kind = if e.is_connect() {
            ErrorClass::Connect
        } else {
            // The request was sent (or the pooled connection died under it): no answer came.
            ErrorClass::StreamDropped
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
        assert_eq!(e.kind, ErrorClass::Http4xx);
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
        assert_eq!(e.kind, ErrorClass::Configuration);
        assert!(!e.is_transient(), "never silently retried");
        assert_eq!(
            CallError::status(500, "Failed to generate completions").kind,
            ErrorClass::Http5xx
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
