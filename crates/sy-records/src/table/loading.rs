//! Loading a table from record files or run directories, through the probe-table cache.

use super::*;

impl ProbeTable {
    /// Loads and validates the records of files or run directories (see the module docs and
    /// [`crate::load_records`], whose rules apply unchanged).
    pub fn load(paths: &[PathBuf], options: &LoadOptions) -> Result<ProbeTable, RecordsError> {
        let files = resolve_inputs(paths)?;
        // The files are hashed on a thread of their own while they are read.
        std::thread::scope(|scope| {
            let hashing = scope.spawn(|| digests(&files));
            let read = ProbeTable::read_files(ProbeTable::default(), &files, options);
            let digests = joined(hashing)?;
            let mut t = read?;
            t.digests = digests;
            Ok(t)
        })
    }

    /// [`ProbeTable::load`] through the probe-table cache at `cache` ([`sy_rundir::Artifact::ProbeCache`],
    /// see the `cache` module): the cached table when it was made from the same record files
    /// (by SHA-256) with the same options and passes its checks; otherwise the records are read,
    /// and [`ProbeTable::save_cache`] (called once the tool has succeeded: a failed run leaves
    /// the run directory as it was) writes the cache for the next tool. Without a cache
    /// (`None`, e.g. `--no-cache`), [`ProbeTable::load`].
    pub fn load_cached(
        paths: &[PathBuf],
        options: &LoadOptions,
        cache: Option<&Path>,
    ) -> Result<ProbeTable, RecordsError> {
        let Some(cache) = cache else {
            return ProbeTable::load(paths, options);
        };
        let files = resolve_inputs(paths)?;
        // The record files are hashed (the cache key, the provenance) on a thread of their own
        // while the cache is read and checked, or the records read; a hashing error comes first.
        let (digests, source) = std::thread::scope(|scope| {
            let hashing = scope.spawn(|| digests(&files));
            let cached = cache::open(cache, &files, options);
            if let Err(why) = &cached
                && cache.exists()
            {
                tracing::info!(cache = %cache.display(), "probe-table cache not used: {why}");
            }
            let source = match cached {
                Ok((made_from, t)) => Source::Cached(made_from, t),
                Err(_) => Source::Read(ProbeTable::read_cached_files(&files, options, cache)),
            };
            Ok::<_, RecordsError>((joined(hashing)?, source))
        })?;
        let key = cache::CacheKey::new(&files, &digests, options);
        let mut t = match source {
            Source::Cached(made_from, mut t) if made_from == key => {
                tracing::info!(cache = %cache.display(), rows = t.len(), "probe table read from its cache");
                t.digests = digests;
                t.rename_files(&files);
                return Ok(t);
            }
            Source::Cached(..) => {
                tracing::info!(cache = %cache.display(), "probe-table cache not used: {}", super::cache_error::CacheError::OtherRecords);
                ProbeTable::read_cached_files(&files, options, cache)?
            }
            Source::Read(read) => read?,
        };
        t.digests = digests;
        t.unsaved_cache = Some((cache.to_path_buf(), key));
        Ok(t)
    }

    /// [`ProbeTable::read_files`] into a table built in the cache's place when it can be.
    pub(super) fn read_cached_files(
        files: &[PathBuf],
        options: &LoadOptions,
        cache: &Path,
    ) -> Result<ProbeTable, RecordsError> {
        ProbeTable::read_files(filed_or_empty(files, cache), files, options)
    }

    /// Names the record files as this run does (a cache may have been made with another
    /// spelling of the same paths): in the file summaries and the skipped rows' issues.
    pub(super) fn rename_files(&mut self, files: &[PathBuf]) {
        let before: Vec<PathBuf> = self.files.iter().map(|f| f.path.clone()).collect();
        for issue in &mut self.skipped {
            if let Some(i) = before.iter().position(|p| *p == issue.path) {
                issue.path = files.get(i).cloned().unwrap_or_else(|| issue.path.clone());
            }
        }
        for (summary, path) in self.files.iter_mut().zip(files) {
            summary.path = path.clone();
        }
    }

    /// Writes the probe-table cache of a table [`ProbeTable::load_cached`] read from the records
    /// (nothing for a table read from its cache or loaded without one). A cache that cannot be
    /// written is only reported: the next tool reads the records instead. Returns whether it
    /// was written.
    pub fn save_cache(&self) -> bool {
        self.stage_cache().is_some_and(StagedCache::commit)
    }

    /// The first half of [`ProbeTable::save_cache`]: the cache written beside its place, to be
    /// committed once the tool has succeeded (a tool may stage it on a second thread while it
    /// computes). `None` when there is nothing to save or it cannot be written (reported).
    pub fn stage_cache(&self) -> Option<StagedCache> {
        let (path, key) = self.unsaved_cache.as_ref()?;
        let started = std::time::Instant::now();
        match cache::stage(self, key, path) {
            Ok(staged) => {
                let seconds = started.elapsed().as_secs_f64();
                tracing::debug!(cache = %path.display(), seconds, "probe-table cache staged");
                Some(StagedCache(staged))
            }
            Err(e) => {
                tracing::warn!(cache = %path.display(), "cannot write the probe-table cache: {e}");
                None
            }
        }
    }

