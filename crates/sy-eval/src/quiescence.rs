//! A shared Dynamo deployment before a block: it serves both models, its selection service
//! knows workers, and nothing is booked (the block's matched starting state).

use sy_dynamo::{ClientConfig, SelectionClient};

use crate::plan::Models;

/// A deployment that cannot host a block (a runtime failure: the deployment, not the input).
#[derive(Debug, thiserror::Error)]
pub enum QuiescenceError {
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    #[error(
        "target unreachable: the frontend at {frontend} did not answer GET /v1/models: {source}"
    )]
    FrontendUnreachable {
        frontend: String,
        #[source]
        source: reqwest::Error,
    },
    #[error(
        "the frontend at {frontend} does not serve model `{model}` (GET /v1/models lists \
         {listed:?})"
    )]
    ModelMissing {
        frontend: String,
        model: String,
        listed: Vec<String>,
    },
    #[error(
        "target unreachable: the selection service at {selection} did not answer GET /workers: \
         {source}"
    )]
    SelectionUnreachable {
        selection: String,
        #[source]
        source: sy_dynamo::CallError,
    },
    #[error("the selection service at {selection} has no registered worker")]
    NoWorker { selection: String },
}

/// Checks a Dynamo deployment before a block (sending `bearer` as `Authorization: Bearer …`): the frontend serves both models, the selection
/// service knows workers, and nothing is booked (waits up to 30 s for that); fails when it is
/// unreachable or a model is missing.
pub async fn quiescent(
    frontend: &str,
    selection: &str,
    models: &Models,
    bearer: Option<&str>,
) -> Result<bool, QuiescenceError> {
    let mut config = ClientConfig::new(frontend, selection);
    config.bearer_token = bearer.map(str::to_string);
    let http = config.http_client().map_err(QuiescenceError::HttpClient)?;
    let listed: sy_wire::ModelList = async {
        let mut get = http
            .get(format!("{frontend}/v1/models"))
            .timeout(std::time::Duration::from_secs(5));
        if let Some(token) = bearer {
            get = get.bearer_auth(token);
        }
        get.send().await?.json().await
    }
    .await
    .map_err(|source| QuiescenceError::FrontendUnreachable {
        frontend: frontend.to_string(),
        source,
    })?;
    for model in [&models.efficient, &models.capable] {
        if !listed.data.iter().any(|m| &m.id == model) {
            return Err(QuiescenceError::ModelMissing {
                frontend: frontend.to_string(),
                model: model.clone(),
                listed: listed.data.iter().map(|m| m.id.clone()).collect(),
            });
        }
    }
    let sel = SelectionClient::new(&config, http);
    let workers = sel
        .workers()
        .await
        .map_err(|source| QuiescenceError::SelectionUnreachable {
            selection: selection.to_string(),
            source,
        })?;
    if workers.is_empty() {
        return Err(QuiescenceError::NoWorker {
            selection: selection.to_string(),
        });
    }
    for _ in 0..15 {
        if sel.wait_loads_zero(40).await == Some(true) {
            return Ok(true);
        }
    }
    tracing::warn!("the deployment still shows booked load before the block (another client?)");
    Ok(false)
}
