//! Reading one record file into the table: Parquet in projected slices (the native fast path or
//! a column at a time), CSV, JSONL.

use super::*;

impl ProbeTable {
    /// Reads one file into the table; returns its summary (counts set later).
    pub(super) fn read_file(
        &mut self,
        path: &Path,
        file: u32,
        options: &LoadOptions,
    ) -> Result<FileSummary, RecordsError> {
        let mut summary = FileSummary::before_reading(path)?;
        match summary.format {
            Format::Parquet => self.read_parquet(path, file, options, &mut summary)?,
            Format::Csv => {
                let df = read_csv_frame(path)?;
                summary.rows = df.height();
                summary.unknown_columns =
                    unknown_columns(df.get_column_names().into_iter().map(|n| n.as_str()));
                self.push_frame(&df, path, 0, file, options)?;
            }
            Format::Jsonl => {
                let mut loaded = LoadedRecords::default();
                read_jsonl_into(path, file, options, &mut loaded, &mut summary)?;
                for (r, o) in loaded.records.iter().zip(&loaded.origins) {
                    self.push_record(r, *o);
                }
                self.skipped.append(&mut loaded.skipped);
            }
        }
        Ok(summary)
    }

    pub(super) fn read_parquet(
        &mut self,
        path: &Path,
        file: u32,
        options: &LoadOptions,
        summary: &mut FileSummary,
    ) -> Result<(), RecordsError> {
        let bad = |e: PolarsError| RecordsError::Read {
            path: path.to_path_buf(),
            source: crate::error::ReadError::Parquet(e),
        };
        let open = || {
            File::open(path).map_err(|e| RecordsError::Read {
                path: path.to_path_buf(),
                source: e.into(),
            })
        };
        let mut reader = ParquetReader::new(open()?);
        let total = reader.num_rows().map_err(bad)?;
        let schema = reader.schema().map_err(bad)?;
        let names: Vec<String> = schema.iter_names().map(|n| n.to_string()).collect();
        summary.rows = total;
        summary.unknown_columns = unknown_columns(names.iter().map(String::as_str));
        let projected: Vec<String> = PROBE_TABLE_COLUMNS
            .iter()
            .filter(|c| names.iter().any(|n| n == *c))
            .map(|c| (*c).to_string())
            .collect();
        check_parquet_types(path, &schema)?;
        self.reserve(total);
        // One thread decodes the next slice while this one converts the last (one slice ahead:
        // at most two slices in memory). A conversion error drops the receiver, which ends it.
        std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            scope.spawn(move || {
                let mut offset = 0;
                loop {
                    let len = PARQUET_SLICE_ROWS.min(total - offset);
                    let slice = open().and_then(|f| {
                        let df = ParquetReader::new(f)
                            .with_columns(Some(projected.clone()))
                            .with_slice(Some((offset, len)))
                            .finish()
                            .map_err(bad)?;
                        Ok((offset, df))
                    });
                    let failed = slice.is_err();
                    if tx.send(slice).is_err() || failed {
                        return;
                    }
                    offset += len;
                    if len == 0 || offset >= total {
                        return;
                    }
                }
            });
            for slice in rx {
                let (mut offset, mut df) = slice?;
                // A slice comes in several chunks (one per row group or page read), each read
                // as a frame of its own: the native path reads one chunk per column, and
                // copying the chunks into one (`rechunk`) was measured to cost more than
                // decoding them.
                for part in df.split_chunks() {
                    self.push_frame(&part, path, offset, file, options)?;
                    offset += part.height();
                }
            }
            Ok(())
        })
    }

    /// Converts and validates the rows of `df` (rows `offset + 1 ..` of the file) into the
    /// table: a frame in the types sy writes straight from its arrays, in parts on every core
    /// ([`ProbeTable::push_native`]); any other frame, or one with a problem, one column at a
    /// time, then row by row into the table's columns.
    pub(super) fn push_frame(
        &mut self,
        df: &DataFrame,
        path: &Path,
        offset: usize,
        file: u32,
        options: &LoadOptions,
    ) -> Result<(), RecordsError> {
        if let Some(native) = NativeFrame::of(df)
            && self.push_native(&native, offset, file)
        {
            return Ok(());
        }
        if !self.is_filed() {
            return with_probe_columns(df, path, |c| {
                self.push_columns(&c, path, offset, file, options)
            })?;
        }
        let mut part = ProbeTable::default();
        part.reserve(df.height());
        with_probe_columns(df, path, |c| {
            part.push_columns(&c, path, offset, file, options)
        })??;
        self.skipped.append(&mut part.skipped);
        self.append(&part);
        Ok(())
    }

    /// Whether this table is being built in its cache file ([`cache::filed_table`]). Rows then
    /// go into a part in memory first and are appended whole: a row at a time costs more in a
    /// mapped region than in a vector.
    pub(super) fn is_filed(&self) -> bool {
        self.probe_end.file_start().is_some()
    }

    /// Appends every row of a native frame (see [`native`]) if all of them are valid; `false`
    /// (the table as it was before) otherwise.
    ///
    /// The frame's rows are converted in contiguous parts, one per core ([`thread_parts`]): the
    /// first into this table on this thread (into a table of its own when this one is built in
    /// its cache file, see [`ProbeTable::is_filed`]), each other one into a table of its own on
    /// a thread of its own, appended in row order afterwards ([`ProbeTable::append`]), so the
    /// table is the one a single pass would build. Rows are appended as they are read and
    /// checked, and taken back at the first one that is not valid: a valid frame, the usual
    /// case, is read once.
    pub(super) fn push_native(
        &mut self,
        frame: &NativeFrame<'_>,
        offset: usize,
        file: u32,
    ) -> bool {
        let mark = self.mark();
        let parts = thread_parts(frame.height());
        let Some((&(start, len), rest)) = parts.split_first() else {
            return true;
        };
        let (first_valid, others) = std::thread::scope(|scope| {
            let others: Vec<_> = rest
                .iter()
                .map(|&(start, len)| {
                    scope.spawn(move || {
                        let mut part = ProbeTable::default();
                        part.reserve(len);
                        part.push_native_rows(frame, start..start + len, offset, file)
                            .then_some(part)
                    })
                })
                .collect();
            let (valid, first) = if self.is_filed() {
                let mut part = ProbeTable::default();
                part.reserve(len);
                let valid = part.push_native_rows(frame, start..start + len, offset, file);
                (valid, Some(part))
            } else {
                let valid = self.push_native_rows(frame, start..start + len, offset, file);
                (valid, None)
            };
            let others: Option<Vec<ProbeTable>> = others
                .into_iter()
                .map(|h| h.join().ok().flatten())
                .collect();
            (
                valid,
                others.map(|o| first.into_iter().chain(o).collect::<Vec<_>>()),
            )
        });
        match (first_valid, others) {
            (true, Some(others)) => {
                for part in &others {
                    self.append(part);
                }
                true
            }
            _ => {
                self.restore(mark);
                false
            }
        }
    }

    /// Appends rows `rows` of a native frame while each is valid; `false` at the first that
    /// is not (the rows before it stay: the caller takes them back).
    pub(super) fn push_native_rows(
        &mut self,
        frame: &NativeFrame<'_>,
        rows: std::ops::Range<usize>,
        offset: usize,
        file: u32,
    ) -> bool {
        for i in rows {
            let valid = frame
                .row(i)
                .filter(|v| validate_fields(&v.checked()).is_ok());
            let Some(values) = valid else {
                return false;
            };
            let row = u32::try_from(offset + i + 1).unwrap_or(u32::MAX);
            self.push_row(values, RowOrigin { file, row });
        }
        true
    }
}
