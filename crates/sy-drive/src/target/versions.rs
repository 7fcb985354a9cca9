//! The versions of a target's components, for the manifest: the embedded simulator's own
//! version, or what a Dynamo deployment reports about itself.

use std::collections::BTreeMap;

use super::{Target, TargetKind};

/// Written for a component whose version the target does not report.
pub const UNKNOWN_VERSION: &str = "unknown";

/// Versions of the target's components (component → version, [`UNKNOWN_VERSION`] when it does
/// not say), and where each came from (component → source), for the manifest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetVersions {
    pub versions: BTreeMap<String, String>,
    pub sources: BTreeMap<String, String>,
}

impl TargetVersions {
    fn set(&mut self, component: &str, version: &str, source: String) {
        self.versions.insert(component.into(), version.into());
        self.sources.insert(component.into(), source);
    }
}

/// Why a component's version is not known (recorded as the version's source).
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    /// No answer (the transport's message).
    #[error("{0}")]
    Unreachable(String),
    #[error("HTTP {0}")]
    Status(u16),
    #[error("not JSON: {0}")]
    NotJson(#[source] reqwest::Error),
    #[error("no info.version")]
    NoVersion,
}

/// `info.version` (and `info.title`) of an OpenAPI document at `url`: Dynamo's frontend serves
/// one at `/openapi.json` whose version is the Dynamo release (1.6.1: `"1.6.1"`).
async fn openapi_version(
    http: &reqwest::Client,
    bearer: Option<&str>,
    url: &str,
) -> Result<(String, String), VersionError> {
    let mut req = http.get(url).timeout(std::time::Duration::from_secs(5));
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.map_err(|e| {
        VersionError::Unreachable(sy_dynamo::CallError::from_reqwest("", &e).message)
    })?;
    let status = resp.status();
    if !status.is_success() {
        return Err(VersionError::Status(status.as_u16()));
    }
    let doc: serde_json::Value = resp.json().await.map_err(VersionError::NotJson)?;
    let info = &doc["info"];
    match info["version"].as_str().map(str::trim) {
        Some(v) if !v.is_empty() => Ok((
            v.to_string(),
            info["title"].as_str().unwrap_or("").to_string(),
        )),
        _ => Err(VersionError::NoVersion),
    }
}

/// Asks a Dynamo deployment for its versions. What Dynamo 1.6.1 exposes (checked on the local
/// stack): the frontend's `GET /openapi.json` carries the release as `info.version`; its
/// `/health`, `/metrics` and `/v1/models` carry none; the selection service has no version
/// route (`/openapi.json`, `/version`: 404); worker versions are reachable through neither.
/// Whatever is not reported is recorded as [`UNKNOWN_VERSION`], with the reason as its source.
pub async fn dynamo_versions(
    http: &reqwest::Client,
    bearer: Option<&str>,
    frontend_url: &str,
    selection_url: &str,
) -> TargetVersions {
    let mut out = TargetVersions::default();
    for (component, base) in [
        ("dynamo-frontend", frontend_url),
        ("dynamo-selection-service", selection_url),
    ] {
        let url = format!("{base}/openapi.json");
        match openapi_version(http, bearer, &url).await {
            Ok((version, title)) => out.set(
                component,
                &version,
                format!("GET {url} info.version (title {title:?})"),
            ),
            Err(why) => out.set(
                component,
                UNKNOWN_VERSION,
                format!("not reported (GET {url}: {why})"),
            ),
        }
    }
    out.set(
        "dynamo-workers",
        UNKNOWN_VERSION,
        "not reported: neither the frontend nor the selection service exposes worker versions"
            .into(),
    );
    out
}

impl Target {
    /// The versions of the target's components, for the manifest: the embedded simulator's
    /// own version, or what a Dynamo deployment reports ([`dynamo_versions`]).
    pub async fn versions(&self, http: &reqwest::Client, bearer: Option<&str>) -> TargetVersions {
        match self.kind {
            TargetKind::Sim => {
                let mut out = TargetVersions::default();
                for (k, v) in &self.versions {
                    out.set(
                        k,
                        v,
                        "the embedded simulator (compiled into this sy-collect; same workspace \
                         version); it emulates the Dynamo 1.6.1 HTTP interfaces"
                            .into(),
                    );
                }
                out
            }
            TargetKind::Dynamo => {
                dynamo_versions(http, bearer, &self.frontend_url, &self.selection_url).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-route HTTP server on 127.0.0.1: `GET /openapi.json` answers `openapi` (200) when
    /// given, 404 otherwise.
    async fn stub(openapi: Option<&'static str>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let mut buf = vec![0u8; 4096];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let (status, body) = match openapi {
                    Some(b) if head.starts_with("GET /openapi.json ") => ("200 OK", b),
                    _ => ("404 Not Found", r#"{"error":"route not found"}"#),
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn dynamo_versions_report_what_is_exposed_and_unknown_otherwise() {
        // Shaped like Dynamo 1.6.1: the frontend's OpenAPI document carries the release, the
        // selection service has no version route.
        let frontend = stub(Some(
            r#"{"openapi":"3.1.0","info":{"title":"NVIDIA Dynamo OpenAI Frontend","version":"1.6.1"},"paths":{}}"#,
        ))
        .await;
        let selection = stub(None).await;
        let http = reqwest::Client::new();
        let v = dynamo_versions(&http, None, &frontend, &selection).await;
        assert_eq!(v.versions["dynamo-frontend"], "1.6.1");
        assert!(
            v.sources["dynamo-frontend"].contains("/openapi.json info.version"),
            "{v:?}"
        );
        assert!(v.sources["dynamo-frontend"].contains("NVIDIA Dynamo OpenAI Frontend"));
        assert_eq!(v.versions["dynamo-selection-service"], UNKNOWN_VERSION);
        assert!(
            v.sources["dynamo-selection-service"].contains("HTTP 404"),
            "{v:?}"
        );
        assert_eq!(v.versions["dynamo-workers"], UNKNOWN_VERSION);
        assert_eq!(v.versions.len(), 3);

        // An OpenAPI document without a version, and a target that does not answer at all.
        let no_version = stub(Some(r#"{"info":{"title":"x"}}"#)).await;
        let v = dynamo_versions(&http, None, &no_version, "http://127.0.0.1:1").await;
        assert_eq!(v.versions["dynamo-frontend"], UNKNOWN_VERSION);
        assert!(v.sources["dynamo-frontend"].contains("no info.version"));
        assert_eq!(v.versions["dynamo-selection-service"], UNKNOWN_VERSION);
    }
}
