//! Every sy command that docs/gpu.md and docs/eval.md show parses against the tool's own clap
//! definition.
//!
//! The pages are read the way the runnable-README test reads README.md: every fenced `sh` or
//! `bash` block (indented ones inside lists too), a trailing `\` continuing a line and ` #`
//! starting a comment; and every inline code span that holds a tool command with a flag. A line
//! is split into commands at `&&`, `||`, `;` and `|`; leading `VAR=value` assignments are
//! dropped; `$VAR` / `${VAR}` become a URL when the name says it is one (`…URL`, `…FRONTEND`,
//! `…SELECT`), else a plain word. A command whose program is one of the tools is parsed with
//! `clap::Command::try_get_matches_from`: unknown flags, bad values, missing required arguments
//! and conflicts fail, and nothing is run. An inline span is a fragment (`sy-eval --aa`), so a
//! missing required argument is allowed there; everything else fails there too. Other programs (`python`, `curl`, `cp`, …) are left
//! alone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

const PAGES: &[&str] = &["docs/gpu.md", "docs/eval.md"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// A command as shown, with where it was shown.
#[derive(Debug, Clone, PartialEq)]
struct Shown {
    line: usize,
    text: String,
    /// An inline mention (`sy-eval --aa`): a fragment, so a missing required argument is fine;
    /// an unknown flag or a bad value still fails.
    inline: bool,
}

/// Every shell line of the page's fenced `sh`/`bash` blocks and every inline span with a tool
/// command and a flag.
fn shown_lines(page: &str) -> Vec<Shown> {
    let mut out = Vec::new();
    let mut in_block = false;
    let mut fence = String::new();
    let mut current: Option<Shown> = None;
    // Prose lines outside code blocks: inline spans may run over a line break.
    let mut prose: Vec<(usize, &str)> = Vec::new();
    for (i, raw) in page.lines().enumerate() {
        let t = raw.trim_start();
        if !in_block {
            if t.starts_with("```sh") || t.starts_with("```bash") {
                in_block = true;
                fence = "```".to_string();
                continue;
            }
            if t.starts_with("```") {
                // another language: skip to its end
                in_block = true;
                fence = "```-skip".to_string();
                continue;
            }
            prose.push((i + 1, raw));
            continue;
        }
        if t.starts_with("```") {
            in_block = false;
            if let Some(c) = current.take() {
                out.push(c);
            }
            continue;
        }
        if fence.ends_with("-skip") {
            continue;
        }
        let body = strip_comment(raw).trim_end().to_string();
        if body.trim().is_empty() && current.is_none() {
            continue;
        }
        let (text, continues) = match body.strip_suffix('\\') {
            Some(head) => (head.to_string(), true),
            None => (body, false),
        };
        let entry = current.get_or_insert_with(|| Shown {
            line: i + 1,
            text: String::new(),
            inline: false,
        });
        entry.text.push_str(text.trim());
        entry.text.push(' ');
        if !continues {
            let mut done = current.take().unwrap();
            done.text = done.text.trim().to_string();
            if !done.text.is_empty() {
                out.push(done);
            }
        }
    }
    out.extend(inline_commands(&prose));
    out
}

/// ` #` outside quotes starts a comment.
fn strip_comment(line: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b'#' if !single && !double && (i == 0 || bytes[i - 1] == b' ') => return &line[..i],
            _ => {}
        }
    }
    line
}

/// Inline code spans of the prose that hold a tool command with a flag; a span may run over a
/// line break (joined with a space). Each is reported at the line it starts on.
fn inline_commands(prose: &[(usize, &str)]) -> Vec<Shown> {
    let mut out = Vec::new();
    let mut span: Option<Shown> = None;
    for &(number, line) in prose {
        if line.trim().is_empty() {
            span = None; // a code span never crosses a paragraph break
            continue;
        }
        for (k, piece) in line.split('`').enumerate() {
            if k > 0 {
                // a backtick: a span closes, or one opens
                match span.take() {
                    Some(done) => {
                        let first = done.text.split_whitespace().next().unwrap_or("");
                        if tool_of(first).is_some() && done.text.contains(" -") {
                            out.push(Shown {
                                line: done.line,
                                text: done.text.trim().to_string(),
                                inline: true,
                            });
                        }
                    }
                    None => {
                        span = Some(Shown {
                            line: number,
                            text: String::new(),
                            inline: true,
                        });
                    }
                }
            }
            if let Some(open) = span.as_mut() {
                open.text.push_str(piece);
            }
        }
        if let Some(open) = span.as_mut() {
            open.text.push(' ');
        }
    }
    out
}

