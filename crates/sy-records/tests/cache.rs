#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The probe-table cache: a table read from it equals the table read from the records; a cache
//! made from other records or options, or damaged anywhere, is not used and is rewritten.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sy_records::synth::{SynthSpec, generate};
use sy_records::{LoadOptions, Model, Phase, ProbeTable, Record, Status, write_records};

fn records() -> Vec<Record> {
    let mut records = generate(&SynthSpec {
        conditions: 5,
        repeats: 2,
        q_n_axis: vec![512, 2048],
        q_f_axis: vec![0.0, 0.5],
        q_repeats: 1,
        ..SynthSpec::default()
    });
    records[1].observed.r = None;
    records[2].client_server_gap_ms = Some(0.25);
    records[3].observed.schedulable = Some(false);
    records[4].observed.schedulable = None;
    records[5].background.decode_length = Some("long".to_string());
    records[6].probe_id = "probe-ü-€".to_string();
    records[7].probe_id = "probe-ü-€".to_string();
    let last = records.len() - 1;
    records[last].status = Status::Error;
    records[last].ttft_ms = None;
    records
}

/// The second node's records: another run id and one invalid row (an ok probe without a TTFT).
fn second_node() -> Vec<Record> {
    let mut other = records();
    for r in &mut other {
        r.run_id = "node-b".to_string();
    }
    other[0].status = Status::Ok;
    other[0].ttft_ms = None;
    other
}

/// Two record files (merged), the second with one invalid row (skipped with `skip_invalid`).
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let a = dir.join("a.parquet");
    write_records(&records(), &a).unwrap();
    let b = dir.join("b.jsonl");
    write_records(&second_node(), &b).unwrap();
    vec![a, b]
}

/// Two Parquet files (merged), so the table is built in its cache file: the second with one
/// invalid row and one load-phase row without its partner (both skipped with `skip_invalid`,
/// the partner by the pairing: the table ends with fewer rows than the files hold).
fn parquet_inputs(dir: &Path) -> Vec<PathBuf> {
    let a = dir.join("a.parquet");
    write_records(&records(), &a).unwrap();
    let mut other = second_node();
    let lone = other
        .iter()
        .rposition(|r| r.phase == Phase::Load && r.role == Model::Capable)
        .unwrap();
    other.remove(lone);
    let b = dir.join("b.parquet");
    write_records(&other, &b).unwrap();
    vec![a, b]
}

/// The hidden files in `dir` (staged, not yet in place).
fn staged_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}

/// Everything a tool can read from the two tables is equal.
fn assert_same(a: &ProbeTable, b: &ProbeTable) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.rows().zip(b.rows()) {
        assert_eq!(x.run_id(), y.run_id());
        assert_eq!(x.condition_id(), y.condition_id());
        assert_eq!(x.condition(), y.condition());
        assert_eq!(x.probe_id(), y.probe_id());
        assert_eq!(x.phase(), y.phase());
        assert_eq!(x.role(), y.role());
        assert_eq!(x.status(), y.status());
        assert_eq!(x.repeat(), y.repeat());
        assert_eq!(x.model(), y.model());
        assert_eq!(x.planned_n(), y.planned_n());
        assert_eq!(x.planned_f().to_bits(), y.planned_f().to_bits());
        assert_eq!(x.decode_length(), y.decode_length());
        assert_eq!(x.n(), y.n());
        assert_eq!(x.k(), y.k());
        assert_eq!(x.ttft_ms(), y.ttft_ms());
        assert_eq!(x.sent_at_unix_ms().to_bits(), y.sent_at_unix_ms().to_bits());
        assert_eq!(x.client_server_gap_ms(), y.client_server_gap_ms());
        assert_eq!(x.rule_observation(), y.rule_observation());
        assert_eq!(a.origin_of(x.index()), b.origin_of(y.index()));
    }
    let pairs = |t: &ProbeTable| -> Vec<(usize, usize)> {
        t.pairs()
            .map(|p| (p.efficient.index(), p.capable.index()))
            .collect()
    };
    assert_eq!(pairs(a), pairs(b));
    assert_eq!(a.files(), b.files());
    assert_eq!(a.skipped(), b.skipped());
    assert_eq!(a.input_files(), b.input_files());
    assert_eq!(a.pick_summary(), b.pick_summary());
    assert_eq!(a.condition_count(), b.condition_count());
    for c in 0..a.condition_count() as u32 {
        assert_eq!(a.condition_key(c), b.condition_key(c));
    }
    assert!(a.load_conditions().eq(b.load_conditions()));
}

