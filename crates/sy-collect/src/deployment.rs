//! The deployment description (`--describe FILE`) and KV-event endpoint lists.
//!
//! The frontend does not report where a worker publishes its KV events, and a worker's instance
//! id is only known once it runs. So the description names each worker by what the operator
//! chose when launching it — its system status URL (`DYN_SYSTEM_PORT`) — and the preflight reads
//! the worker's instance id from that URL's `/metrics` (the `worker_id` label of Dynamo's
//! `dynamo_component_*` series). Nothing is copied by hand.
//!
//! ```toml
//! [deployment]                     # all optional; copied into the run manifest
//! dynamo_version = "1.6.1"
//! gpu = "NVIDIA H100 80GB HBM3"
//! driver = "570.124.06"
//! launch = ["python -m dynamo.frontend --http-port 8000 --router-mode kv", "..."]
//!
//! [[workers]]
//! system_url = "http://127.0.0.1:8100"      # the worker's DYN_SYSTEM_PORT
//! kv_events = "tcp://127.0.0.1:20080"       # one endpoint per data-parallel rank
//! model = "efficient"                       # optional: checked against the frontend
//! engine = "vllm 0.11.0"                    # optional, for the manifest
//! gpus_per_rank = 1                         # tensor-parallel size (GPU time = ranks × this)
//!
//! [[workers]]
//! system_url = "http://127.0.0.1:8101"
//! kv_events = "tcp://127.0.0.1:20084-20087" # a port range: rank r on 20084 + r
//! gpus_per_rank = 1
//! ```
//!
//! A KV-event list is `tcp://HOST:PORT`, a range `tcp://HOST:FIRST-LAST` (one port per rank,
//! in rank order), or a comma-separated list of either (`tcp://h:1,tcp://h:2`; a bare `PORT` or
//! `FIRST-LAST` after the first item reuses the previous host).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sy_rundir::artifact::manifest::{Provenance, WorkerDescription};

/// The whole description file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Description {
    #[serde(default)]
    pub deployment: Provenance,
    #[serde(default)]
    pub workers: Vec<WorkerDescription>,
}

/// A description file read and checked.
#[derive(Debug, Clone)]
pub struct LoadedDescription {
    pub path: PathBuf,
    pub description: Description,
    /// Per worker (same order): its KV-event endpoints, rank order.
    pub endpoints: Vec<Vec<String>>,
}

/// A description file that cannot be used; the message names the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum DescriptionError {
    #[error("{}: cannot read the description: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", .path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error(
        "{}: workers[{index}].system_url {url:?}: expected http://HOST:PORT (the worker's \
         DYN_SYSTEM_PORT)",
        .path.display()
    )]
    SystemUrl {
        path: PathBuf,
        index: usize,
        url: String,
    },
    #[error("{}: workers[{index}].gpus_per_rank: must be at least 1", .path.display())]
    GpusPerRank { path: PathBuf, index: usize },
    #[error("{}: workers[{index}].kv_events: {source}", .path.display())]
    KvEvents {
        path: PathBuf,
        index: usize,
        #[source]
        source: EndpointError,
    },
}

/// A KV-event endpoint list that cannot be used; the message quotes the list or the item.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EndpointError {
    #[error("{list:?}: an empty item")]
    EmptyItem { list: String },
    #[error("{item:?}: expected tcp://HOST:PORT")]
    NoPort { item: String },
    #[error("{item:?}: no host")]
    NoHost { item: String },
    #[error(
        "{item:?}: expected tcp://HOST:PORT, tcp://HOST:FIRST-LAST or a comma-separated list of \
         them"
    )]
    NotAnEndpoint { item: String },
    #[error("{item:?}: {port:?} is not a port")]
    NotAPort { item: String, port: String },
    #[error("{item:?}: the range ends before it starts")]
    Backwards { item: String },
    #[error("{list:?}: endpoint {endpoint} appears twice (every rank needs its own)")]
    Twice { list: String, endpoint: String },
}

/// A duration flag that cannot be read; the message quotes the value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DurationError {
    #[error("{0:?}: expected a duration such as 90s, 10m or 1h")]
    NotADuration(String),
    #[error("{value:?}: unknown unit {unit:?} (ms, s, m, h)")]
    UnknownUnit { value: String, unit: String },
    #[error("{0:?}: out of range")]
    OutOfRange(String),
}

