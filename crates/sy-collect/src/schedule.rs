//! The schedule: a plan expanded into workload conditions and their (condition, repeat) units.
//!
//! A *condition* is one point of a phase's grid (N, f and, in the load phase, the background
//! configuration). A *unit* is one repeat of one condition: it primes its prefix, sets up its
//! background load, sends one paired probe and writes two records. Units are what `--resume`
//! skips, and condition ids are what the fitting tools split on, so both are deterministic
//! functions of the plan.

use sy_records::{Background, Phase};

use crate::plan::{BackgroundTarget, Plan, fraction_label};

/// One workload condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// Stable, human-readable id (e.g. `q-n1024-f0.500`).
    pub id: String,
    pub phase: Phase,
    pub planned_n: u64,
    pub planned_f: f64,
    pub background: Background,
    /// Background prefill-contention prompt tokens and decode prompt tokens (not in the record's
    /// `Background`, needed to build the requests).
    pub decode_prompt_tokens: u64,
    /// Requests and output tokens of the busy-capable load.
    pub busy_capable_requests: u32,
    pub busy_capable_output_tokens: u64,
}

impl Condition {
    /// Prefix tokens primed before the probe: `round(f·N)`.
    pub fn primed_tokens(&self) -> u64 {
        primed_tokens(self.planned_n, self.planned_f)
    }

    /// Whether this condition runs any background request.
    pub fn has_background(&self) -> bool {
        self.background.prefill_requests > 0
            || self.background.decode_requests > 0
            || self.background.busy_capable
    }
}

/// `round(f·N)`, never more than `N - 1` (a probe keeps at least one uncached token), except for
/// f = 1: the whole prompt, so that the probe repeats the primed prompt. That is the full-prompt hit
/// a runtime meets (the router reports K = N), and what it costs is the engine's own: vLLM, for
/// one, recomputes the block holding the last prompt token (docs/methodology.md).
pub fn primed_tokens(n: u64, f: f64) -> u64 {
    if f >= 1.0 {
        return n;
    }
    let k = (f * n as f64).round();
    let k = if k.is_finite() && k > 0.0 {
        k as u64
    } else {
        0
    };
    k.min(n.saturating_sub(1))
}

/// One repeat of one condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    /// Index into [`Schedule::conditions`].
    pub condition: usize,
    pub repeat: u32,
}

/// Every condition and unit of a plan, in run order: Q grid first, then load; within a phase,
/// repeat-major (repeat 0 of every condition, then repeat 1, …). A condition's repeats are
/// therefore spread over the phase rather than run back to back, so a burst of slow requests
/// (another tenant, a busy host) moves one repeat of many conditions instead of most repeats of
/// one, and a condition's median stays its own. `--resume` skips units by (condition, repeat),
/// whatever their order.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub conditions: Vec<Condition>,
    pub units: Vec<Unit>,
}

impl Schedule {
    pub fn from_plan(plan: &Plan) -> Schedule {
        let planned = Schedule::conditions_of(plan);
        let total: u64 = planned.iter().map(|(_, r)| u64::from(*r)).sum();
        let mut units = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
        let repeats: Vec<u32> = planned.iter().map(|(_, r)| *r).collect();
        let conditions: Vec<Condition> = planned.into_iter().map(|(c, _)| c).collect();
        for phase in phase_ranges(&conditions) {
            let most = repeats[phase.clone()].iter().copied().max().unwrap_or(0);
            for repeat in 0..most {
                units.extend(
                    phase
                        .clone()
                        .filter(|&idx| repeat < repeats[idx])
                        .map(|condition| Unit { condition, repeat }),
                );
            }
        }
        Schedule { conditions, units }
    }

    /// Every condition of a plan with its repeat count, in run order, without expanding units
    /// (what `--dry-run` and the plan's cost bounds read: nothing is allocated per request).
    pub fn conditions_of(plan: &Plan) -> Vec<(Condition, u32)> {
        let mut conditions = Vec::new();
        let push = |c: Condition, repeats: u32, conditions: &mut Vec<(Condition, u32)>| {
            conditions.push((c, repeats));
        };
        if let Some(q) = &plan.qgrid {
            for &n in &q.n {
                for &f in &q.f {
                    push(
                        Condition {
                            id: format!("q-n{n}-f{}", fraction_label(f)),
                            phase: Phase::Qgrid,
                            planned_n: n,
                            planned_f: f,
                            background: Background {
                                target: "none".into(),
                                ..Background::default()
                            },
                            decode_prompt_tokens: 0,
                            busy_capable_requests: 0,
                            busy_capable_output_tokens: 0,
                        },
                        q.repeats,
                        &mut conditions,
                    );
                }
            }
        }
        if let Some(l) = &plan.load {
            // Each non-zero decode level twice: short and long outputs, equal request counts.
            let mut decode_levels: Vec<(u32, Option<(&str, u64)>)> = Vec::new();
            for &d in &l.decode_contention {
                if d == 0 {
                    decode_levels.push((0, None));
                } else {
                    decode_levels.push((d, Some(("short", l.short_output_tokens))));
                    decode_levels.push((d, Some(("long", l.long_output_tokens))));
                }
            }
            for &n in &l.n {
                for &f in &l.f {
                    for &pc in &l.prefill_contention {
                        for &(dc, len) in &decode_levels {
                            for &busy in &l.busy_capable {
                                let mut id = format!("l-n{n}-f{}-pf{pc}", fraction_label(f));
                                match len {
                                    Some((name, _)) => id.push_str(&format!("-dc{dc}{name}")),
                                    None => id.push_str("-dc0"),
                                }
                                id.push_str(if busy { "-busy" } else { "-idle" });
                                let target = if pc == 0 && dc == 0 {
                                    if busy { "capable" } else { "none" }
                                } else {
                                    match (l.background_target, busy) {
                                        (BackgroundTarget::Efficient, true) => "both",
                                        (t, _) => t.as_str(),
                                    }
                                };
                                push(
                                    Condition {
                                        id,
                                        phase: Phase::Load,
                                        planned_n: n,
                                        planned_f: f,
                                        background: Background {
                                            prefill_requests: pc,
                                            prefill_prompt_tokens: if pc > 0 {
                                                l.prefill_prompt_tokens
                                            } else {
                                                0
                                            },
                                            decode_requests: dc,
                                            decode_output_tokens: len.map_or(0, |(_, t)| t),
                                            decode_length: len.map(|(name, _)| name.to_string()),
                                            busy_capable: busy,
                                            target: target.to_string(),
                                        },
                                        decode_prompt_tokens: l.decode_prompt_tokens,
                                        busy_capable_requests: if busy {
                                            l.busy_capable_requests
                                        } else {
                                            0
                                        },
                                        busy_capable_output_tokens: l.busy_capable_output_tokens,
                                    },
                                    l.repeats,
                                    &mut conditions,
                                );
                            }
                        }
                    }
                }
            }
        }
        conditions
    }

