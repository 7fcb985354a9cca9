//! Building a table: appending valid rows, taking rows back to a mark, appending another table,
//! pairing probes and dropping rows.

use super::*;

/// A [`ProbeTable`]'s rows and interned text as they were before a frame was appended (see
/// [`ProbeTable::mark`]).
pub(super) struct TableMark {
    pub(super) rows: usize,
    pub(super) probe_text: usize,
    pub(super) conditions: ConditionMark,
    pub(super) models: usize,
    pub(super) decode_lengths: usize,
}

impl ProbeTable {
    /// Optional value `i` of `column`, present when the row's `present` bits have `bit`.
    #[inline]
    pub(super) fn value<T: Copy>(&self, column: &[T], bit: u16, i: usize) -> Option<T> {
        (self.present[i] & bit != 0).then(|| column[i])
    }

    /// Appends one valid row.
    pub(super) fn push_row(&mut self, row: RowValues<'_>, origin: RowOrigin) {
        // Consecutive rows usually share a condition: skip the lookups then.
        let same = self.condition.last().is_some_and(|&c| {
            let (run, cond) = self.condition_key(c);
            run == row.run_id && cond == row.condition_id
        });
        let load = row.phase == Phase::Load;
        let condition = match (same, self.condition.last()) {
            (true, Some(&c)) => {
                if load {
                    self.conditions.mark_load(c);
                }
                c
            }
            _ => self.conditions.intern(row.run_id, row.condition_id, load),
        };
        self.condition.push(condition);
        self.probe_text.extend_from_slice(row.probe_id.as_bytes());
        let end = self.probe_text.len() as u64;
        self.probe_end.push(end);
        self.phase.push(codes::phase(row.phase));
        self.role.push(codes::role(row.role));
        self.status.push(codes::status(row.status));
        self.repeat.push(row.repeat);
        let model = match self.model.last() {
            Some(&m) if self.models.get(m) == row.model => m,
            _ => self.models.intern(row.model),
        };
        self.model.push(model);
        let decode_length = match (row.decode_length, self.decode_length.last()) {
            (None, _) => NO_TEXT,
            (Some(d), Some(&last)) if last != NO_TEXT && self.decode_lengths.get(last) == d => last,
            (Some(d), _) => self.decode_lengths.intern(d),
        };
        self.decode_length.push(decode_length);
        self.planned_n.push(row.planned_n);
        self.planned_f.push(row.planned_f);
        self.present.push(row.present_bits());
        self.n.push(row.n.unwrap_or(0));
        self.k.push(row.k.unwrap_or(0));
        self.r.push(row.r.unwrap_or(0));
        self.prefill_tokens_booked
            .push(row.prefill_tokens_booked.unwrap_or(0));
        self.prefill_capacity_tokens
            .push(row.prefill_capacity_tokens.unwrap_or(0));
        self.observed_at_unix_ms
            .push(row.observed_at_unix_ms.unwrap_or(0.0));
        self.sent_at_unix_ms.push(row.sent_at_unix_ms);
        self.ttft_ms.push(row.ttft_ms.unwrap_or(0.0));
        self.client_server_gap_ms
            .push(row.client_server_gap_ms.unwrap_or(0.0));
        self.attempts.push(row.attempts);
        self.pick.push(match (row.reserved, row.pick_differs) {
            (false, _) => 0,
            (true, None) => 1,
            (true, Some(false)) => 2,
            (true, Some(true)) => 3,
        });
        self.origins.push(origin);
    }

    pub(super) fn push_record(&mut self, r: &Record, origin: RowOrigin) {
        self.push_row(RowValues::of_record(r), origin);
    }

    pub(super) fn reserve(&mut self, rows: usize) {
        macro_rules! reserve {
            ($t:expr, $rows:expr; $($c:ident),*) => { $($t.$c.reserve($rows);)* };
        }
        self.probe_end.reserve(rows);
        row_columns!(reserve!(self, rows));
    }