/// Reads and checks a description file; the error names the file and the field.
pub fn load(path: &Path) -> Result<LoadedDescription, DescriptionError> {
    let text = std::fs::read_to_string(path).map_err(|source| DescriptionError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let description: Description =
        toml::from_str(&text).map_err(|source| DescriptionError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
    let mut endpoints = Vec::new();
    for (index, w) in description.workers.iter().enumerate() {
        if !w.system_url.starts_with("http://") {
            return Err(DescriptionError::SystemUrl {
                path: path.to_path_buf(),
                index,
                url: w.system_url.clone(),
            });
        }
        if w.gpus_per_rank == Some(0) {
            return Err(DescriptionError::GpusPerRank {
                path: path.to_path_buf(),
                index,
            });
        }
        endpoints.push(parse_endpoints(&w.kv_events).map_err(|source| {
            DescriptionError::KvEvents {
                path: path.to_path_buf(),
                index,
                source,
            }
        })?);
    }
    Ok(LoadedDescription {
        path: path.to_path_buf(),
        description,
        endpoints,
    })
}

/// Parses a KV-event endpoint list into one `tcp://HOST:PORT` per rank.
pub fn parse_endpoints(s: &str) -> Result<Vec<String>, EndpointError> {
    let mut out = Vec::new();
    let mut host: Option<String> = None;
    for item in s.split(',').map(str::trim) {
        let it = || item.to_string();
        if item.is_empty() {
            return Err(EndpointError::EmptyItem {
                list: s.to_string(),
            });
        }
        let ports = if let Some(rest) = item.strip_prefix("tcp://") {
            let (h, p) = rest
                .rsplit_once(':')
                .ok_or_else(|| EndpointError::NoPort { item: it() })?;
            if h.is_empty() {
                return Err(EndpointError::NoHost { item: it() });
            }
            host = Some(h.to_string());
            p
        } else if host.is_some() {
            item
        } else {
            return Err(EndpointError::NotAnEndpoint { item: it() });
        };
        let h = host.clone().unwrap_or_default();
        let port = |p: &str| -> Result<u16, EndpointError> {
            p.trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| EndpointError::NotAPort {
                    item: it(),
                    port: p.to_string(),
                })
        };
        match ports.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (port(a)?, port(b)?);
                if b < a {
                    return Err(EndpointError::Backwards { item: it() });
                }
                out.extend((a..=b).map(|p| format!("tcp://{h}:{p}")));
            }
            None => out.push(format!("tcp://{h}:{}", port(ports)?)),
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(dup) = out.iter().find(|e| !seen.insert(e.as_str())) {
        return Err(EndpointError::Twice {
            list: s.to_string(),
            endpoint: dup.clone(),
        });
    }
    Ok(out)
}

/// The shortest list argument for `endpoints`: a range when the ports are consecutive on one
/// host, else a comma-separated list.
pub fn format_endpoints(endpoints: &[String]) -> String {
    let split = |e: &str| -> Option<(String, u16)> {
        let (h, p) = e.strip_prefix("tcp://")?.rsplit_once(':')?;
        Some((h.to_string(), p.parse().ok()?))
    };
    let parts: Option<Vec<(String, u16)>> = endpoints.iter().map(|e| split(e)).collect();
    if let Some(parts) = parts
        && parts.len() > 1
        && parts.iter().all(|(h, _)| *h == parts[0].0)
        && parts
            .windows(2)
            .all(|w| w[1].1.checked_sub(w[0].1) == Some(1))
    {
        let (h, first) = &parts[0];
        return format!("tcp://{h}:{first}-{}", parts[parts.len() - 1].1);
    }
    endpoints.join(",")
}

/// A duration: `90s`, `10m`, `1h`, `500ms`, or bare seconds.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let t = s.trim();
    let (num, unit) = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or((t, ""), |i| t.split_at(i));
    let v: f64 = num
        .parse()
        .map_err(|_| DurationError::NotADuration(s.to_string()))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1e3,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => {
            return Err(DurationError::UnknownUnit {
                value: s.to_string(),
                unit: unit.to_string(),
            });
        }
    };
    if !secs.is_finite() || !(0.0..=7.0 * 86400.0).contains(&secs) {
        return Err(DurationError::OutOfRange(s.to_string()));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Why a worker's instance id could not be read from its `/metrics`.
#[derive(Debug, thiserror::Error)]
pub enum InstanceIdError {
    #[error("GET {url}: {source}")]
    Get {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("GET {url}: no worker_id label yet (the worker has not registered its endpoint)")]
    NoLabel { url: String },
}

/// A worker's instance id from its system status server's `/metrics` (the `worker_id` label,
/// hexadecimal, of Dynamo's `dynamo_component_*` series), or why not.
pub async fn instance_id(http: &reqwest::Client, system_url: &str) -> Result<u64, InstanceIdError> {
    let url = format!("{}/metrics", system_url.trim_end_matches('/'));
    let get = |source| InstanceIdError::Get {
        url: url.clone(),
        source,
    };
    let resp = http
        .get(&url)
        .timeout(Duration::from_secs(3))
        .send()
        .await
        .map_err(get)?;
    let text = resp.text().await.map_err(get)?;
    instance_id_in(&text).ok_or_else(|| InstanceIdError::NoLabel { url: url.clone() })
}

/// The first `worker_id="…"` label of a Prometheus page, hexadecimal.
pub fn instance_id_in(text: &str) -> Option<u64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let rest = &l[l.find("worker_id=\"")? + "worker_id=\"".len()..];
        let hex = &rest[..rest.find('"')?];
        u64::from_str_radix(hex, 16).ok()
    })
}

