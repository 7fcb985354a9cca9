//! The values of one row, borrowed from a record or from converted columns, checked by the
//! loader's rules before they are appended.

use super::*;

/// The values of one row, borrowed from a record or from converted columns.
pub(super) struct RowValues<'a> {
    pub(super) schema_version: u32,
    pub(super) run_id: &'a str,
    pub(super) condition_id: &'a str,
    pub(super) phase: Phase,
    pub(super) repeat: u32,
    pub(super) probe_id: &'a str,
    pub(super) role: Model,
    pub(super) model: &'a str,
    pub(super) planned_n: u64,
    pub(super) planned_f: f64,
    pub(super) decode_length: Option<&'a str>,
    pub(super) status: Status,
    pub(super) n: Option<u64>,
    pub(super) k: Option<u64>,
    pub(super) r: Option<u64>,
    pub(super) prefill_tokens_booked: Option<u64>,
    pub(super) prefill_capacity_tokens: Option<u64>,
    pub(super) schedulable: Option<bool>,
    pub(super) observed_at_unix_ms: Option<f64>,
    pub(super) sent_at_unix_ms: f64,
    pub(super) reserved: bool,
    pub(super) reserved_worker_id: Option<u64>,
    pub(super) reserved_dp_rank: Option<u32>,
    pub(super) pick_differs: Option<bool>,
    pub(super) served_worker_id: Option<u64>,
    pub(super) served_dp_rank: Option<u32>,
    pub(super) ttft_ms: Option<f64>,
    pub(super) client_server_gap_ms: Option<f64>,
    pub(super) attempts: u32,
}

impl<'a> RowValues<'a> {
    pub(super) fn of_record(r: &'a Record) -> Self {
        RowValues {
            schema_version: r.schema_version,
            run_id: &r.run_id,
            condition_id: &r.condition_id,
            phase: r.phase,
            repeat: r.repeat,
            probe_id: &r.probe_id,
            role: r.role,
            model: &r.model,
            planned_n: r.planned_n,
            planned_f: r.planned_f,
            decode_length: r.background.decode_length.as_deref(),
            status: r.status,
            n: r.observed.n,
            k: r.observed.k,
            r: r.observed.r,
            prefill_tokens_booked: r.observed.prefill_tokens_booked,
            prefill_capacity_tokens: r.observed.prefill_capacity_tokens,
            schedulable: r.observed.schedulable,
            observed_at_unix_ms: r.observed.observed_at_unix_ms,
            sent_at_unix_ms: r.sent_at_unix_ms,
            reserved: r.reserved_worker_id.is_some(),
            reserved_worker_id: r.reserved_worker_id,
            reserved_dp_rank: r.reserved_dp_rank,
            pick_differs: r.pick_differs,
            served_worker_id: r.served_worker_id,
            served_dp_rank: r.served_dp_rank,
            ttft_ms: r.ttft_ms,
            client_server_gap_ms: r.client_server_gap_ms,
            attempts: r.attempts,
        }
    }

    /// Row `i` of columns without a cell problem (required values are present).
    pub(super) fn of_columns(
        c: &'a ProbeColumns<'_>,
        i: usize,
    ) -> Result<Self, (&'static str, String)> {
        let missing = |field: &'static str| (field, "missing value".to_string());
        Ok(RowValues {
            schema_version: c.schema_version[i],
            run_id: c.run_id[i].as_deref().ok_or_else(|| missing("run_id"))?,
            condition_id: c.condition_id[i]
                .as_deref()
                .ok_or_else(|| missing("condition_id"))?,
            phase: c.phase[i].ok_or_else(|| missing("phase"))?,
            repeat: c.repeat[i],
            probe_id: c.probe_id[i]
                .as_deref()
                .ok_or_else(|| missing("probe_id"))?,
            role: c.role[i].ok_or_else(|| missing("role"))?,
            model: c.model[i].as_deref().ok_or_else(|| missing("model"))?,
            planned_n: c.planned_n[i],
            planned_f: c.planned_f[i],
            decode_length: c.decode_length[i].as_deref(),
            status: c.status[i].ok_or_else(|| missing("status"))?,
            n: c.n[i],
            k: c.k[i],
            r: c.r[i],
            prefill_tokens_booked: c.prefill_tokens_booked[i],
            prefill_capacity_tokens: c.prefill_capacity_tokens[i],
            schedulable: c.schedulable[i],
            observed_at_unix_ms: c.observed_at_unix_ms[i],
            sent_at_unix_ms: c.sent_at_unix_ms[i],
            reserved: c.reserved_worker_id[i].is_some(),
            reserved_worker_id: c.reserved_worker_id[i],
            reserved_dp_rank: c.reserved_dp_rank[i],
            pick_differs: c.pick_differs[i],
            served_worker_id: c.served_worker_id[i],
            served_dp_rank: c.served_dp_rank[i],
            ttft_ms: c.ttft_ms[i],
            client_server_gap_ms: c.client_server_gap_ms[i],
            attempts: c.attempts[i],
        })
    }

    /// The row's bits of [`ProbeTable`]'s `present` column.
    pub(super) fn present_bits(&self) -> u16 {
        let bit = |has: bool, bit: u16| if has { bit } else { 0 };
        bit(self.n.is_some(), present::N)
            | bit(self.k.is_some(), present::K)
            | bit(self.r.is_some(), present::R)
            | bit(
                self.prefill_tokens_booked.is_some(),
                present::PREFILL_TOKENS_BOOKED,
            )
            | bit(
                self.prefill_capacity_tokens.is_some(),
                present::PREFILL_CAPACITY_TOKENS,
            )
            | bit(self.observed_at_unix_ms.is_some(), present::OBSERVED_AT)
            | bit(self.ttft_ms.is_some(), present::TTFT)
            | bit(
                self.client_server_gap_ms.is_some(),
                present::CLIENT_SERVER_GAP,
            )
            | bit(self.schedulable.is_some(), present::SCHEDULABLE)
            | bit(self.schedulable == Some(true), present::SCHEDULABLE_TRUE)
    }

    pub(super) fn checked(&self) -> CheckedFields<'a> {
        CheckedFields {
            status: self.status,
            ttft_ms: self.ttft_ms,
            n: self.n,
            k: self.k,
            schema_version: self.schema_version,
            served_worker_id: self.served_worker_id,
            reserved_worker_id: self.reserved_worker_id,
            served_dp_rank: self.served_dp_rank,
            reserved_dp_rank: self.reserved_dp_rank,
            run_id: self.run_id,
            condition_id: self.condition_id,
            probe_id: self.probe_id,
        }
    }
}
