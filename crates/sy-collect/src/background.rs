//! The background slots a load condition needs, in the shapes of [`sy_drive::background`]
//! (which runs them on the reservation path).

use sy_drive::background::{Loops, SlotSpec, busy_slot};

use crate::schedule::Condition;

/// The slots a condition needs.
pub fn slots_for(condition: &Condition, efficient: &str, capable: &str) -> Vec<SlotSpec> {
    let bg = &condition.background;
    let targets: Vec<&str> = match bg.target.as_str() {
        "capable" => vec![capable],
        "both" if !bg.busy_capable => vec![efficient, capable],
        // With a busy capable destination the capable load comes from the busy slots.
        "both" => vec![efficient],
        "none" => vec![],
        _ => vec![efficient],
    };
    let loops = Loops {
        prefill: (bg.prefill_requests, bg.prefill_prompt_tokens),
        decode: (
            bg.decode_requests,
            condition.decode_prompt_tokens,
            bg.decode_output_tokens,
        ),
    };
    let mut slots = loops.slots(&targets);
    if bg.busy_capable {
        let busy = busy_slot(
            capable,
            condition.decode_prompt_tokens,
            condition.busy_capable_output_tokens,
        );
        slots.extend(std::iter::repeat_n(
            busy,
            condition.busy_capable_requests as usize,
        ));
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Plan;
    use crate::schedule::Schedule;
    use std::path::Path;

    #[test]
    fn slots_follow_the_condition() {
        let plan = Plan::from_toml_str(
            "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1\nprefill_contention=[2]\ndecode_contention=[3]\nbusy_capable=[false,true]\nbusy_capable_requests=4\n",
            Path::new("t"),
        )
        .unwrap();
        let s = Schedule::from_plan(&plan);
        let short_idle = s
            .conditions
            .iter()
            .find(|c| c.id.ends_with("dc3short-idle"))
            .unwrap();
        let slots = slots_for(short_idle, "e", "c");
        assert_eq!(slots.iter().filter(|s| s.kind == "prefill").count(), 2);
        assert_eq!(slots.iter().filter(|s| s.kind == "decode").count(), 3);
        assert!(slots.iter().all(|s| s.model == "e"));
        let long_busy = s
            .conditions
            .iter()
            .find(|c| c.id.ends_with("dc3long-busy"))
            .unwrap();
        let slots = slots_for(long_busy, "e", "c");
        assert_eq!(
            slots
                .iter()
                .filter(|s| s.kind == "busy" && s.model == "c")
                .count(),
            4
        );
        assert_eq!(slots.iter().filter(|s| s.model == "e").count(), 5);
    }
}
