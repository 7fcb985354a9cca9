//! The Q tables (plots and tables) and the client − server gap.

use super::*;

/// Column `j` of a Q table by its cached fraction: the value when every row has the same, else the
/// range over the rows (each row's f axis is the fraction observed at its prompt length).
pub(super) fn f_column_label(q: &sy_selector::QTable, j: usize) -> String {
    let fs: Vec<f64> = (0..q.n_axis().len())
        .filter_map(|i| q.f_row(i).get(j).copied())
        .collect();
    let (lo, hi) = fs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &f| {
            (lo.min(f), hi.max(f))
        });
    if format!("{lo:.3}") == format!("{hi:.3}") {
        format!("{lo:.3}")
    } else {
        format!("{lo:.3}–{hi:.3}")
    }
}

pub(super) fn q_plots(
    name: &str,
    est: &ModelEstimators,
    report: Option<&sy_rundir::artifact::fit::QTableReport>,
) -> (Plot, Plot) {
    let q = &est.q;
    let n_axis = q.n_axis();
    let f_labels: Vec<String> = (0..q.f_len()).map(|j| f_column_label(q, j)).collect();
    let cell = |i: usize, j: usize| {
        report?
            .cells
            .iter()
            .find(|c| c.n == n_axis[i] && Some(&c.f) == q.f_row(i).get(j))
    };
    let values: Vec<Vec<f64>> = (0..n_axis.len())
        .map(|i| {
            (0..q.f_len())
                .map(|j| q.value(i, j).unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    let counts: Vec<Vec<u64>> = (0..n_axis.len())
        .map(|i| {
            (0..q.f_len())
                .map(|j| cell(i, j).map_or(0, |c| c.count as u64))
                .collect()
        })
        .collect();
    let heat = Plot::Heatmap(Heatmap {
        title: format!("Q table, {name} model: median no-load TTFT"),
        x_label: "cached fraction f (observed K/N)".into(),
        y_label: "prompt tokens N (observed)".into(),
        value_label: "TTFT (ms)".into(),
        x_ticks: f_labels.clone(),
        y_ticks: n_axis.iter().map(|n| format!("{n:.0}")).collect(),
        values: values.clone(),
        decimals: 1,
        counts: report.map(|_| counts),
        mark: None,
    });
    let mut series = Vec::new();
    let mut bands = Vec::new();
    for (j, f) in f_labels.iter().enumerate() {
        series.push(Series {
            name: format!("f = {f}"),
            points: n_axis
                .iter()
                .zip(&values)
                .map(|(n, row)| (*n, row[j]))
                .filter(|p| p.1.is_finite())
                .collect(),
        });
        bands.push(sy_report::Band {
            name: "interquartile range of the repeats".into(),
            colour: j,
            points: (0..n_axis.len())
                .filter_map(|i| {
                    let c = cell(i, j)?;
                    Some((n_axis[i], c.p25_ms?, c.p75_ms?))
                })
                .collect(),
        });
    }
    let lines = Plot::Lines(Lines {
        title: match report {
            Some(r) => format!(
                "{name} model: no-load TTFT vs prompt length ({} records)",
                r.records
            ),
            None => format!("{name} model: no-load TTFT vs prompt length"),
        },
        x_label: "prompt tokens N (log scale)".into(),
        y_label: "median TTFT (ms)".into(),
        series,
        log_x: true,
        x_ticks: Some(n_axis.to_vec()),
        y_range: None,
        step: false,
        bands,
        vlines: vec![],
    });
    (heat, lines)
}

pub(super) fn q_tables(r: &mut Report, out: &SelectOutput) {
    r.markdown("## Q tables (no-load TTFT)\n\nEach cell is the median TTFT of its Q-grid records (n = records in the cell); the cached-fraction axis is the observed K/N of each cell (block-rounded, so it differs by prompt length: a column spanning several values is labelled with their range), the N axis the observed prompt length.");
    for (name, est, rep) in [
        (
            "efficient",
            &out.fit.efficient,
            out.fit_file.as_ref().map(|f| &f.models.efficient.q_table),
        ),
        (
            "capable",
            &out.fit.capable,
            out.fit_file.as_ref().map(|f| &f.models.capable.q_table),
        ),
    ] {
        let (heat, lines) = q_plots(name, est, rep);
        r.figure(
            &format!("q_heatmap_{name}"),
            &format!("Q table of the {name} model (cell: median TTFT in ms and record count)"),
            heat,
        );
        r.figure(
            &format!("q_lines_{name}"),
            &format!("No-load TTFT vs N per cached fraction, {name} model; shaded: interquartile range of the cell's records"),
            lines,
        );
    }
}

/// The client − server TTFT gap per phase and model ([`crate::gap`]) over every record the run
/// was given.
pub(super) fn client_server_gap(r: &mut Report, out: &SelectOutput) {
    r.markdown(&crate::gap::gap_markdown(&out.gap));
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{output, section};
    use super::*;

    #[test]
    fn both_models_q_tables_are_written() {
        let out = output();
        let text = section(|r| q_tables(r, out));
        assert!(
            text.contains("efficient") && text.contains("capable"),
            "{text}"
        );
        let q = &out.fit.efficient.q;
        assert!(!f_column_label(q, 0).is_empty());
        let gap = section(|r| client_server_gap(r, out));
        assert!(gap.contains("## "), "{gap}");
    }
}