/// Splits a shell line into words, honouring quotes, substituting variables and cutting at
/// `&&`, `||`, `;` and `|`: one word list per command.
fn commands_of(line: &str) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let (mut single, mut double) = (false, false);
    let end_word = |word: &mut String, in_word: &mut bool, commands: &mut Vec<Vec<String>>| {
        if *in_word {
            commands.last_mut().unwrap().push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' if !double => {
                single = !single;
                in_word = true;
            }
            '"' if !single => {
                double = !double;
                in_word = true;
            }
            '$' if !single => {
                let braced = chars.peek() == Some(&'{');
                if braced {
                    chars.next();
                }
                let mut name = String::new();
                while let Some(&n) = chars.peek() {
                    if n.is_ascii_alphanumeric() || n == '_' {
                        name.push(n);
                        chars.next();
                    } else {
                        break;
                    }
                }
                if braced {
                    // ${NAME:-default} and the like: skip to the closing brace
                    for n in chars.by_ref() {
                        if n == '}' {
                            break;
                        }
                    }
                }
                word.push_str(&placeholder(&name));
                in_word = true;
            }
            c if single || double => word.push(c),
            ' ' | '\t' => end_word(&mut word, &mut in_word, &mut commands),
            ';' | '|' | '&' => {
                end_word(&mut word, &mut in_word, &mut commands);
                if matches!(chars.peek(), Some('&') | Some('|')) {
                    chars.next();
                }
                commands.push(Vec::new());
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    end_word(&mut word, &mut in_word, &mut commands);
    commands
        .into_iter()
        .map(|words| {
            words
                .into_iter()
                .skip_while(|w| is_assignment(w))
                .collect::<Vec<_>>()
        })
        .filter(|words| !words.is_empty())
        .collect()
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with('-')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn placeholder(name: &str) -> String {
    let upper = name.to_ascii_uppercase();
    if ["URL", "FRONTEND", "SELECT"]
        .iter()
        .any(|k| upper.ends_with(k))
    {
        "http://127.0.0.1:18000".to_string()
    } else {
        format!("VALUE_OF_{upper}")
    }
}

/// The tool's clap definition, for the tools this workspace builds.
fn tool_of(program: &str) -> Option<clap::Command> {
    let name = Path::new(program).file_name()?.to_str()?;
    Some(match name {
        "sy-collect" => sy_collect::cli::command(),
        "sy-fit" => sy_fit::cli::command(),
        "sy-margin" => sy_margin::cli::command(),
        "sy-select" => sy_select::cli::command(),
        "sy-eval" => sy_eval::cli::command(),
        _ => return None,
    })
}

/// Parses every tool command of `page`; returns how many were checked and every failure.
fn check_page(name: &str, page: &str) -> (usize, Vec<String>) {
    let mut checked = 0;
    let mut failures = Vec::new();
    for shown in shown_lines(page) {
        for words in commands_of(&shown.text) {
            if words[0].starts_with("sy-sim") {
                failures.push(format!(
                    "{name}:{}: `{}`: sy-sim has no library clap definition to check against",
                    shown.line, shown.text
                ));
                continue;
            }
            let Some(command) = tool_of(&words[0]) else {
                continue;
            };
            checked += 1;
            if let Err(e) = command.try_get_matches_from(&words) {
                let fragment_ok = shown.inline
                    && matches!(
                        e.kind(),
                        clap::error::ErrorKind::MissingRequiredArgument
                            | clap::error::ErrorKind::MissingSubcommand
                    );
                if fragment_ok {
                    continue;
                }
                failures.push(format!(
                    "{name}:{}: `{}` does not parse:\n{}",
                    shown.line,
                    words.join(" "),
                    e.render()
                ));
            }
        }
    }
    (checked, failures)
}

#[test]
fn every_command_in_gpu_and_eval_docs_parses() {
    let repo = repo();
    let mut failures = Vec::new();
    for page in PAGES {
        let text = std::fs::read_to_string(repo.join(page)).unwrap();
        let (checked, f) = check_page(page, &text);
        assert!(checked > 0, "{page}: no sy command found to check");
        failures.extend(f);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_wrong_flag_a_bad_value_and_a_missing_argument_fail() {
    let page = "\
Text `sy-fit --run-dir r --seed 7` and `sy-fit
--no-such-flag`; the mode `sy-eval --aa` alone.

   ```sh
   sy-collect --plan p.toml --target nowhere
   sy-select decide --observations turn.json   # needs --bundle
   DYN=1 sy-margin --run-dir $RUN \\
     --records a.parquet && sy-fit --run-dir x
   python -m dynamo.frontend --http-port 8000
   ```
";
    let (checked, failures) = check_page("t.md", page);
    assert_eq!(checked, 7, "{failures:#?}");
    assert_eq!(failures.len(), 3, "{failures:#?}");
    let has = |line: &str, word: &str| {
        failures
            .iter()
            .any(|f| f.contains(line) && f.contains(word))
    };
    assert!(has("t.md:1:", "--no-such-flag"), "{failures:#?}");
    assert!(has("t.md:5:", "nowhere"), "{failures:#?}");
    assert!(has("t.md:6:", "decide"), "{failures:#?}");
}

#[test]
fn words_quotes_variables_and_separators() {
    assert_eq!(
        commands_of(r#"A=1 sy-fit --run-dir "runs/a b" --records $RECS && cp x 'y z' | tee"#),
        vec![
            vec![
                "sy-fit",
                "--run-dir",
                "runs/a b",
                "--records",
                "VALUE_OF_RECS"
            ],
            vec!["cp", "x", "y z"],
            vec!["tee"],
        ]
    );
    assert_eq!(
        commands_of("sy-collect --frontend-url ${SY_DYNAMO_FRONTEND}"),
        vec![vec![
            "sy-collect",
            "--frontend-url",
            "http://127.0.0.1:18000"
        ]]
    );
    assert_eq!(strip_comment("a 'b # c' # d"), "a 'b # c' ");
}
