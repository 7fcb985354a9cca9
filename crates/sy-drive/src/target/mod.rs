//! Where the requests go: the embedded simulator (`--target sim`, started in this process) or a
//! Dynamo deployment (`--target dynamo`, URLs from flags, the plan, or the defaults of
//! `scripts/dynamo-local.sh`), and what the target reports about its versions ([`versions`]).

pub mod error;
pub mod versions;

use std::collections::BTreeMap;
use std::path::PathBuf;

pub use error::TargetError;
pub use versions::{TargetVersions, UNKNOWN_VERSION, VersionError, dynamo_versions};

/// Default frontend URL (matches `scripts/dynamo-local.sh`).
pub const DEFAULT_FRONTEND_URL: &str = "http://127.0.0.1:18000";
/// Default selection-service URL (matches `scripts/dynamo-local.sh`).
pub const DEFAULT_SELECTION_URL: &str = "http://127.0.0.1:18092";

/// The manifest's version key of the embedded simulator.
pub const SIM_COMPONENT: &str = "sy-sim";

/// Which deployment a run drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TargetKind {
    /// The embedded Dynamo-compatible simulator, started in-process.
    Sim,
    /// A running Dynamo deployment.
    Dynamo,
}

impl TargetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Sim => "sim",
            TargetKind::Dynamo => "dynamo",
        }
    }
}

/// Where a target is, as far as the caller knows (flags first, then the plan): a Dynamo target
/// without a URL gets [`DEFAULT_FRONTEND_URL`] / [`DEFAULT_SELECTION_URL`]; the simulator uses
/// its configuration file, or its defaults without one.
#[derive(Debug, Clone, Default)]
pub struct Endpoints {
    pub frontend_url: Option<String>,
    pub selection_url: Option<String>,
    pub sim_config: Option<PathBuf>,
}

/// A started target.
#[derive(Debug)]
pub struct Target {
    pub kind: TargetKind,
    pub frontend_url: String,
    pub selection_url: String,
    /// What is known without asking (the embedded simulator's version); a Dynamo target is
    /// asked by [`Target::versions`].
    pub versions: BTreeMap<String, String>,
    #[cfg(feature = "sim")]
    sim: Option<sy_sim::SimHandle>,
}

impl Target {
    /// Starts the simulator (on two free loopback ports) or resolves a Dynamo deployment's URLs;
    /// nothing is sent to a Dynamo deployment here.
    pub async fn start(kind: TargetKind, endpoints: &Endpoints) -> Result<Target, TargetError> {
        match kind {
            TargetKind::Sim => start_sim(endpoints).await,
            TargetKind::Dynamo => Ok(Target {
                kind,
                frontend_url: endpoints
                    .frontend_url
                    .clone()
                    .unwrap_or_else(|| DEFAULT_FRONTEND_URL.into()),
                selection_url: endpoints
                    .selection_url
                    .clone()
                    .unwrap_or_else(|| DEFAULT_SELECTION_URL.into()),
                versions: BTreeMap::new(),
                #[cfg(feature = "sim")]
                sim: None,
            }),
        }
    }

    /// The simulator handle (tests inject faults through it).
    #[cfg(feature = "sim")]
    pub fn sim(&self) -> Option<&sy_sim::SimHandle> {
        self.sim.as_ref()
    }

    pub async fn shutdown(self) {
        #[cfg(feature = "sim")]
        if let Some(h) = self.sim {
            h.shutdown().await;
        }
    }
}

/// Starts the embedded simulator on two free loopback ports, from its configuration file or its
/// defaults.
#[cfg(feature = "sim")]
async fn start_sim(endpoints: &Endpoints) -> Result<Target, TargetError> {
    let config = match &endpoints.sim_config {
        Some(p) => sy_sim::SimConfig::from_toml_path(p).map_err(TargetError::SimConfig)?,
        None => sy_sim::SimConfig::default(),
    };
    let handle = sy_sim::spawn(config).await.map_err(TargetError::SimStart)?;
    // sy-sim is compiled into this binary from the same workspace, which gives every crate one
    // version: this crate's version is sy-sim's.
    let mut versions = BTreeMap::new();
    versions.insert(SIM_COMPONENT.into(), env!("CARGO_PKG_VERSION").into());
    Ok(Target {
        kind: TargetKind::Sim,
        frontend_url: handle.frontend_url(),
        selection_url: handle.selection_url(),
        versions,
        sim: Some(handle),
    })
}

/// A build without the `sim` feature has no simulator to start.
#[cfg(not(feature = "sim"))]
async fn start_sim(_: &Endpoints) -> Result<Target, TargetError> {
    Err(TargetError::SimNotBuilt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dynamo_target_gets_the_default_urls() {
        let t = Target::start(TargetKind::Dynamo, &Endpoints::default())
            .await
            .unwrap();
        assert_eq!(
            (t.frontend_url.as_str(), t.selection_url.as_str()),
            (DEFAULT_FRONTEND_URL, DEFAULT_SELECTION_URL)
        );
        assert!(t.versions.is_empty());
        let given = Endpoints {
            frontend_url: Some("http://127.0.0.1:1".into()),
            ..Endpoints::default()
        };
        let t = Target::start(TargetKind::Dynamo, &given).await.unwrap();
        assert_eq!(t.frontend_url, "http://127.0.0.1:1");
    }

    #[cfg(feature = "sim")]
    #[tokio::test]
    async fn the_simulator_starts_on_loopback_with_its_version() {
        let t = Target::start(TargetKind::Dynamo, &Endpoints::default())
            .await
            .unwrap();
        assert!(t.sim().is_none());
        let sim = Target::start(TargetKind::Sim, &Endpoints::default())
            .await
            .unwrap();
        assert!(sim.frontend_url.starts_with("http://127.0.0.1:"));
        assert_eq!(sim.versions[SIM_COMPONENT], env!("CARGO_PKG_VERSION"));
        sim.shutdown().await;
    }

    #[cfg(feature = "sim")]
    #[tokio::test]
    async fn a_missing_simulator_configuration_names_the_file() {
        let endpoints = Endpoints {
            sim_config: Some("/nonexistent/sim.toml".into()),
            ..Endpoints::default()
        };
        let err = Target::start(TargetKind::Sim, &endpoints)
            .await
            .unwrap_err();
        assert!(matches!(err, TargetError::SimConfig(_)));
        assert!(err.to_string().contains("/nonexistent/sim.toml"), "{err}");
    }

    /// What `scripts/test.sh` checks in its build without the feature (`cargo nextest run -p
    /// sy-drive --lib`): the simulator is refused as bad input, and the message says how to get it.
    #[cfg(not(feature = "sim"))]
    #[tokio::test]
    async fn a_build_without_the_simulator_refuses_it_and_says_how_to_build_it() {
        let err = Target::start(TargetKind::Sim, &Endpoints::default())
            .await
            .unwrap_err();
        assert!(matches!(err, TargetError::SimNotBuilt) && err.is_bad_input());
        let msg = err.to_string();
        assert!(
            msg.contains("--features sim") && msg.contains("--target dynamo"),
            "{msg}"
        );
    }
}
