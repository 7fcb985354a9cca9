//! Keeps `docs/architecture.md` true: its crate table lists exactly the workspace's members, and
//! every library and tool crate of the table appears in its picture; its run-artifact table names
//! every artifact of the run directory's layout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The crate names of the workspace's `members` (`crates/NAME`).
fn workspace_members() -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let start = manifest.find("members = [").expect("a members list");
    let end = start
        + manifest[start..]
            .find(']')
            .expect("the end of the members list");
    manifest[start..end]
        .lines()
        .filter_map(|l| l.trim().trim_matches([',', '"']).strip_prefix("crates/"))
        .map(str::to_string)
        .collect()
}

/// The rows of the `## Crates` table: (crate, kind).
fn table_rows(doc: &str) -> Vec<(String, String)> {
    let section = doc
        .split("\n## Crates\n")
        .nth(1)
        .expect("a `## Crates` section");
    let section = section.split("\n## ").next().unwrap_or_default();
    section
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((name.to_string(), cells.get(2)?.to_string()))
        })
        .collect()
}

/// Whether `name` occurs in `text` as a whole crate name (not as the start of a longer one).
fn names(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(i, _)| {
        let after = text[i + name.len()..].chars().next();
        !matches!(after, Some(c) if c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

#[test]
fn the_architecture_page_lists_the_workspace_crates() {
    let doc = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let rows = table_rows(&doc);
    let listed: BTreeSet<String> = rows.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(
        rows.len(),
        listed.len(),
        "docs/architecture.md lists a crate twice"
    );
    assert_eq!(
        listed,
        workspace_members(),
        "docs/architecture.md's crate table vs the workspace's members (Cargo.toml)"
    );
    let picture = doc.split("\n## ").next().unwrap_or_default();
    for (name, kind) in &rows {
        if kind.contains("library") || kind.contains("tool") {
            assert!(
                names(picture, name),
                "{name} ({kind}) is missing from the picture of docs/architecture.md"
            );
        }
    }
}

#[test]
fn crate_names_match_whole_words_only() {
    assert!(names("sy-select ──▶", "sy-select"));
    assert!(!names("sy-selector", "sy-select"));
    assert_eq!(
        table_rows(
            "x\n## Crates\n| crate | kind |\n|---|---|\n| `a-b` | tool |\n## Next\n| `c` | x |\n"
        ),
        vec![("a-b".to_string(), "tool".to_string())]
    );
}

#[test]
fn the_run_artifacts_table_names_every_artifact() {
    let doc = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let section = doc
        .split("\n## Run artifacts\n")
        .nth(1)
        .expect("a `## Run artifacts` section");
    let section = section.split("\n## ").next().unwrap_or_default();
    for a in sy_rundir::Artifact::ALL {
        let name = a.file_name();
        assert!(
            section.contains(&format!("`{name}`")) || section.contains(&format!("`{name}/`")),
            "{name} ({}) is missing from docs/architecture.md's run-artifact table",
            a.kind()
        );
    }
}
