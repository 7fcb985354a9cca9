//! The per-turn path a host links: an [`Observer`] the host implements supplies both candidates'
//! observations, [`LiveRule::route`] decides with [`decide`], and every failure selects the safe
//! target (Stage's proposal).
//!
//! This is the shape of a Switchyard (`libsy`) policy: transport stays out of the policy — the
//! host implements the trait with its own HTTP client (`sy-eval` implements it with the project's
//! Dynamo client, so the code `sy-eval` runs per turn is the code a host links); the policy loads
//! a versioned artifact (the [`Bundle`]) and validates every field at load; a failure to load, to
//! observe or to predict keeps Stage's choice, is reported in [`Routed::failure`] for the host to
//! log (this crate does no I/O and has no logger), and is never cached: the next turn observes
//! and decides afresh.

use std::future::Future;

use crate::bundle::{Bundle, BundleError};
use crate::model::{Model, Variant};
use crate::observation::Observation;
use crate::rule::{Decision, DecisionInput, RuleParams, decide};

/// Both candidates as observed for one turn (each the worker Dynamo would pick in that pool).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Candidates {
    pub efficient: Observation,
    pub capable: Observation,
}

/// What a host implements: how to observe both candidates for a prompt, and the clock the
/// observations' `observed_at_ms` use.
pub trait Observer {
    /// The host's prompt (token ids, a request, …).
    type Prompt: ?Sized;
    /// Why an observation could not be taken.
    type Error: std::fmt::Display;

    /// Observes both candidates for `prompt`.
    fn observe(
        &self,
        prompt: &Self::Prompt,
    ) -> impl Future<Output = Result<Candidates, Self::Error>> + Send;

    /// Wall-clock now, milliseconds since the Unix epoch (same clock as `observed_at_ms`).
    fn now_ms(&self) -> f64;
}

/// Why a turn fell back to Stage's choice before [`decide`] could run.
#[derive(Debug, Clone, PartialEq)]
pub enum RouteFailure {
    /// The bundle was refused at load (the message says why).
    Bundle(String),
    /// The observer failed (its message).
    Observe(String),
}

impl RouteFailure {
    /// A stable short name for counting.
    pub fn code(&self) -> &'static str {
        match self {
            RouteFailure::Bundle(_) => "bundle_unavailable",
            RouteFailure::Observe(_) => "observe_failed",
        }
    }
}

impl std::fmt::Display for RouteFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RouteFailure::Bundle(m) => write!(f, "bundle unavailable: {m}"),
            RouteFailure::Observe(m) => write!(f, "observation failed: {m}"),
        }
    }
}

/// One routed turn: the final choice, and either the decision (with its input) or the failure.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    /// The model to send the turn to.
    pub choice: Model,
    /// The decision, when the rule ran.
    pub decision: Option<Decision>,
    /// What the rule decided on, when both candidates were observed.
    pub input: Option<DecisionInput>,
    /// Why the rule could not run (the choice is then Stage's proposal).
    pub failure: Option<RouteFailure>,
}

impl Routed {
    fn safe(proposal: Model, failure: RouteFailure) -> Routed {
        Routed {
            choice: proposal,
            decision: None,
            input: None,
            failure: Some(failure),
        }
    }

    /// Whether the rule fell back to Stage's choice (a route failure, a failed guard check or an
    /// unusable prediction).
    pub fn is_fallback(&self) -> bool {
        self.failure.is_some() || self.decision.is_some_and(|d| d.reason.is_fallback())
    }

    /// The stable short name of what happened (a route failure or the decision's reason).
    pub fn reason_code(&self) -> &'static str {
        match (&self.failure, &self.decision) {
            (Some(f), _) => f.code(),
            (None, Some(d)) => d.reason.code(),
            (None, None) => "none",
        }
    }
}

/// A loaded rule ready to route turns with one variant, or the reason it is unavailable.
#[derive(Debug, Clone)]
pub struct LiveRule {
    rule: Result<RuleParams, String>,
    variant: Variant,
}

impl LiveRule {
    /// Loads and validates a bundle (version, structure, hash, every parameter) and routes with
    /// its own variant. A refused bundle is returned as the error: a tool should refuse to run.
    pub fn load(json: &str) -> Result<LiveRule, BundleError> {
        let bundle = Bundle::load(json)?;
        Ok(LiveRule::new(&bundle, bundle.variant))
    }

    /// Like [`LiveRule::load`], but a refused bundle yields a rule that keeps Stage's choice on
    /// every turn and says why ([`RouteFailure::Bundle`]): what a host that must keep serving
    /// does.
    pub fn load_or_safe(json: &str) -> LiveRule {
        match Bundle::load(json) {
            Ok(bundle) => LiveRule::new(&bundle, bundle.variant),
            Err(e) => LiveRule {
                rule: Err(e.to_string()),
                variant: Variant::Stage,
            },
        }
    }

    /// Routes with `variant` using an already loaded bundle's parameters (an evaluation runs
    /// every variant with the same parameters).
    pub fn new(bundle: &Bundle, variant: Variant) -> LiveRule {
        LiveRule {
            rule: Ok(bundle.params.clone()),
            variant,
        }
    }

