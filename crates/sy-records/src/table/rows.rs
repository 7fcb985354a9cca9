//! A row of the table and a probe pair, borrowed: the accessors the calibration tools read.

use super::*;

/// One row of a [`ProbeTable`] (one candidate of one probe).
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    pub(super) table: &'a ProbeTable,
    pub(super) i: usize,
}

/// The two candidates of one load-phase probe.
#[derive(Debug, Clone, Copy)]
pub struct ProbePair<'a> {
    pub efficient: Row<'a>,
    pub capable: Row<'a>,
}

impl<'a> Row<'a> {
    /// The row's index in the table.
    pub fn index(&self) -> usize {
        self.i
    }
    pub fn run_id(&self) -> &'a str {
        self.table.run_id_of(self.i)
    }
    pub fn condition_id(&self) -> &'a str {
        self.table.condition_id_of(self.i)
    }
    /// The condition's index in the table (the same for every row of a `(run, condition)`).
    pub fn condition(&self) -> u32 {
        self.table.condition[self.i]
    }
    pub fn probe_id(&self) -> &'a str {
        self.table.probe_id_of(self.i)
    }
    pub fn phase(&self) -> Phase {
        codes::to_phase(self.table.phase[self.i])
    }
    pub fn role(&self) -> Model {
        codes::to_role(self.table.role[self.i])
    }
    pub fn status(&self) -> Status {
        codes::to_status(self.table.status[self.i])
    }
    pub fn repeat(&self) -> u32 {
        self.table.repeat[self.i]
    }
    pub fn model(&self) -> &'a str {
        self.table.models.get(self.table.model[self.i])
    }
    pub fn planned_n(&self) -> u64 {
        self.table.planned_n[self.i]
    }
    pub fn planned_f(&self) -> f64 {
        self.table.planned_f[self.i]
    }
    pub fn n(&self) -> Option<u64> {
        self.table.value(&self.table.n, present::N, self.i)
    }
    pub fn k(&self) -> Option<u64> {
        self.table.value(&self.table.k, present::K, self.i)
    }
    pub fn ttft_ms(&self) -> Option<f64> {
        self.table.value(&self.table.ttft_ms, present::TTFT, self.i)
    }
    /// When the probe was sent, milliseconds since the Unix epoch.
    pub fn sent_at_unix_ms(&self) -> f64 {
        self.table.sent_at_unix_ms[self.i]
    }
    /// Attempts made for the record's unit (1 = no retry; the retried attempts' own records are
    /// in the run directory's `attempts.jsonl`).
    pub fn attempts(&self) -> u32 {
        self.table.attempts[self.i]
    }
    pub fn client_server_gap_ms(&self) -> Option<f64> {
        let t = self.table;
        t.value(&t.client_server_gap_ms, present::CLIENT_SERVER_GAP, self.i)
    }
    /// The background's `decode_length` (`"short"` / `"long"`), if any.
    pub fn decode_length(&self) -> Option<&'a str> {
        match self.table.decode_length[self.i] {
            NO_TEXT => None,
            d => Some(self.table.decode_lengths.get(d)),
        }
    }
    /// The rule's inputs (see [`Record::rule_observation`], the same conversion).
    #[inline]
    pub fn rule_observation(&self) -> Observation {
        let t = self.table;
        let i = self.i;
        let bits = t.present[i];
        let at = |column: &[u64], bit: u16| (bits & bit != 0).then(|| column[i]);
        let schedulable =
            (bits & present::SCHEDULABLE != 0).then_some(bits & present::SCHEDULABLE_TRUE != 0);
        sy_wire::observed::rule_observation(
            [
                at(&t.n, present::N),
                at(&t.k, present::K),
                at(&t.r, present::R),
                at(&t.prefill_tokens_booked, present::PREFILL_TOKENS_BOOKED),
                at(&t.prefill_capacity_tokens, present::PREFILL_CAPACITY_TOKENS),
            ],
            schedulable,
            (bits & present::OBSERVED_AT != 0).then(|| t.observed_at_unix_ms[i]),
        )
    }
}

impl<'a> ProbePair<'a> {
    /// The decision the probe stands for, as a replay makes it: the router proposed the
    /// efficient model, with the two candidates' recorded observations, at the efficient
    /// request's send time, and no capable request of this process in flight.
    pub fn decision_input(&self) -> sy_selector::DecisionInput {
        sy_selector::DecisionInput {
            proposal: sy_selector::Model::Efficient,
            efficient: self.efficient.rule_observation(),
            capable: self.capable.rule_observation(),
            now_ms: self.efficient.sent_at_unix_ms(),
            local_capable_in_flight: 0,
        }
    }

    /// Both candidates answered (status ok, so both have a TTFT).
    pub fn both_ok(&self) -> bool {
        self.efficient.status() == Status::Ok && self.capable.status() == Status::Ok
    }
    pub fn run_id(&self) -> &'a str {
        self.efficient.run_id()
    }
    pub fn condition_id(&self) -> &'a str {
        self.efficient.condition_id()
    }
    /// The condition's index in the table.
    pub fn condition(&self) -> u32 {
        self.efficient.condition()
    }
    pub fn probe_id(&self) -> &'a str {
        self.efficient.probe_id()
    }
    pub fn repeat(&self) -> u32 {
        self.efficient.repeat()
    }
    /// The row of one role.
    pub fn get(&self, role: Model) -> Row<'a> {
        match role {
            Model::Efficient => self.efficient,
            Model::Capable => self.capable,
        }
    }
}

impl PairKeys for ProbeTable {
    fn rows(&self) -> usize {
        self.phase.len()
    }
    fn phase(&self, i: usize) -> Phase {
        codes::to_phase(self.phase[i])
    }
    fn role(&self, i: usize) -> Model {
        codes::to_role(self.role[i])
    }
    fn run_id(&self, i: usize) -> &str {
        self.run_id_of(i)
    }
    fn probe_id(&self, i: usize) -> &str {
        self.probe_id_of(i)
    }
    fn condition_id(&self, i: usize) -> &str {
        self.condition_id_of(i)
    }
    fn repeat(&self, i: usize) -> u32 {
        self.repeat[i]
    }
}