    /// Reads, validates and pairs the records of `files` (already resolved) into `t`, an empty
    /// table.
    pub(super) fn read_files(
        mut t: ProbeTable,
        files: &[PathBuf],
        options: &LoadOptions,
    ) -> Result<ProbeTable, RecordsError> {
        for (index, path) in files.iter().enumerate() {
            let file = u32::try_from(index).unwrap_or(u32::MAX);
            let summary = t.read_file(path, file, options)?;
            t.files.push(summary);
        }
        t.pair_up(options)?;
        count_per_file(&mut t.files, &t.origins, &t.skipped);
        if t.is_empty() {
            return Err(no_valid_records(files));
        }
        Ok(t)
    }

    /// The record files read, each with its SHA-256 (hashed once, when loaded), in argument
    /// order: the records' provenance in every file a tool writes.
    pub fn input_files(&self) -> Vec<sy_selector::InputFile> {
        let digests = self.digests.iter().map(String::as_str);
        let digests = digests.chain(std::iter::repeat(""));
        self.files
            .iter()
            .zip(digests)
            .map(|(f, sha256)| sy_selector::InputFile {
                path: f.path.display().to_string(),
                sha256: sha256.to_string(),
            })
            .collect()
    }

    /// The table of records already in memory (all valid; paired like [`ProbeTable::load`]).
    pub fn from_records(records: &[Record]) -> Result<ProbeTable, RecordsError> {
        let mut t = ProbeTable::default();
        for (i, r) in records.iter().enumerate() {
            let row = u32::try_from(i + 1).unwrap_or(u32::MAX);
            t.push_record(r, RowOrigin { file: 0, row });
        }
        t.files.push(FileSummary {
            path: PathBuf::from("(records)"),
            format: Format::Jsonl,
            rows: records.len(),
            loaded: records.len(),
            skipped: 0,
            torn_tail: false,
            unknown_columns: Vec::new(),
        });
        t.pair_up(&LoadOptions::default())?;
        Ok(t)
    }
}

/// An empty table built in the cache file staged beside `cache` ([`cache::filed_table`]) when
/// every record file is Parquet (whose footer says how many rows to make room for); otherwise,
/// or when that file cannot be made (reported), an empty table in memory.
pub(super) fn filed_or_empty(files: &[PathBuf], cache: &Path) -> ProbeTable {
    let rows = files
        .iter()
        .map(|path| {
            (Format::from_path(path) == Some(Format::Parquet))
                .then(|| ParquetReader::new(File::open(path).ok()?).num_rows().ok())
                .flatten()
        })
        .sum::<Option<usize>>();
    let Some(rows) = rows.filter(|&r| r > 0) else {
        return ProbeTable::default();
    };
    match cache::filed_table(cache, rows) {
        Ok(t) => {
            tracing::debug!(cache = %cache.display(), rows, "probe table built in its cache file");
            t
        }
        Err(e) => {
            tracing::warn!(cache = %cache.display(), "cannot stage the probe-table cache: {e}");
            ProbeTable::default()
        }
    }
}

/// A probe-table cache written but not yet in place ([`ProbeTable::stage_cache`]); dropped
/// uncommitted, it is removed.
#[derive(Debug)]
pub struct StagedCache(sy_rundir::Staged);

impl StagedCache {
    /// Renames the cache into place; a failure is reported, not an error. Returns whether it
    /// is in place.
    pub fn commit(self) -> bool {
        match self.0.commit() {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("cannot write the probe-table cache: {e}");
                false
            }
        }
    }
}

/// Where a table comes from while its record files are hashed: its cache (with the key it was
/// made with, compared once the digests are known) or the records themselves.
pub(super) enum Source {
    Cached(cache::CacheKey, ProbeTable),
    Read(Result<ProbeTable, RecordsError>),
}

/// What a hashing thread gave ([`digests`]); its panic goes on in this thread (a bug, not the
/// input's fault: hashing reports unreadable files as errors).
pub(super) fn joined(
    hashing: std::thread::ScopedJoinHandle<'_, Result<Vec<String>, RecordsError>>,
) -> Result<Vec<String>, RecordsError> {
    hashing
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The SHA-256 of each file, in hex.
pub(super) fn digests(files: &[PathBuf]) -> Result<Vec<String>, RecordsError> {
    files
        .iter()
        .map(|f| {
            sy_rundir::file_sha256(f).map_err(|e| RecordsError::Read {
                path: f.clone(),
                source: crate::error::ReadError::File(e),
            })
        })
        .collect()
}
