//! The host side of [`sy_selector::Observer`], implemented with the project's Dynamo client:
//! both candidates observed concurrently (advisory `/select` per model, one `/loads`, one
//! `/workers`) by `sy_dynamo::observe::observe_candidates`, exactly what `sy-collect` records.

use sy_dynamo::SelectionClient;
use sy_dynamo::observe::{Candidate, observe_candidates};
use sy_selector::{Candidates, Observer};

/// Observes the two candidate models through the selection service.
#[derive(Debug, Clone)]
pub struct DynamoObserver {
    pub selection: SelectionClient,
    pub efficient: String,
    pub capable: String,
}

/// Why a turn's observation failed: the first failed read, per model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{model}: {message}")]
pub struct ObserveError {
    pub model: String,
    pub message: String,
}

impl Observer for DynamoObserver {
    type Prompt = [u32];
    type Error = ObserveError;

    async fn observe(&self, prompt: &[u32]) -> Result<Candidates, ObserveError> {
        let wanted = [
            Candidate {
                model: &self.efficient,
                tokens: prompt,
                allowed: None,
            },
            Candidate {
                model: &self.capable,
                tokens: prompt,
                allowed: None,
            },
        ];
        let mut seen = observe_candidates(&self.selection, &wanted).await;
        if let Some(failed) = seen.iter().find(|o| o.error.is_some()) {
            return Err(ObserveError {
                model: failed.model.clone(),
                message: failed
                    .error
                    .as_ref()
                    .map_or_else(String::new, |e| e.message.clone()),
            });
        }
        let capable = seen.pop().map(|o| o.to_observation());
        let efficient = seen.pop().map(|o| o.to_observation());
        match (efficient, capable) {
            (Some(efficient), Some(capable)) => Ok(Candidates { efficient, capable }),
            _ => Err(ObserveError {
                model: self.efficient.clone(),
                message: "the observation adapter returned no answer".into(),
            }),
        }
    }

    fn now_ms(&self) -> f64 {
        unix_ms_now()
    }
}

pub use sy_wire::unix_ms_now;