fn inode(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().ino()
}

const SKIP: LoadOptions = LoadOptions { skip_invalid: true };

#[test]
fn a_cached_table_reads_as_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let paths = inputs(dir.path());
    let cache = dir.path().join("probe-table.cache");
    let fresh = ProbeTable::load(&paths, &SKIP).unwrap();
    assert_eq!(fresh.skipped().len(), 1, "the invalid row is skipped");

    let written = ProbeTable::load_cached(&paths, &SKIP, Some(&cache)).unwrap();
    assert_same(&written, &fresh);
    assert!(!cache.exists(), "nothing is written before save_cache");
    assert!(written.save_cache());
    let made = inode(&cache);
    let cached = ProbeTable::load_cached(&paths, &SKIP, Some(&cache)).unwrap();
    assert_same(&cached, &fresh);
    assert!(
        !cached.save_cache(),
        "a table read from its cache has nothing to save"
    );
    assert_eq!(inode(&cache), made, "a valid cache is read, not rewritten");
    // A clone of a mapped table is the same table.
    assert_same(&cached.clone(), &fresh);
}

/// The same files named another way (relative to the working directory instead of absolute)
/// read the cache, and the table names them as this run does.
#[test]
fn a_cache_is_used_whatever_the_spelling_of_the_record_paths() {
    let dir = tempfile::tempdir().unwrap();
    let paths = inputs(dir.path());
    let cache = dir.path().join("probe-table.cache");
    let written = ProbeTable::load_cached(&paths, &SKIP, Some(&cache)).unwrap();
    assert!(written.save_cache());
    let made = inode(&cache);
    let cwd = std::env::current_dir().unwrap();
    let relative: Vec<PathBuf> = paths
        .iter()
        .map(|p| {
            let up = cwd.components().skip(1).map(|_| "..").collect::<PathBuf>();
            up.join(p.strip_prefix("/").unwrap())
        })
        .collect();
    assert_ne!(relative, paths);
    let cached = ProbeTable::load_cached(&relative, &SKIP, Some(&cache)).unwrap();
    assert!(
        !cached.save_cache(),
        "read from the cache, not from the records"
    );
    assert_eq!(inode(&cache), made);
    assert_same(&cached, &ProbeTable::load(&relative, &SKIP).unwrap());
    let named: Vec<String> = cached.input_files().into_iter().map(|f| f.path).collect();
    let expected: Vec<String> = relative.iter().map(|p| p.display().to_string()).collect();
    assert_eq!(named, expected);
}

#[test]
fn a_cache_of_other_records_or_options_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let paths = inputs(dir.path());
    let cache = dir.path().join("probe-table.cache");
    assert!(
        ProbeTable::load_cached(&paths, &SKIP, Some(&cache))
            .unwrap()
            .save_cache()
    );

    // Strict options: the invalid row is an error, whatever the cache holds.
    let strict = ProbeTable::load_cached(&paths, &LoadOptions::default(), Some(&cache));
    let message = strict.unwrap_err().to_string();
    assert!(
        message.contains("b.jsonl") && message.contains("ttft_ms"),
        "{message}"
    );

    // Other records under the same name.
    let mut changed = records();
    changed[0].ttft_ms = Some(12345.0);
    write_records(&changed, &paths[0]).unwrap();
    let fresh = ProbeTable::load(&paths, &SKIP).unwrap();
    assert_eq!(fresh.row(0).ttft_ms(), Some(12345.0));
    assert_same(
        &ProbeTable::load_cached(&paths, &SKIP, Some(&cache)).unwrap(),
        &fresh,
    );
    // Fewer files.
    let one = ProbeTable::load(&paths[..1], &SKIP).unwrap();
    assert_same(
        &ProbeTable::load_cached(&paths[..1], &SKIP, Some(&cache)).unwrap(),
        &one,
    );
}

