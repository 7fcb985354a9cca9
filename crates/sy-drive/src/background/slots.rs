//! What a background loop sends: [`SlotSpec`], the contention loops ([`Loops`]) and the busy
//! capable destination ([`busy_slot`]).

/// One background loop.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotSpec {
    pub kind: &'static str,
    pub model: String,
    pub prompt_tokens: u64,
    pub max_tokens: u32,
    pub ignore_eos: bool,
}

/// The contention loops run on each target model: `prefill` = (requests, prompt tokens) of large
/// uncached prompts with one output token; `decode` = (requests, prompt tokens, output tokens)
/// of long generations.
#[derive(Debug, Clone, Copy)]
pub struct Loops {
    pub prefill: (u32, u64),
    pub decode: (u32, u64, u64),
}

impl Loops {
    /// Every loop on every target, prefill loops first per target.
    pub fn slots(&self, targets: &[&str]) -> Vec<SlotSpec> {
        let (prefills, prefill_tokens) = self.prefill;
        let (decodes, decode_prompt, decode_output) = self.decode;
        let mut slots = Vec::new();
        for model in targets {
            let slot = |kind, prompt_tokens, max_tokens| SlotSpec {
                kind,
                model: model.to_string(),
                prompt_tokens,
                max_tokens,
                ignore_eos: true,
            };
            let decode = slot("decode", decode_prompt, saturate(decode_output));
            slots.extend(std::iter::repeat_n(
                slot("prefill", prefill_tokens, 1),
                prefills as usize,
            ));
            slots.extend(std::iter::repeat_n(decode, decodes as usize));
        }
        slots
    }
}

/// One loop keeping the capable destination busy with generations.
pub fn busy_slot(capable: &str, prompt_tokens: u64, output_tokens: u64) -> SlotSpec {
    SlotSpec {
        kind: "busy",
        model: capable.to_string(),
        prompt_tokens: prompt_tokens.max(1),
        max_tokens: saturate(output_tokens),
        ignore_eos: true,
    }
}

fn saturate(tokens: u64) -> u32 {
    u32::try_from(tokens).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_put_prefill_first_on_every_target() {
        let loops = Loops {
            prefill: (2, 2048),
            decode: (1, 64, 256),
        };
        let slots = loops.slots(&["e", "c"]);
        let kinds: Vec<(&str, &str)> = slots.iter().map(|s| (s.kind, s.model.as_str())).collect();
        assert_eq!(
            kinds,
            [
                ("prefill", "e"),
                ("prefill", "e"),
                ("decode", "e"),
                ("prefill", "c"),
                ("prefill", "c"),
                ("decode", "c")
            ]
        );
        assert_eq!((slots[0].prompt_tokens, slots[0].max_tokens), (2048, 1));
        assert_eq!((slots[2].prompt_tokens, slots[2].max_tokens), (64, 256));
        assert!(slots.iter().all(|s| s.ignore_eos));
        assert!(loops.slots(&[]).is_empty());
    }

    #[test]
    fn a_busy_slot_has_a_prompt_and_saturates_its_output() {
        let busy = busy_slot("c", 0, u64::MAX);
        assert_eq!(
            (
                busy.kind,
                busy.model.as_str(),
                busy.prompt_tokens,
                busy.max_tokens
            ),
            ("busy", "c", 1, u32::MAX)
        );
    }
}