    /// Requests a unit sends through the accounting path, not counting background loops:
    /// primes (one per model when f > 0) and the pair of probes.
    pub fn foreground_requests(&self) -> u64 {
        self.units
            .iter()
            .map(|u| {
                let c = &self.conditions[u.condition];
                if c.primed_tokens() > 0 { 4 } else { 2 }
            })
            .sum()
    }
}

/// The index ranges of `conditions` that share one phase, in order (conditions come grouped by
/// phase from [`Schedule::conditions_of`]).
fn phase_ranges(conditions: &[Condition]) -> Vec<std::ops::Range<usize>> {
    let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
    for (idx, c) in conditions.iter().enumerate() {
        match ranges.last_mut() {
            Some(r) if conditions[r.start].phase == c.phase => r.end = idx + 1,
            _ => ranges.push(idx..idx + 1),
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn plan(text: &str) -> Plan {
        let p = Plan::from_toml_str(text, Path::new("t.toml")).unwrap();
        p.validate(Path::new("t.toml")).unwrap();
        p
    }

    #[test]
    fn qgrid_units_and_ids() {
        let s = Schedule::from_plan(&plan(
            "seed=1\n[qgrid]\nn=[64,128]\nf=[0.0,0.5]\nrepeats=3\n",
        ));
        assert_eq!(s.conditions.len(), 4);
        assert_eq!(s.units.len(), 12);
        assert_eq!(s.conditions[1].id, "q-n64-f0.500");
        assert_eq!(s.conditions[1].primed_tokens(), 32);
        let mut ids: Vec<_> = s.conditions.iter().map(|c| c.id.clone()).collect();
        ids.dedup();
        assert_eq!(ids.len(), 4);
    }

    #[test]
    fn repeats_are_spread_over_their_phase() {
        let s = Schedule::from_plan(&plan(
            "seed=1\n[qgrid]\nn=[64,128]\nf=[0.0]\nrepeats=3\n\
             [load]\nn=[64]\nf=[0.0,0.5]\nrepeats=2\n",
        ));
        let order: Vec<(usize, u32)> = s.units.iter().map(|u| (u.condition, u.repeat)).collect();
        assert_eq!(
            order,
            [
                (0, 0),
                (1, 0),
                (0, 1),
                (1, 1),
                (0, 2),
                (1, 2),
                (2, 0),
                (3, 0),
                (2, 1),
                (3, 1)
            ]
        );
        assert_eq!(s.conditions[1].phase, Phase::Qgrid);
        assert_eq!(s.conditions[2].phase, Phase::Load);
    }

    #[test]
    fn decode_levels_split_short_long_with_equal_counts() {
        let s = Schedule::from_plan(&plan(
            "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1\ndecode_contention=[0,4]\nbusy_capable=[false,true]\n",
        ));
        // decode levels: 0, 4 short, 4 long; times busy false/true.
        assert_eq!(s.conditions.len(), 6);
        let short: Vec<_> = s
            .conditions
            .iter()
            .filter(|c| c.background.decode_length.as_deref() == Some("short"))
            .collect();
        let long: Vec<_> = s
            .conditions
            .iter()
            .filter(|c| c.background.decode_length.as_deref() == Some("long"))
            .collect();
        assert_eq!(short.len(), long.len());
        for (a, b) in short.iter().zip(&long) {
            assert_eq!(a.background.decode_requests, b.background.decode_requests);
            assert!(a.background.decode_output_tokens < b.background.decode_output_tokens);
        }
        let ids: std::collections::HashSet<_> = s.conditions.iter().map(|c| &c.id).collect();
        assert_eq!(ids.len(), 6);
        assert!(
            s.conditions
                .iter()
                .any(|c| c.id == "l-n64-f0.000-pf0-dc4long-busy")
        );
    }

    #[test]
    fn primed_tokens_rounds_and_leaves_one_uncached() {
        assert_eq!(primed_tokens(100, 0.0), 0);
        assert_eq!(primed_tokens(100, 0.255), 26);
        assert_eq!(primed_tokens(3, 0.99), 2);
        assert_eq!(primed_tokens(1, 0.9), 0);
        // A full repeat primes the whole prompt.
        assert_eq!(primed_tokens(512, 1.0), 512);
        assert_eq!(primed_tokens(500, 1.0), 500);
    }
}
