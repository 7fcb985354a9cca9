//! Keeps the README and the CLI reference true.
//!
//! * Every fenced `sh` block in README.md that follows a `<!-- runnable -->` line is run, line by
//!   line (a trailing `\` continues a line), with the workspace's debug binaries first on `PATH`,
//!   in a scratch directory that links the repository's `data/` and `schemas/`. Each command must
//!   exit 0. Blocks marked `<!-- runnable: ci -->` are run by `.ci/run` instead (they build in
//!   release mode or take minutes) and are only checked to name existing scripts here.
//! * `docs/cli.md` must equal what `scripts/gen-cli-docs.sh` prints from the binaries' clap help.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The directory of the debug binaries: this test binary lives in `<target>/debug/deps/`.
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

#[derive(Debug)]
struct Block {
    marker: String,
    line: usize,
    commands: Vec<String>,
}

fn runnable_blocks(readme: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = readme.lines().enumerate().peekable();
    let mut marker: Option<String> = None;
    while let Some((i, line)) = lines.next() {
        let t = line.trim();
        if t.starts_with("<!-- runnable") {
            marker = Some(t.to_string());
            continue;
        }
        if t.starts_with("```sh") || t.starts_with("```bash") {
            let Some(m) = marker.take() else { continue };
            let mut commands = Vec::new();
            let mut current = String::new();
            for (_, l) in lines.by_ref() {
                if l.trim_start().starts_with("```") {
                    break;
                }
                let body = l.split(" #").next().unwrap_or("").trim_end();
                if body.trim().is_empty() || body.trim_start().starts_with('#') {
                    continue;
                }
                if let Some(cont) = body.strip_suffix('\\') {
                    current.push_str(cont);
                    current.push(' ');
                } else {
                    current.push_str(body);
                    commands.push(std::mem::take(&mut current));
                }
            }
            blocks.push(Block {
                marker: m,
                line: i + 1,
                commands,
            });
        } else if !t.is_empty() {
            marker = None;
        }
    }
    blocks
}

#[test]
fn readme_runnable_commands_succeed() {
    let repo = repo();
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let blocks = runnable_blocks(&readme);
    assert!(
        !blocks.is_empty(),
        "README.md has no <!-- runnable --> blocks"
    );
    let scratch = tempfile::tempdir().unwrap();
    for dir in ["data", "schemas", "scripts"] {
        std::os::unix::fs::symlink(repo.join(dir), scratch.path().join(dir)).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for block in &blocks {
        if block.marker.contains("ci") {
            for cmd in &block.commands {
                let script = cmd.split_whitespace().next().unwrap();
                assert!(
                    repo.join(script).exists(),
                    "README.md:{}: `{cmd}` names {script}, which does not exist",
                    block.line
                );
            }
            continue;
        }
        for cmd in &block.commands {
            let out = Command::new("bash")
                .arg("-c")
                .arg(cmd)
                .current_dir(scratch.path())
                .env("PATH", &path)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "README.md:{}: `{cmd}` failed ({}):\n{}\n{}",
                block.line,
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran > 0, "no README command was run");
}

#[test]
fn cli_reference_is_generated_from_the_binaries() {
    let repo = repo();
    let out = tempfile::NamedTempFile::new().unwrap();
    let status = Command::new("bash")
        .arg(repo.join("scripts/gen-cli-docs.sh"))
        .arg(bin_dir())
        .arg(out.path())
        .current_dir(&repo)
        .status()
        .unwrap();
    assert!(status.success());
    let generated = std::fs::read_to_string(out.path()).unwrap();
    let committed = std::fs::read_to_string(repo.join("docs/cli.md")).unwrap();
    assert!(
        generated == committed,
        "docs/cli.md is stale: run scripts/gen-cli-docs.sh and commit it"
    );
}

#[test]
fn parser_reads_marked_blocks_only() {
    let text = "intro\n<!-- runnable -->\n```sh\nsy-fit --help   # comment\nsy-a \\\n  --b\n```\n\n```sh\nnot-run\n```\n";
    let blocks = runnable_blocks(text);
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].commands, vec!["sy-fit --help", "sy-a    --b"]);
}