    /// Appends the rows of `other` (rows converted on another thread, see
    /// [`ProbeTable::push_native`]): its text is interned here in its order of first
    /// appearance, so the result is the table of both parts read in one pass.
    pub(super) fn append(&mut self, other: &ProbeTable) {
        let start = self.len();
        let conditions: Vec<u32> = (0..other.conditions.count())
            .map(|c| {
                let (run, condition) = other.conditions.key(c as u32);
                let load = other.conditions.is_load.get(c).copied().unwrap_or(false);
                self.conditions.intern(run, condition, load)
            })
            .collect();
        let models: Vec<u32> = other
            .models
            .values
            .iter()
            .map(|m| self.models.intern(m))
            .collect();
        let decode_lengths: Vec<u32> = (other.decode_lengths.values.iter())
            .map(|d| self.decode_lengths.intern(d))
            .collect();
        let text = self.probe_text.len() as u64;
        let remap = |ids: &mut [u32], to: &[u32]| {
            for id in ids {
                *id = to.get(*id as usize).copied().unwrap_or(NO_TEXT);
            }
        };
        // Every column on its own task: a column built in its cache file is written into fresh
        // page-cache pages, which the kernel zeroes on first touch, and the decoding threads
        // leave a core free meanwhile (at 10 M records this thread was the load's bottleneck).
        rayon::scope(|s| {
            s.spawn(|_| {
                self.probe_text.extend_from_slice(&other.probe_text);
            });
            s.spawn(|_| {
                self.probe_end.extend_from_slice(&other.probe_end);
                for end in self.probe_end.tail_mut(start) {
                    *end += text;
                }
            });
            macro_rules! extend {
                ($t:expr, $other:expr; $($c:ident),*) => {
                    $(s.spawn(|_| $t.$c.extend_from_slice(&$other.$c));)*
                };
            }
            row_columns!(extend!(self, other));
        });
        // The appended ids are the other table's: into this table's interners.
        rayon::scope(|s| {
            s.spawn(|_| remap(self.condition.tail_mut(start), &conditions));
            s.spawn(|_| remap(self.model.tail_mut(start), &models));
            s.spawn(|_| remap(self.decode_length.tail_mut(start), &decode_lengths));
        });
    }

    /// What [`ProbeTable::restore`] goes back to (rows are only ever appended between the two).
    pub(super) fn mark(&self) -> TableMark {
        TableMark {
            rows: self.condition.len(),
            probe_text: self.probe_text.len(),
            conditions: self.conditions.mark(),
            models: self.models.len(),
            decode_lengths: self.decode_lengths.len(),
        }
    }

    /// Drops the rows appended since `mark`, and the text they interned.
    pub(super) fn restore(&mut self, mark: TableMark) {
        macro_rules! truncate {
            ($t:expr, $rows:expr; $($c:ident),*) => { $($t.$c.truncate($rows);)* };
        }
        row_columns!(truncate!(self, mark.rows));
        self.probe_end.truncate(mark.rows);
        self.probe_text.truncate(mark.probe_text);
        self.conditions.restore(mark.conditions);
        self.models.truncate(mark.models);
        self.decode_lengths.truncate(mark.decode_lengths);
    }

    pub(super) fn push_columns(
        &mut self,
        c: &ProbeColumns<'_>,
        path: &Path,
        offset: usize,
        file: u32,
        options: &LoadOptions,
    ) -> Result<(), RecordsError> {
        let first_issue = first_issue_per_row(c);
        for i in 0..c.height {
            let row_no = offset + i + 1;
            let checked = match first_issue.get(&i) {
                Some((field, message)) => Err((*field, message.clone())),
                None => RowValues::of_columns(c, i)
                    .and_then(|v| validate_fields(&v.checked()).map(|()| v)),
            };
            match checked {
                Ok(values) => {
                    let row = u32::try_from(row_no).unwrap_or(u32::MAX);
                    self.push_row(values, RowOrigin { file, row });
                }
                Err((field, message)) => {
                    let issue = RowIssue {
                        path: path.to_path_buf(),
                        row: row_no,
                        field: field.to_string(),
                        message,
                    };
                    if !options.skip_invalid {
                        return Err(RecordsError::Row(issue));
                    }
                    self.skipped.push(issue);
                }
            }
        }
        Ok(())
    }

