//! Session shapes: per turn, the tokens appended to the conversation before it, the output it
//! generates and Stage's proposal — from the seeded generator or from a trace of recorded
//! sessions (JSONL, `schemas/eval-trace.schema.json`).
//!
//! A conversation grows: turn 0's prompt is its appended tokens (system prompt, task, context);
//! turn t's prompt is turn t−1's prompt, then turn t−1's output, then turn t's appended tokens
//! (tool results, user follow-up). Later turns therefore reuse the earlier prefix — on the worker
//! that served the previous turn.
//!
//! Trace format, one JSON object per line (blank lines and lines starting with `#` are skipped):
//!
//! ```json
//! {"session": "s1", "turn": 0, "append_tokens": 812, "output_tokens": 40, "proposal": "efficient"}
//! {"session": "s1", "turn": 1, "append_tokens": 230, "output_tokens": 18, "proposal": "capable", "think_ms": 150}
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sy_selector::Model;

use crate::plan::SessionsSpec;

/// One turn's shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TurnSpec {
    /// Tokens appended to the conversation before this turn.
    pub append_tokens: u64,
    /// Output tokens this turn generates.
    pub output_tokens: u64,
    /// Stage's proposal.
    pub proposal: Model,
    /// Pause before this turn (tool execution), milliseconds.
    pub think_ms: u64,
}

/// One session's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSpec {
    /// The trace's session id, or `g{index}` for generated sessions.
    pub id: String,
    pub turns: Vec<TurnSpec>,
}

impl SessionSpec {
    /// The prompt length of every turn.
    pub fn prompt_lengths(&self) -> Vec<u64> {
        let mut n = 0;
        let mut prev_out = 0;
        self.turns
            .iter()
            .map(|t| {
                n += prev_out + t.append_tokens;
                prev_out = t.output_tokens;
                n
            })
            .collect()
    }
}

/// A trace that cannot be used; names the file and line.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read trace {path}: {source}")]
    Io {
        path: String,
        source: sy_rundir::RunError,
    },
    #[error("cannot read trace {path}: not UTF-8 text (invalid byte at offset {offset})")]
    NotUtf8 { path: String, offset: usize },
    #[error("trace {path} line {line}: {problem}")]
    Line {
        path: String,
        line: usize,
        problem: LineProblem,
    },
    #[error("trace {path}: no sessions (the file has no turn lines)")]
    NoSessions { path: String },
    /// A session beyond the evaluation's bounds (the field and the limit).
    #[error("trace {path}: {field}: {message}")]
    Bound {
        path: String,
        field: String,
        message: String,
    },
}

/// What is wrong with one line of a trace.
#[derive(Debug, thiserror::Error)]
pub enum LineProblem {
    #[error("{0}")]
    Json(serde_json::Error),
    #[error("`session` is empty")]
    EmptySession,
    #[error("`output_tokens` must be at least 1")]
    NoOutput,
    #[error(
        "session `{session}`: turn {turn} where turn {expected} was expected (turns are numbered \
         0, 1, … in file order)"
    )]
    TurnOrder {
        session: String,
        turn: u32,
        expected: usize,
    },
    #[error("session `{0}`: turn 0 needs `append_tokens` ≥ 1 (its whole prompt)")]
    NoPrompt(String),
}

fn draw(rng: &mut ChaCha8Rng, r: [u64; 2]) -> u64 {
    rng.random_range(r[0]..=r[1])
}

/// `count` sessions from the generator, determined by `seed` alone.
pub fn generate(spec: &SessionsSpec, count: u32, seed: u64) -> Vec<SessionSpec> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5e55_1045);
    (0..count)
        .map(|i| {
            let turns = draw(&mut rng, spec.turns);
            let turns = (0..turns)
                .map(|t| TurnSpec {
                    append_tokens: if t == 0 {
                        draw(&mut rng, spec.initial_tokens)
                    } else {
                        draw(&mut rng, spec.append_tokens)
                    },
                    output_tokens: draw(&mut rng, spec.output_tokens),
                    proposal: if rng.random_bool(spec.efficient_share) {
                        Model::Efficient
                    } else {
                        Model::Capable
                    },
                    think_ms: if t == 0 {
                        0
                    } else {
                        draw(&mut rng, spec.think_ms)
                    },
                })
                .collect();
            SessionSpec {
                id: format!("g{i}"),
                turns,
            }
        })
        .collect()
}

/// One line of a trace.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceLine {
    session: String,
    turn: u32,
    append_tokens: u64,
    output_tokens: u64,
    proposal: Model,
    #[serde(default)]
    think_ms: u64,
}

/// Reads a trace: sessions in order of first appearance, turns numbered 0, 1, … without gaps.
pub fn read_trace(path: &Path) -> Result<Vec<SessionSpec>, TraceError> {
    let name = path.display().to_string();
    let bytes = sy_rundir::read_input(path, crate::limits::MAX_TRACE_BYTES).map_err(|e| {
        TraceError::Io {
            path: name.clone(),
            source: e,
        }
    })?;
    let text = String::from_utf8(bytes).map_err(|e| TraceError::NotUtf8 {
        path: name.clone(),
        offset: e.utf8_error().valid_up_to(),
    })?;
    parse_trace(&text, &name)
}

