//! The commands that reproduce the run and the provenance of its inputs.

use super::*;

/// A path as a shell word (quoted when it needs it).
pub(super) fn sh(p: &Path) -> String {
    let s = p.display().to_string();
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,".contains(c))
    {
        s
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The commands that reproduce the report's tables, as run from the directory `sy-select` ran in.
pub fn reproduce_commands(out: &SelectOutput) -> Vec<String> {
    let o = &out.options;
    let records: Vec<String> = o.records.iter().map(|p| sh(p)).collect();
    let records = records.join(" ");
    let bundle = sh(&o.out_dir.join(Artifact::Bundle.file_name()));
    vec![
        format!(
            "sy-select replay --bundle {bundle} --records {records} --splits {} --split selection",
            sh(&o.splits)
        ),
        format!(
            "sy-select replay --bundle {bundle} --records {records} --splits {} --split selection --decisions {}",
            sh(&o.splits),
            sh(&o.out_dir.join("decisions.parquet"))
        ),
    ]
}

pub(super) fn reproduce(r: &mut Report, out: &SelectOutput) {
    let cmds = reproduce_commands(out).join("\n");
    r.markdown(&format!(
        "## Reproduce\n\nFrom the directory `sy-select` ran in: the first command recomputes the variant table above from the frozen bundle; the second also writes every decision (inputs, predictions, advantage, reason, chosen and oracle TTFT) to Parquet.\n\n```sh\n{cmds}\n```"
    ));
}

pub(super) fn provenance(r: &mut Report, out: &SelectOutput) {
    let sel = &out.selection;
    let mut md = String::from("## Provenance\n\n| input | SHA-256 |\n|---|---|\n");
    for f in &sel.input_files {
        md.push_str(&format!("| `{}` | `{}` |\n", f.path, f.sha256));
    }
    md.push_str(&format!(
        "\nSplit seed {}; guard limits: max age {} ms, destination limit {}, local limit {}. Tools: {}.\n",
        sel.split_seed,
        sel.limits.max_age_ms,
        sel.limits.destination_limit,
        sel.limits.local_limit,
        sel.tool_versions
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if let Some(dc) = out.fit_file.as_ref().and_then(|f| f.data_check.as_ref()) {
        md.push_str("\nData-quality check (`sy-collect check`) of the fitted runs: ");
        let runs: Vec<String> = dc
            .runs
            .iter()
            .map(|r| {
                if r.failed.is_empty() {
                    format!("`{}` **{}**", r.path, r.verdict)
                } else {
                    format!("`{}` **{}** ({})", r.path, r.verdict, r.failed.join(", "))
                }
            })
            .collect();
        md.push_str(&runs.join("; "));
        md.push_str(if dc.accepted_failing {
            ". **A failing run was fitted anyway (`sy-fit --accept-failed-check`): the figures \
             above rest on data that failed its checks.**\n"
        } else {
            ".\n"
        });
    }
    if !sel.warnings.is_empty() {
        md.push_str("\n**All warnings**\n\n");
        for w in &sel.warnings {
            md.push_str(&format!("- {w}\n"));
        }
    }
    r.markdown(&md);
}

#[cfg(test)]
mod tests {
    use super::super::testkit::output;
    use super::*;

    #[test]
    fn paths_are_quoted_only_when_the_shell_needs_it() {
        assert_eq!(sh(Path::new("runs/a-1/fit.json")), "runs/a-1/fit.json");
        assert_eq!(sh(Path::new("my runs/fit.json")), "'my runs/fit.json'");
        assert_eq!(sh(Path::new("it's")), "'it'\\''s'");
    }

    #[test]
    fn the_commands_reproduce_with_sy_select() {
        let commands = reproduce_commands(output());
        assert!(!commands.is_empty());
        assert!(
            commands.iter().all(|c| c.contains("sy-select")),
            "{commands:?}"
        );
    }
}
