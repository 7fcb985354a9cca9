//! Where the rounds' probes go: the seeded order load conditions are drawn in, the next round's
//! units within the budget, and the conditions whose advantage is least certain near the margin.

use std::collections::BTreeSet;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use sy_records::Phase;

use super::spec::AdaptiveSpec;
use super::state::Spent;
use crate::schedule::Schedule;

pub use sy_rundir::artifact::adaptive::{RoundPlan, UnitKey};

/// The load conditions of `schedule` in the order the rounds draw them: shuffled with `seed`, so
/// every prefix is a simple random sample of the plan's grid (what the stopping rule's estimate
/// is an estimate of: the grid's mean change).
pub fn draw_order(schedule: &Schedule, seed: u64) -> Vec<String> {
    let mut ids: Vec<String> = (schedule.conditions.iter())
        .filter(|c| c.phase == Phase::Load)
        .map(|c| c.id.clone())
        .collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xada9_7e5e_ed00_0001);
    ids.shuffle(&mut rng);
    ids
}

/// Every unit of the plan's Q grid (all of them run in the first round).
pub fn qgrid_units(schedule: &Schedule) -> Vec<UnitKey> {
    (schedule.units.iter())
        .filter(|u| schedule.conditions[u.condition].phase == Phase::Qgrid)
        .map(|u| (schedule.conditions[u.condition].id.clone(), u.repeat))
        .collect()
}

/// Every unit planned in `rounds` (Q grid included).
pub fn planned_units(schedule: &Schedule, rounds: &[RoundPlan], repeats: u32) -> BTreeSet<UnitKey> {
    let mut all: BTreeSet<UnitKey> = qgrid_units(schedule).into_iter().collect();
    for r in rounds {
        all.extend(r.units(repeats));
    }
    all
}

/// A drawn condition's measured advantages (`TTFT_eff − TTFT_cap`, one per measured repeat) and
/// the repeats it has had.
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionAdvantage {
    pub condition_id: String,
    pub advantages: Vec<f64>,
    /// The next repeat index not yet planned.
    pub next_repeat: u32,
}

/// The conditions to give one more repeat, least certain first: those whose mean advantage is
/// fewest standard errors from `margin_ms` (the advantage the rule needs to act; a condition with
/// fewer than 2 measured repeats counts as uncertain as can be), among those below `max_repeats`;
/// ties by id. At most `count`.
pub fn uncertain_first(
    conditions: &[ConditionAdvantage],
    margin_ms: f64,
    max_repeats: u32,
    count: usize,
) -> Vec<UnitKey> {
    let mut scored: Vec<(f64, &ConditionAdvantage)> = (conditions.iter())
        .filter(|c| c.next_repeat < max_repeats)
        .map(|c| {
            let n = c.advantages.len();
            let z = if n < 2 {
                0.0
            } else {
                let nf = n as f64;
                let m = c.advantages.iter().sum::<f64>() / nf;
                let var = c.advantages.iter().map(|a| (a - m).powi(2)).sum::<f64>() / (nf - 1.0);
                let se = (var / nf).sqrt();
                let d = (m - margin_ms).abs();
                if se > 0.0 {
                    d / se
                } else if d > 0.0 {
                    f64::INFINITY
                } else {
                    0.0
                }
            };
            (if z.is_nan() { f64::INFINITY } else { z }, c)
        })
        .collect();
    scored.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then_with(|| a.1.condition_id.cmp(&b.1.condition_id))
    });
    scored
        .into_iter()
        .take(count)
        .map(|(_, c)| (c.condition_id.clone(), c.next_repeat))
        .collect()
}

/// The next round, or `None` when nothing is left to draw or the budget cannot pay for one more
/// condition: the next conditions of `order` after the `drawn` first (as many as the round
/// takes and `budget_left` load units pay for), and then `refine` units while the budget lasts.
pub fn next_round(
    round: u32,
    order: &[String],
    drawn: usize,
    spec: &AdaptiveSpec,
    budget_left: u64,
    refine: Vec<UnitKey>,
) -> Option<RoundPlan> {
    let want = usize::try_from(if round == 0 {
        spec.first_round_conditions
    } else {
        spec.round_conditions
    })
    .unwrap_or(usize::MAX);
    let affordable = usize::try_from(budget_left / u64::from(spec.repeats.max(1))).unwrap_or(0);
    let take = want.min(affordable).min(order.len().saturating_sub(drawn));
    if take == 0 {
        return None;
    }
    let new_conditions = order[drawn..drawn + take].to_vec();
    let left = budget_left - (take as u64) * u64::from(spec.repeats);
    let refine = refine
        .into_iter()
        .take(usize::try_from(left).unwrap_or(usize::MAX))
        .collect();
    Some(RoundPlan {
        round,
        new_conditions,
        refine,
    })
}

/// Load units the rest of a GPU-time budget pays for at the cost per load unit measured so far:
/// `None` when there is no GPU-time budget (`budget_gpu_seconds` 0) or nothing measured yet
/// (round 0 always runs: it measures the cost).
pub fn gpu_affordable_units(budget_gpu_seconds: f64, spent: Option<&Spent>) -> Option<u64> {
    if budget_gpu_seconds <= 0.0 {
        return None;
    }
    let spent = spent?;
    let per_unit = spent.gpu_seconds_per_load_unit()?;
    let left = (budget_gpu_seconds - spent.gpu_seconds).max(0.0);
    // Saturating float-to-int conversion: a huge budget pays for u64::MAX units.
    Some((left / per_unit).floor() as u64)
}

