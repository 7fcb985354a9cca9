//! Which failures of a pinned request are transient: the frontend's discovery race (HTTP 400)
//! and its model re-registration after a restart (HTTP 404).

use std::time::Duration;

use sy_dynamo::CallError;

/// Why an HTTP 404 for a model the run checked at preflight is transient: the frontend is
/// re-registering its models (after a restart). `None` for anything else.
pub fn model_rediscovery(error: &CallError, model: &str) -> Option<String> {
    (error.status == Some(404)
        && error
            .message
            .to_ascii_lowercase()
            .contains("model not found"))
    .then(|| {
        format!(
            "the frontend does not know model `{model}` right now although it served it at \
                 the start of the run (re-registering its models after a restart)"
        )
    })
}

/// A frontend instance first seen this recently counts as just (re)discovered: an HTTP 400 for
/// a request pinned to it is the discovery race, not a bad request.
pub const DISCOVERY_GRACE: Duration = Duration::from_secs(10);

/// Why an HTTP 400 for a request pinned to `worker` is a transient discovery race (the
/// frontend has not (re)discovered the instance the selection service booked), or `None` when
/// it is a real bad request.
///
/// Dynamo 1.6.1 answers a request pinned to an instance its frontend does not know with HTTP
/// 400 `Invalid request` and no detail — while a restarted frontend re-reads discovery, or
/// before it has discovered a restarted worker the selection service already books. So: the
/// message names an unknown instance; or the frontend's `/health` is unavailable (restarting),
/// does not list the instance, or lists it but this run saw it for the first time less than
/// [`DISCOVERY_GRACE`] ago (`first_seen_ago`; `None` = listed since the run started).
pub fn discovery_race(
    worker: u64,
    says_unknown_instance: bool,
    listed: Result<&[u64], &str>,
    first_seen_ago: Option<Duration>,
) -> Option<String> {
    if says_unknown_instance {
        return Some(format!("the frontend does not know instance {worker}"));
    }
    match listed {
        Err(e) => Some(format!(
            "the frontend's /health is unavailable ({e}): it is probably restarting"
        )),
        Ok(ids) if !ids.contains(&worker) => Some(format!(
            "the frontend's /health does not list instance {worker} (not yet discovered, or gone)"
        )),
        Ok(_) => match first_seen_ago {
            Some(ago) if ago < DISCOVERY_GRACE => Some(format!(
                "instance {worker} was discovered by the frontend only {} ms ago",
                ago.as_millis()
            )),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = 9_981_230_746_187_775_269;

    #[test]
    fn a_400_is_a_discovery_race_only_when_the_frontend_does_not_know_the_instance() {
        // Listed since the run started: a real bad request, not retried.
        assert_eq!(discovery_race(W, false, Ok(&[1, W]), None), None);
        // Listed, first seen long ago: a real bad request.
        assert_eq!(
            discovery_race(W, false, Ok(&[W]), Some(Duration::from_secs(60))),
            None
        );
        // Not listed (a restarted frontend, or a worker not yet discovered): transient.
        let r = discovery_race(W, false, Ok(&[1, 2]), None).unwrap();
        assert!(
            r.contains("does not list instance 9981230746187775269"),
            "{r}"
        );
        // Just (re)discovered: transient.
        let r = discovery_race(W, false, Ok(&[W]), Some(Duration::from_millis(300))).unwrap();
        assert!(r.contains("only 300 ms ago"), "{r}");
        // The frontend itself is not answering: transient.
        assert!(discovery_race(W, false, Err("connection refused"), None).is_some());
        // The message names an unknown instance: transient whatever /health says.
        assert!(discovery_race(W, true, Ok(&[W]), None).is_some());
    }

    #[test]
    fn a_404_model_not_found_is_a_model_rediscovery() {
        let e = CallError::status(404, "frontend HTTP 404: Model not found");
        assert!(
            model_rediscovery(&e, "efficient")
                .unwrap()
                .contains("`efficient`")
        );
        assert!(
            model_rediscovery(&CallError::status(404, "frontend HTTP 404: nope"), "m").is_none()
        );
        assert!(
            model_rediscovery(&CallError::status(400, "Model not found"), "m").is_none(),
            "only a 404"
        );
    }
}