#[test]
fn a_damaged_cache_is_refused_and_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    damaged_caches_are_refused_and_rewritten(&inputs(dir.path()));
}

#[test]
fn a_damaged_cache_built_in_its_file_is_refused_and_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    damaged_caches_are_refused_and_rewritten(&parquet_inputs(dir.path()));
}

fn damaged_caches_are_refused_and_rewritten(paths: &[PathBuf]) {
    let dir = paths[0].parent().unwrap();
    let cache = dir.join("probe-table.cache");
    let fresh = ProbeTable::load(paths, &SKIP).unwrap();
    assert!(
        ProbeTable::load_cached(paths, &SKIP, Some(&cache))
            .unwrap()
            .save_cache()
    );
    let good = std::fs::read(&cache).unwrap();
    let n = good.len();
    // Every 97th byte (columns, padding, header, footer), each alone.
    let mut damaged: Vec<Vec<u8>> = (0..n)
        .step_by(97)
        .chain([n - 1, n - 9, n - 17])
        .map(|at| {
            let mut bytes = good.clone();
            bytes[at] ^= 0x5a;
            bytes
        })
        .collect();
    damaged.push(good[..n / 2].to_vec());
    damaged.push(Vec::new());
    damaged.push(b"SYPROBE\0 not a cache".to_vec());
    for (i, bytes) in damaged.iter().enumerate() {
        std::fs::write(&cache, bytes).unwrap();
        let table = ProbeTable::load_cached(paths, &SKIP, Some(&cache)).unwrap();
        assert_same(&table, &fresh);
        table.save_cache();
        assert_eq!(
            std::fs::read(&cache).unwrap().len(),
            n,
            "damage {i}: the cache is rewritten"
        );
    }
}

#[test]
fn a_cache_that_cannot_be_written_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let paths = inputs(dir.path());
    // A directory where the cache file would go.
    let cache = dir.path().join("probe-table.cache");
    std::fs::create_dir(&cache).unwrap();
    let fresh = ProbeTable::load(&paths, &SKIP).unwrap();
    assert_same(
        &ProbeTable::load_cached(&paths, &SKIP, Some(&cache)).unwrap(),
        &fresh,
    );
    assert!(cache.is_dir());
}

#[test]
fn a_table_built_in_its_cache_file_reads_as_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let paths = parquet_inputs(dir.path());
    let cache = dir.path().join("probe-table.cache");
    let fresh = ProbeTable::load(&paths, &SKIP).unwrap();
    assert_eq!(
        fresh.skipped().len(),
        2,
        "the invalid row and the lone partner"
    );

    // A load that fails (the invalid row, strict) leaves nothing behind.
    let strict = ProbeTable::load_cached(&paths, &LoadOptions::default(), Some(&cache));
    assert!(strict.unwrap_err().to_string().contains("ttft_ms"));
    assert!(staged_files(dir.path()).is_empty(), "failed: removed");
    // Dropped unsaved (a failed run): nothing is left behind.
    let unsaved = ProbeTable::load_cached(&paths, &SKIP, Some(&cache)).unwrap();
    assert!(
        format!("{unsaved:?}").contains("in the staged file"),
        "Parquet only: built in the staged cache file ({unsaved:?})"
    );
    assert_same(&unsaved, &fresh);
    assert_eq!(staged_files(dir.path()).len(), 1, "staged beside the cache");
    assert!(!cache.exists(), "nothing is in place before save_cache");
    drop(unsaved);
    assert!(staged_files(dir.path()).is_empty(), "dropped: removed");
    assert!(!cache.exists());

    let written = ProbeTable::load_cached(&paths, &SKIP, Some(&cache)).unwrap();
    assert_same(&written, &fresh);
    assert_same(&written.clone(), &fresh);
    assert!(written.save_cache());
    assert!(staged_files(dir.path()).is_empty(), "renamed into place");
    // The table still reads its columns from the (now renamed) file.
    assert_same(&written, &fresh);
    let cached = ProbeTable::load_cached(&paths, &SKIP, Some(&cache)).unwrap();
    assert_same(&cached, &fresh);
    assert!(!cached.save_cache(), "read from its cache: nothing to save");
}