    /// Pairs the load-phase probes (see [`crate::pairing::check_pairing`]); with
    /// `skip_invalid`, probes that do not pair are dropped and reported.
    pub(super) fn pair_up(&mut self, options: &LoadOptions) -> Result<(), RecordsError> {
        let describe = |i: usize| describe_origin(&self.origins, &self.files, i);
        let torn = |i: usize| torn_note(&self.origins, &self.files, i);
        let outcome = check_pairing(self, &describe, &torn);
        let mut bad = outcome.bad;
        if bad.is_empty() {
            self.pairs = to_u32_pairs(&outcome.pairs);
            return Ok(());
        }
        sort_by_origin(&mut bad, &self.origins);
        let issue = |b| pair_row_issue(&self.origins, &self.files, b);
        if !options.skip_invalid {
            return Err(RecordsError::Row(issue(&bad[0])));
        }
        let mut issues: Vec<RowIssue> = bad.iter().map(issue).collect();
        let drop = drop_mask(self, &bad, |i| {
            issues.push(partner_issue(
                &self.origins,
                &self.files,
                i,
                self.probe_id_of(i),
            ));
        });
        self.skipped.extend(issues);
        self.retain(&drop);
        let describe = |i: usize| describe_origin(&self.origins, &self.files, i);
        let outcome = check_pairing(self, &describe, &|_| String::new());
        self.pairs = to_u32_pairs(&outcome.pairs);
        Ok(())
    }

    /// Keeps the rows whose `drop` flag is false.
    pub(super) fn retain(&mut self, drop: &[bool]) {
        let mut text = Vec::with_capacity(self.probe_text.len());
        let mut ends = Vec::with_capacity(self.probe_end.len());
        for (i, d) in drop.iter().enumerate() {
            if !d {
                text.extend_from_slice(self.probe_id_of(i).as_bytes());
                ends.push(text.len() as u64);
            }
        }
        self.probe_text = Column::from(text);
        self.probe_end = Column::from(ends);
        macro_rules! retain {
            ($t:expr, $drop:expr; $($c:ident),*) => { $($t.$c.retain_unless($drop);)* };
        }
        row_columns!(retain!(self, drop));
    }
}

pub(super) fn to_u32_pairs(pairs: &[(usize, usize)]) -> Column<[u32; 2]> {
    let pairs: Vec<[u32; 2]> = pairs
        .iter()
        .map(|&(e, c)| {
            [
                u32::try_from(e).unwrap_or(u32::MAX),
                u32::try_from(c).unwrap_or(u32::MAX),
            ]
        })
        .collect();
    Column::from(pairs)
}