    /// The variant this rule routes with.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// Observes both candidates through `observer`, then decides. Stage's proposal is kept when
    /// the bundle is unavailable or the observer fails; [`decide`] itself keeps it on every
    /// failed guard check or unusable prediction. Both candidates are observed on every turn,
    /// whatever the proposal and variant, so that every variant pays the same observation cost
    /// and every turn's record carries what the rule saw.
    pub async fn route<O: Observer>(
        &self,
        observer: &O,
        prompt: &O::Prompt,
        proposal: Model,
        local_capable_in_flight: u64,
    ) -> Routed {
        let params = match &self.rule {
            Ok(p) => p,
            Err(e) => return Routed::safe(proposal, RouteFailure::Bundle(e.clone())),
        };
        let candidates = match observer.observe(prompt).await {
            Ok(c) => c,
            Err(e) => return Routed::safe(proposal, RouteFailure::Observe(e.to_string())),
        };
        let input = DecisionInput {
            proposal,
            efficient: candidates.efficient,
            capable: candidates.capable,
            now_ms: observer.now_ms(),
            local_capable_in_flight,
        };
        let decision = decide(params, self.variant, &input);
        Routed {
            choice: decision.choice,
            decision: Some(decision),
            input: Some(input),
            failure: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::Reason;

    /// An observer with canned answers (or a failure).
    struct Canned(Result<Candidates, String>);

    impl Observer for Canned {
        type Prompt = [u32];
        type Error = String;
        async fn observe(&self, _prompt: &[u32]) -> Result<Candidates, String> {
            self.0.clone()
        }
        fn now_ms(&self) -> f64 {
            1_000.0
        }
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        // A minimal executor: the canned futures are ready on the first poll.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    fn example_bundle() -> String {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../data/examples/bundle.json"
        );
        std::fs::read_to_string(path).unwrap()
    }

    fn busy_efficient() -> Candidates {
        let obs = |r: f64, booked: f64| Observation {
            n: Some(8_000.0),
            k: Some(0.0),
            r: Some(r),
            prefill_tokens_booked: Some(booked),
            prefill_capacity_tokens: Some(2_048.0),
            schedulable: Some(true),
            observed_at_ms: Some(990.0),
            ..Observation::default()
        };
        Candidates {
            efficient: obs(6.0, 12_000.0),
            capable: obs(0.0, 0.0),
        }
    }

    #[test]
    fn route_decides_on_what_the_observer_saw() {
        let rule = LiveRule::load(&example_bundle()).unwrap();
        let routed = block_on(rule.route(
            &Canned(Ok(busy_efficient())),
            &[1, 2, 3],
            Model::Efficient,
            0,
        ));
        let d = routed.decision.unwrap();
        assert_eq!(routed.choice, d.choice);
        assert_eq!(routed.input.unwrap().now_ms, 1_000.0);
        assert_eq!(d.efficient_age_ms, Some(10.0));
        assert!(routed.failure.is_none());
        // Same as calling decide directly with the same input.
        let bundle = Bundle::load(&example_bundle()).unwrap();
        let direct = bundle.decide(&DecisionInput {
            proposal: Model::Efficient,
            efficient: busy_efficient().efficient,
            capable: busy_efficient().capable,
            now_ms: 1_000.0,
            local_capable_in_flight: 0,
        });
        assert_eq!(d, direct);
    }

    #[test]
    fn observer_failure_keeps_the_proposal_and_says_why() {
        let rule = LiveRule::load(&example_bundle()).unwrap();
        let routed = block_on(rule.route(
            &Canned(Err("connection refused".into())),
            &[1],
            Model::Efficient,
            0,
        ));
        assert_eq!(routed.choice, Model::Efficient);
        assert!(routed.decision.is_none());
        assert!(routed.is_fallback());
        assert_eq!(routed.reason_code(), "observe_failed");
        assert!(
            routed
                .failure
                .unwrap()
                .to_string()
                .contains("connection refused")
        );
    }

    #[test]
    fn a_refused_bundle_routes_safely_on_every_turn() {
        let tampered = example_bundle().replacen("\"intercept\": 180.0", "\"intercept\": 181.0", 1);
        assert!(LiveRule::load(&tampered).is_err());
        let rule = LiveRule::load_or_safe(&tampered);
        for proposal in [Model::Efficient, Model::Capable] {
            let routed = block_on(rule.route(&Canned(Ok(busy_efficient())), &[1], proposal, 0));
            assert_eq!(routed.choice, proposal);
            assert_eq!(routed.reason_code(), "bundle_unavailable");
            assert!(matches!(&routed.failure, Some(RouteFailure::Bundle(m)) if m.contains("hash")));
        }
    }

    #[test]
    fn a_guard_failure_is_a_fallback_with_the_decisions_reason() {
        let rule = LiveRule::load(&example_bundle()).unwrap();
        let mut c = busy_efficient();
        c.capable.schedulable = Some(false);
        let routed = block_on(rule.route(&Canned(Ok(c)), &[1], Model::Efficient, 0));
        assert_eq!(routed.choice, Model::Efficient);
        assert_eq!(routed.decision.unwrap().reason, Reason::NotSchedulable);
        assert!(routed.is_fallback());
        assert_eq!(routed.reason_code(), "not_schedulable");
    }
}
