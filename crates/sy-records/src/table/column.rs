//! One probe-table column: a vector while the table is built, or a slice of a mapped cache file
//! (see [`super::cache`]) when the table was opened from one.
//!
//! Every column holds plain little-endian values ([`bytemuck::Pod`]), so a cache file's bytes are
//! the columns themselves: opening one maps the file and checks it, and no value is copied.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

use bytemuck::Pod;

/// A column's values (see the module docs).
pub(super) struct Column<T> {
    owned: Vec<T>,
    /// When set, the values instead: `len` values from byte `start` of a mapped file
    /// (alignment and bounds checked by [`Column::mapped`]).
    mapped: Option<Mapped>,
    values: PhantomData<T>,
}

#[derive(Clone)]
struct Mapped {
    file: Arc<memmap2::Mmap>,
    start: usize,
    len: usize,
}

impl<T: Pod> Column<T> {
    /// `len` values from byte `start` of `file`; `None` when they are out of bounds or not
    /// aligned for `T`.
    pub(super) fn mapped(file: &Arc<memmap2::Mmap>, start: usize, len: usize) -> Option<Self> {
        let end = start.checked_add(len.checked_mul(size_of::<T>())?)?;
        let bytes = file.get(start..end)?;
        bytemuck::try_cast_slice::<u8, T>(bytes).ok()?;
        Some(Column {
            owned: Vec::new(),
            mapped: Some(Mapped {
                file: Arc::clone(file),
                start,
                len,
            }),
            values: PhantomData,
        })
    }

    /// The values as a vector to append to (a mapped column is copied first).
    pub(super) fn vec(&mut self) -> &mut Vec<T> {
        if self.mapped.is_some() {
            self.owned = self.to_vec();
            self.mapped = None;
        }
        &mut self.owned
    }

    pub(super) fn push(&mut self, value: T) {
        self.vec().push(value);
    }

    /// Keeps the values whose `drop` flag is false.
    pub(super) fn retain_unless(&mut self, drop: &[bool]) {
        let mut flags = drop.iter();
        self.vec()
            .retain(|_| !flags.next().copied().unwrap_or(false));
    }

    /// The values as bytes (what a cache file holds).
    pub(super) fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self)
    }
}

impl<T: Pod> Deref for Column<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match &self.mapped {
            None => &self.owned,
            Some(m) => {
                let bytes = m
                    .file
                    .get(m.start..m.start + m.len * size_of::<T>())
                    .unwrap_or_default();
                // Bounds and alignment were checked by `Column::mapped`.
                bytemuck::try_cast_slice(bytes).unwrap_or_default()
            }
        }
    }
}

impl<T> From<Vec<T>> for Column<T> {
    fn from(owned: Vec<T>) -> Self {
        Column {
            owned,
            mapped: None,
            values: PhantomData,
        }
    }
}

impl<T> Default for Column<T> {
    fn default() -> Self {
        Column::from(Vec::new())
    }
}

impl<T: Clone> Clone for Column<T> {
    fn clone(&self) -> Self {
        Column {
            owned: self.owned.clone(),
            mapped: self.mapped.clone(),
            values: PhantomData,
        }
    }
}

impl<T> fmt::Debug for Column<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.mapped {
            None => write!(f, "Column({} values)", self.owned.len()),
            Some(m) => write!(f, "Column({} values, mapped)", m.len),
        }
    }
}