/// The first cell problem of each row that has one (earliest field in the record layout).
pub(super) fn first_issue_per_row(
    c: &ProbeColumns<'_>,
) -> FxHashMap<usize, (&'static str, String)> {
    let mut sorted: Vec<&(usize, u16, &'static str, String)> = c.issues.iter().collect();
    sorted.sort_by_key(|(row, order, _, _)| (*row, *order));
    let mut first = FxHashMap::default();
    for (row, _, field, message) in sorted {
        first
            .entry(*row)
            .or_insert_with(|| (*field, message.clone()));
    }
    first
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::synth::{SynthSpec, generate};

    fn records(conditions: usize, seed: u64) -> Vec<Record> {
        generate(&SynthSpec {
            conditions,
            repeats: 2,
            seed,
            ..SynthSpec::default()
        })
    }

    /// Everything a restored table must hold as before: rows, text and conditions.
    fn summary(t: &ProbeTable) -> (usize, usize, Vec<(String, String)>, Vec<String>) {
        let load = t.load_conditions().map(|(r, c)| (r.into(), c.into()));
        let rows = t
            .rows()
            .map(|r| format!("{} {} {}", r.probe_id(), r.model(), r.condition()));
        (t.len(), t.condition_count(), load.collect(), rows.collect())
    }

    #[test]
    fn restoring_a_mark_forgets_rows_conditions_and_text_appended_since() {
        let first = records(3, 1);
        let mut later = records(4, 2);
        for r in &mut later {
            r.run_id = "another run".into();
            r.model = format!("{} v2", r.model);
            r.background.decode_length = Some("very long".into());
        }
        // A load-phase row of a condition the table has only seen outside the load phase.
        let mut q_grid = first
            .iter()
            .find(|r| r.phase != Phase::Load)
            .unwrap()
            .clone();
        q_grid.phase = Phase::Load;
        later.push(q_grid);
        let origin = RowOrigin { file: 0, row: 1 };
        let mut table = ProbeTable::default();
        first.iter().for_each(|r| table.push_record(r, origin));
        let before = summary(&table);
        let mark = table.mark();
        later.iter().for_each(|r| table.push_record(r, origin));
        assert_ne!(summary(&table), before);
        table.restore(mark);
        assert_eq!(summary(&table), before);
        // The interned text is forgotten too: appending the later rows again numbers them as
        // a table that never saw them does.
        later.iter().for_each(|r| table.push_record(r, origin));
        let mut fresh = ProbeTable::default();
        first
            .iter()
            .chain(&later)
            .for_each(|r| fresh.push_record(r, origin));
        assert_eq!(summary(&table), summary(&fresh));
        assert_eq!(table.models.values, fresh.models.values);
        assert_eq!(table.decode_lengths.values, fresh.decode_lengths.values);
    }

    #[test]
    fn appending_a_part_gives_the_table_one_pass_builds() {
        let first = records(3, 1);
        // The second part: rows of a new run, new models and decode lengths (some rows
        // without one), then the first part's rows in reverse order (one of them of a Q-grid
        // condition, now in the load phase): the part numbers its text in another order than
        // the table it is appended to.
        let mut later: Vec<Record> = (records(4, 2).into_iter().enumerate())
            .map(|(i, mut r)| {
                r.run_id = "another run".into();
                r.model = format!("{} v2", r.model);
                r.background.decode_length = (i % 3 != 0).then(|| format!("length {}", i % 5));
                r
            })
            .collect();
        let mut again: Vec<Record> = first.iter().rev().cloned().collect();
        let q_grid = again.iter_mut().find(|r| r.phase != Phase::Load).unwrap();
        q_grid.phase = Phase::Load;
        later.append(&mut again);
        let origin = |row: usize| RowOrigin {
            file: 0,
            row: u32::try_from(row + 1).unwrap(),
        };
        let mut table = ProbeTable::default();
        let mut part = ProbeTable::default();
        first
            .iter()
            .enumerate()
            .for_each(|(i, r)| table.push_record(r, origin(i)));
        let base = first.len();
        later
            .iter()
            .enumerate()
            .for_each(|(i, r)| part.push_record(r, origin(base + i)));
        table.append(&part);
        let mut fresh = ProbeTable::default();
        let all = first.iter().chain(&later).enumerate();
        all.for_each(|(i, r)| fresh.push_record(r, origin(i)));
        assert_eq!(cache::columns(&table), cache::columns(&fresh));
        assert_eq!(table.conditions.entries(), fresh.conditions.entries());
        assert_eq!(table.conditions.runs.values, fresh.conditions.runs.values);
        assert_eq!(table.models.values, fresh.models.values);
        assert_eq!(table.decode_lengths.values, fresh.decode_lengths.values);
    }
}