/// KV-event endpoints per instance id, from the description (workers whose id cannot be read
/// are returned as problems, naming the system URL).
pub async fn resolve(
    http: &reqwest::Client,
    d: &LoadedDescription,
) -> (BTreeMap<u64, (usize, Vec<String>)>, Vec<String>) {
    let mut map = BTreeMap::new();
    let mut problems = Vec::new();
    for (i, (w, eps)) in d.description.workers.iter().zip(&d.endpoints).enumerate() {
        match instance_id(http, &w.system_url).await {
            Ok(id) => {
                map.insert(id, (i, eps.clone()));
            }
            Err(e) => problems.push(format!(
                "{}: workers[{i}] ({}): cannot read its instance id: {e}",
                d.path.display(),
                w.system_url
            )),
        }
    }
    (map, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_lists_ranges_and_hosts() {
        assert_eq!(
            parse_endpoints("tcp://127.0.0.1:20080").unwrap(),
            vec!["tcp://127.0.0.1:20080"]
        );
        assert_eq!(
            parse_endpoints("tcp://h:20084-20087").unwrap(),
            vec![
                "tcp://h:20084",
                "tcp://h:20085",
                "tcp://h:20086",
                "tcp://h:20087"
            ]
        );
        assert_eq!(
            parse_endpoints("tcp://a:1,2, tcp://b:7-8").unwrap(),
            vec!["tcp://a:1", "tcp://a:2", "tcp://b:7", "tcp://b:8"]
        );
        for bad in [
            "20080",
            "tcp://h",
            "tcp://:1",
            "tcp://h:9-8",
            "tcp://h:0",
            "tcp://h:1,1",
            "tcp://h:70000",
            "tcp://h:1,,2",
        ] {
            assert!(parse_endpoints(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn endpoints_format_back_to_the_shortest_argument() {
        for s in ["tcp://h:5", "tcp://h:5-8", "tcp://h:5,tcp://h:9"] {
            assert_eq!(format_endpoints(&parse_endpoints(s).unwrap()), s);
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        for bad in ["", "ten", "5d", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn instance_id_from_worker_metrics() {
        let t = "# HELP x\ndynamo_component_requests_total{dynamo_endpoint=\"generate\",\
                 worker_id=\"3001bbe0f4e21171\"} 0\n";
        assert_eq!(instance_id_in(t), Some(0x3001_bbe0_f4e2_1171));
        assert_eq!(instance_id_in("up 1\n"), None);
    }

    #[test]
    fn description_file_is_checked() {
        let dir = std::env::temp_dir().join(format!("sy-describe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("d.toml");
        std::fs::write(
            &p,
            "[deployment]\ngpu = \"H100\"\n[[workers]]\nsystem_url = \"http://127.0.0.1:8100\"\n\
             kv_events = \"tcp://127.0.0.1:20080-20081\"\ngpus_per_rank = 2\n",
        )
        .unwrap();
        let d = load(&p).unwrap();
        assert_eq!(d.endpoints[0].len(), 2);
        assert_eq!(d.description.deployment.gpu.as_deref(), Some("H100"));
        std::fs::write(
            &p,
            "[[workers]]\nsystem_url = \"http://x:1\"\nkv_events = \"nope\"\n",
        )
        .unwrap();
        let e = load(&p).unwrap_err();
        assert!(matches!(e, DescriptionError::KvEvents { index: 0, .. }));
        assert!(e.to_string().contains("workers[0].kv_events"), "{e}");
        std::fs::write(&p, "[[workers]]\nsystem_url = \"http://x:1\"\n").unwrap();
        assert!(load(&p).unwrap_err().to_string().contains("kv_events"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