/// Parses trace text (`name` is used in messages).
pub fn parse_trace(text: &str, name: &str) -> Result<Vec<SessionSpec>, TraceError> {
    let mut order: Vec<String> = Vec::new();
    let mut sessions: BTreeMap<String, Vec<TurnSpec>> = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let bad = |problem: LineProblem| TraceError::Line {
            path: name.to_string(),
            line,
            problem,
        };
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let t: TraceLine = serde_json::from_str(trimmed).map_err(|e| bad(LineProblem::Json(e)))?;
        if t.session.is_empty() {
            return Err(bad(LineProblem::EmptySession));
        }
        if t.output_tokens == 0 {
            return Err(bad(LineProblem::NoOutput));
        }
        let turns = sessions.entry(t.session.clone()).or_insert_with(|| {
            order.push(t.session.clone());
            Vec::new()
        });
        if t.turn as usize != turns.len() {
            return Err(bad(LineProblem::TurnOrder {
                session: t.session.clone(),
                turn: t.turn,
                expected: turns.len(),
            }));
        }
        if t.turn == 0 && t.append_tokens == 0 {
            return Err(bad(LineProblem::NoPrompt(t.session.clone())));
        }
        turns.push(TurnSpec {
            append_tokens: t.append_tokens,
            output_tokens: t.output_tokens,
            proposal: t.proposal,
            think_ms: t.think_ms,
        });
    }
    if order.is_empty() {
        return Err(TraceError::NoSessions {
            path: name.to_string(),
        });
    }
    Ok(order
        .into_iter()
        .map(|id| {
            let turns = sessions.remove(&id).unwrap_or_default();
            SessionSpec { id, turns }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec() -> SessionsSpec {
        SessionsSpec {
            trace: None,
            count: 5,
            turns: [2, 4],
            initial_tokens: [500, 900],
            append_tokens: [50, 100],
            output_tokens: [8, 16],
            efficient_share: 0.5,
            think_ms: [0, 10],
        }
    }

    #[test]
    fn prompts_grow_by_output_and_appended_tokens() {
        let s = SessionSpec {
            id: "x".into(),
            turns: vec![
                TurnSpec {
                    append_tokens: 100,
                    output_tokens: 10,
                    proposal: Model::Efficient,
                    think_ms: 0,
                },
                TurnSpec {
                    append_tokens: 20,
                    output_tokens: 5,
                    proposal: Model::Capable,
                    think_ms: 0,
                },
                TurnSpec {
                    append_tokens: 0,
                    output_tokens: 5,
                    proposal: Model::Efficient,
                    think_ms: 0,
                },
            ],
        };
        assert_eq!(s.prompt_lengths(), vec![100, 130, 135]);
    }

    #[test]
    fn the_trace_is_checked_line_by_line() {
        let ok = "# a comment\n{\"session\":\"a\",\"turn\":0,\"append_tokens\":10,\"output_tokens\":2,\"proposal\":\"efficient\"}\n\n{\"session\":\"b\",\"turn\":0,\"append_tokens\":5,\"output_tokens\":1,\"proposal\":\"capable\"}\n{\"session\":\"a\",\"turn\":1,\"append_tokens\":3,\"output_tokens\":4,\"proposal\":\"capable\",\"think_ms\":7}\n";
        let s = parse_trace(ok, "t.jsonl").unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].id, "a");
        assert_eq!(s[0].turns.len(), 2);
        assert_eq!(s[0].turns[1].think_ms, 7);
        for (text, want) in [
            (
                "{\"session\":\"a\",\"turn\":1,\"append_tokens\":1,\"output_tokens\":1,\"proposal\":\"efficient\"}",
                "line 1: session `a`: turn 1 where turn 0",
            ),
            (
                "{\"session\":\"a\",\"turn\":0,\"append_tokens\":1,\"output_tokens\":1,\"proposal\":\"big\"}",
                "line 1: unknown variant `big`",
            ),
            (
                "{\"session\":\"a\",\"turn\":0,\"append_tokens\":0,\"output_tokens\":1,\"proposal\":\"capable\"}",
                "turn 0 needs `append_tokens`",
            ),
            ("\n# nothing\n", "no sessions"),
        ] {
            let e = parse_trace(text, "t.jsonl").unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("t.jsonl"), "{e}");
        }
    }

    proptest! {
        #[test]
        fn generated_sessions_respect_the_ranges(seed in any::<u64>()) {
            let sp = spec();
            let a = generate(&sp, sp.count, seed);
            prop_assert_eq!(&a, &generate(&sp, sp.count, seed));
            prop_assert_eq!(a.len(), 5);
            for s in &a {
                prop_assert!((2..=4).contains(&s.turns.len()));
                prop_assert!((500..=900).contains(&s.turns[0].append_tokens));
                prop_assert_eq!(s.turns[0].think_ms, 0);
                for t in &s.turns[1..] {
                    prop_assert!((50..=100).contains(&t.append_tokens));
                    prop_assert!(t.think_ms <= 10);
                }
                prop_assert!(s.turns.iter().all(|t| (8..=16).contains(&t.output_tokens)));
            }
        }
    }
}
