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
}

impl CallError {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            status: None,
            message: message.into(),
        }
    }

    pub fn status(status: u16, message: impl Into<String>) -> Self {
        Self {
            kind: FailureKind::from_status(status),
            status: Some(status),
            message: message.into(),
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
        let mut message = format!("{what}: {e}");
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            message.push_str(&format!(": {s}"));
            source = s.source();
        }
        Self::new(kind, message)
    }

    pub fn is_transient(&self) -> bool {
        self.kind.is_transient()
    }
}
