//! Client settings: URLs, timeouts and an optional bearer token (never logged).

use std::time::Duration;

/// Settings shared by the completion and the selection client.
#[derive(Clone)]
pub struct ClientConfig {
    pub frontend_url: String,
    pub selection_url: String,
    pub connect_timeout: Duration,
    /// Time allowed until the first non-empty token.
    pub first_token_timeout: Duration,
    /// Time allowed for a whole streamed request.
    pub request_timeout: Duration,
    /// Time allowed for one selection-service call.
    pub selection_timeout: Duration,
    /// Sent as `Authorization: Bearer …` to the frontend and the selection service.
    pub bearer_token: Option<String>,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("frontend_url", &self.frontend_url)
            .field("selection_url", &self.selection_url)
            .field("connect_timeout", &self.connect_timeout)
            .field("first_token_timeout", &self.first_token_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("selection_timeout", &self.selection_timeout)
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl ClientConfig {
    /// Loopback defaults with generous timeouts.
    pub fn new(frontend_url: impl Into<String>, selection_url: impl Into<String>) -> Self {
        Self {
            frontend_url: trim_slash(frontend_url.into()),
            selection_url: trim_slash(selection_url.into()),
            connect_timeout: Duration::from_secs(2),
            first_token_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(300),
            selection_timeout: Duration::from_secs(5),
            bearer_token: None,
        }
    }

    /// The shared HTTP client (connection pool, no proxy, TCP_NODELAY).
    pub fn http_client(&self) -> Result<reqwest::Client, reqwest::Error> {
        reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true)
            .no_proxy()
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
    }
}

fn trim_slash(mut s: String) -> String {
    while s.ends_with('/') {
        s.pop();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_token() {
        let mut c = ClientConfig::new("http://127.0.0.1:1/", "http://127.0.0.1:2");
        c.bearer_token = Some("s3cret".into());
        let text = format!("{c:?}");
        assert!(!text.contains("s3cret"), "{text}");
        assert_eq!(c.frontend_url, "http://127.0.0.1:1");
    }
}