/// The dry run's range of an adaptive plan, in load units: the fewest a verdict can take (the
/// first round, then rounds until `min_conditions` conditions are judged) and the budget.
pub fn unit_range(spec: &AdaptiveSpec, load_conditions: u64, budget: u64) -> (u64, u64) {
    let per_round = u64::from(spec.round_conditions.max(1));
    let judged_rounds = u64::from(spec.min_conditions).div_ceil(per_round);
    let conditions =
        (u64::from(spec.first_round_conditions) + judged_rounds * per_round).min(load_conditions);
    let best = (conditions * u64::from(spec.repeats)).min(budget);
    (best, budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> AdaptiveSpec {
        AdaptiveSpec {
            first_round_conditions: 4,
            round_conditions: 3,
            repeats: 2,
            ..AdaptiveSpec::default()
        }
    }

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i:02}")).collect()
    }

    #[test]
    fn rounds_draw_in_order_within_the_budget() {
        let order = ids(10);
        let r0 = next_round(0, &order, 0, &spec(), 100, vec![]).unwrap();
        assert_eq!(r0.new_conditions, ids(4));
        assert_eq!(r0.units(2).len(), 8);
        let r1 = next_round(1, &order, 4, &spec(), 100, vec![]).unwrap();
        assert_eq!(r1.new_conditions, order[4..7].to_vec());
        // 5 units pay for 2 conditions of 2 repeats; the 1 left goes to refinement.
        let r2 = next_round(
            2,
            &order,
            7,
            &spec(),
            5,
            vec![("c00".into(), 2), ("c01".into(), 2)],
        )
        .unwrap();
        assert_eq!(r2.new_conditions, order[7..9].to_vec());
        assert_eq!(r2.refine, vec![("c00".to_string(), 2)]);
        assert!(
            next_round(3, &order, 10, &spec(), 100, vec![]).is_none(),
            "grid drawn"
        );
        assert!(
            next_round(3, &order, 9, &spec(), 1, vec![]).is_none(),
            "budget spent"
        );
    }

    #[test]
    fn the_least_certain_conditions_come_first() {
        let c = |id: &str, a: &[f64], next: u32| ConditionAdvantage {
            condition_id: id.into(),
            advantages: a.to_vec(),
            next_repeat: next,
        };
        let conditions = [
            c("far", &[50.0, 52.0], 2),
            c("near", &[9.0, 12.0], 2),
            c("one", &[30.0], 1),
            c("full", &[10.0, 10.5], 6),
        ];
        let picked = uncertain_first(&conditions, 10.0, 6, 3);
        assert_eq!(
            picked,
            vec![
                ("one".to_string(), 1),
                ("near".to_string(), 2),
                ("far".to_string(), 2)
            ]
        );
    }

    #[test]
    fn the_gpu_budget_pays_for_the_units_its_rest_buys_at_the_measured_cost() {
        // 10 load units took 5 s on 4 GPUs: 2 GPU-seconds each; 30 s spent in all (Q grid too).
        let spent = Spent {
            seconds: 7.5,
            load_units: 10,
            load_seconds: 5.0,
            gpus: 4,
            gpus_per_rank_known: false,
            gpu_seconds: 30.0,
        };
        assert_eq!(spent.gpu_seconds_per_load_unit(), Some(2.0));
        assert_eq!(gpu_affordable_units(41.0, Some(&spent)), Some(5));
        assert_eq!(gpu_affordable_units(31.9, Some(&spent)), Some(0));
        assert_eq!(
            gpu_affordable_units(20.0, Some(&spent)),
            Some(0),
            "overspent"
        );
        assert_eq!(gpu_affordable_units(0.0, Some(&spent)), None, "no budget");
        assert_eq!(gpu_affordable_units(41.0, None), None, "round 0 runs");
        let nothing = Spent {
            load_units: 0,
            load_seconds: 0.0,
            ..spent
        };
        assert_eq!(gpu_affordable_units(41.0, Some(&nothing)), None);
        // A round the GPU budget cannot pay one condition of is not planned.
        let order = ids(10);
        let units = gpu_affordable_units(33.0, Some(&spent)).unwrap();
        assert!(next_round(1, &order, 4, &spec(), units.min(100), vec![]).is_none());
        let units = gpu_affordable_units(41.0, Some(&spent)).unwrap();
        let r = next_round(1, &order, 4, &spec(), units.min(100), vec![]).unwrap();
        assert_eq!(
            r.units(2).len(),
            4,
            "2 conditions × 2 repeats of the 5 units paid"
        );
    }

    #[test]
    fn the_range_runs_from_the_first_verdict_to_the_budget() {
        let s = AdaptiveSpec {
            first_round_conditions: 24,
            round_conditions: 12,
            repeats: 2,
            min_conditions: 20,
            ..AdaptiveSpec::default()
        };
        // 24 fitting + 2 rounds of 12 judged = 48 conditions × 2 repeats.
        assert_eq!(unit_range(&s, 162, 972), (96, 972));
        assert_eq!(unit_range(&s, 30, 972), (60, 972));
    }
}
