//! One probe-table column: a vector while the table is built, a writable region of the cache
//! file the table is being built in (see [`super::cache::Filing`]), or a slice of a mapped cache
//! file (see [`super::cache`]) when the table was opened from one.
//!
//! Every column holds plain little-endian values ([`bytemuck::Pod`]), so a cache file's bytes are
//! the columns themselves: opening one maps the file and checks it, and no value is copied; a
//! table built in its cache file writes each value once, into the page cache, and the kernel may
//! write those pages back and drop them when memory is short.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

use bytemuck::Pod;

/// A column's values (see the module docs).
pub(super) struct Column<T> {
    owned: Vec<T>,
    /// When set, the values instead.
    elsewhere: Option<Elsewhere>,
    values: PhantomData<T>,
}

enum Elsewhere {
    /// `len` values from byte `start` of a read-only mapped file (alignment and bounds checked
    /// by [`Column::mapped`]).
    Mapped {
        file: Arc<memmap2::Mmap>,
        start: usize,
        len: usize,
    },
    /// The first `len` values of a writable mapping of a staged file's bytes from byte `start`,
    /// room for `map.len() / size_of::<T>()` values (alignment checked by [`Column::filed`]).
    Filed {
        map: memmap2::MmapMut,
        start: usize,
        len: usize,
    },
}

impl<T: Pod> Column<T> {
    /// `len` values from byte `start` of `file`; `None` when they are out of bounds or not
    /// aligned for `T`.
    pub(super) fn mapped(file: &Arc<memmap2::Mmap>, start: usize, len: usize) -> Option<Self> {
        let end = start.checked_add(len.checked_mul(size_of::<T>())?)?;
        let bytes = file.get(start..end)?;
        bytemuck::try_cast_slice::<u8, T>(bytes).ok()?;
        let file = Arc::clone(file);
        Some(Column::elsewhere(Elsewhere::Mapped { file, start, len }))
    }

    /// An empty column whose values go into `map`, a writable mapping of a staged file's bytes
    /// from byte `start` (`None` when `map` is not aligned for `T`). A column that needs more
    /// room than its region moves its values into a vector and goes on there.
    pub(super) fn filed(map: memmap2::MmapMut, start: usize) -> Option<Self> {
        let whole = map.len() - map.len() % size_of::<T>();
        bytemuck::try_cast_slice::<u8, T>(map.get(..whole)?).ok()?;
        Some(Column::elsewhere(Elsewhere::Filed { map, start, len: 0 }))
    }

    fn elsewhere(place: Elsewhere) -> Self {
        Column {
            owned: Vec::new(),
            elsewhere: Some(place),
            values: PhantomData,
        }
    }

    /// Where in the staged file the values lie, for a column still in its region.
    pub(super) fn file_start(&self) -> Option<usize> {
        match &self.elsewhere {
            Some(Elsewhere::Filed { start, .. }) => Some(*start),
            _ => None,
        }
    }

    /// The values as a vector (a mapped or filed column is copied into one first).
    fn owned(&mut self) -> &mut Vec<T> {
        if self.elsewhere.is_some() {
            self.owned = self.to_vec();
            self.elsewhere = None;
        }
        &mut self.owned
    }

    /// The filed values and the region's room, as values of `T`.
    fn region(&mut self) -> Option<(&mut [T], &mut usize)> {
        match &mut self.elsewhere {
            Some(Elsewhere::Filed { map, len, .. }) => {
                let whole = map.len() - map.len() % size_of::<T>();
                let values = bytemuck::try_cast_slice_mut(map.get_mut(..whole)?).ok()?;
                Some((values, len))
            }
            _ => None,
        }
    }

    /// Room for `additional` more values: a filed column without that much left in its region
    /// moves into a vector.
    pub(super) fn reserve(&mut self, additional: usize) {
        if let Some((region, len)) = self.region()
            && *len + additional <= region.len()
        {
            return;
        }
        self.owned().reserve(additional);
    }

    pub(super) fn push(&mut self, value: T) {
        if self.elsewhere.is_none() {
            self.owned.push(value);
        } else {
            self.extend_from_slice(&[value]);
        }
    }

    pub(super) fn extend_from_slice(&mut self, values: &[T]) {
        self.reserve(values.len());
        if let Some((region, len)) = self.region()
            && let Some(to) = region.get_mut(*len..*len + values.len())
        {
            to.copy_from_slice(values);
            *len += values.len();
            return;
        }
        self.owned().extend_from_slice(values);
    }

    /// The values from `start` on, to change in place.
    pub(super) fn tail_mut(&mut self, start: usize) -> &mut [T] {
        let values: &mut [T] = match self.file_start() {
            Some(_) => match self.region() {
                Some((region, len)) => {
                    let len = *len;
                    &mut region[..len]
                }
                None => &mut [],
            },
            None => self.owned(),
        };
        let start = start.min(values.len());
        &mut values[start..]
    }

    pub(super) fn truncate(&mut self, keep: usize) {
        match self.region() {
            Some((_, len)) => *len = keep.min(*len),
            None => self.owned().truncate(keep),
        }
    }

    /// Keeps the values whose `drop` flag is false.
    pub(super) fn retain_unless(&mut self, drop: &[bool]) {
        let values = self.tail_mut(0);
        let mut kept = 0;
        for i in 0..values.len() {
            if !drop.get(i).copied().unwrap_or(false) {
                values[kept] = values[i];
                kept += 1;
            }
        }
        self.truncate(kept);
    }

    /// The values as bytes (what a cache file holds).
    pub(super) fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self)
    }
}

impl<T: Pod> Deref for Column<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        let (bytes, len): (&[u8], usize) = match &self.elsewhere {
            None => return &self.owned,
            Some(Elsewhere::Mapped { file, start, len }) => (
                file.get(*start..*start + *len * size_of::<T>())
                    .unwrap_or_default(),
                *len,
            ),
            Some(Elsewhere::Filed { map, len, .. }) => {
                (map.get(..*len * size_of::<T>()).unwrap_or_default(), *len)
            }
        };
        // Bounds and alignment were checked by `Column::mapped` / `Column::filed`.
        let values: &[T] = bytemuck::try_cast_slice(bytes).unwrap_or_default();
        &values[..len.min(values.len())]
    }
}

impl<T> From<Vec<T>> for Column<T> {
    fn from(owned: Vec<T>) -> Self {
        Column {
            owned,
            elsewhere: None,
            values: PhantomData,
        }
    }
}

impl<T> Default for Column<T> {
    fn default() -> Self {
        Column::from(Vec::new())
    }
}

impl<T: Pod> Clone for Column<T> {
    /// A filed column's clone is a vector: the region belongs to one table.
    fn clone(&self) -> Self {
        match &self.elsewhere {
            None => Column::from(self.owned.clone()),
            Some(Elsewhere::Mapped { file, start, len }) => Column::elsewhere(Elsewhere::Mapped {
                file: Arc::clone(file),
                start: *start,
                len: *len,
            }),
            Some(Elsewhere::Filed { .. }) => Column::from(self.to_vec()),
        }
    }
}

impl<T> fmt::Debug for Column<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.elsewhere {
            None => write!(f, "Column({} values)", self.owned.len()),
            Some(Elsewhere::Mapped { len, .. }) => write!(f, "Column({len} values, mapped)"),
            Some(Elsewhere::Filed { len, start, .. }) => {
                write!(
                    f,
                    "Column({len} values, in the staged file at byte {start})"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filed(values: usize) -> (tempfile::NamedTempFile, Column<u32>) {
        let file = tempfile::NamedTempFile::new().unwrap();
        let bytes = 64 + values * 4;
        file.as_file().set_len(bytes as u64).unwrap();
        // SAFETY: the test owns the file.
        #[allow(unsafe_code)]
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(64)
                .len(values * 4)
                .map_mut(file.as_file())
        }
        .unwrap();
        let column = Column::filed(map, 64).unwrap();
        (file, column)
    }

    #[test]
    fn a_filed_column_writes_its_values_into_the_file_and_moves_into_a_vector_when_full() {
        let (file, mut c) = filed(4);
        c.push(7);
        c.extend_from_slice(&[8, 9]);
        assert_eq!(c.file_start(), Some(64));
        assert_eq!(&*c, &[7, 8, 9]);
        c.tail_mut(1)[0] = 80;
        c.retain_unless(&[false, false, true]);
        assert_eq!(&*c, &[7, 80]);
        let on_disk = std::fs::read(file.path()).unwrap();
        assert_eq!(&on_disk[64..72], bytemuck::cast_slice::<u32, u8>(&[7, 80]));
        c.extend_from_slice(&[1, 2]);
        assert_eq!(c.file_start(), Some(64), "exactly full: still in the file");
        c.push(3);
        assert_eq!(c.file_start(), None, "past its region: a vector");
        assert_eq!(&*c, &[7, 80, 1, 2, 3]);
        c.truncate(2);
        assert_eq!(&*c, &[7, 80]);
    }

    #[test]
    fn a_filed_column_clones_into_a_vector_and_truncates_in_place() {
        let (_file, mut c) = filed(8);
        c.extend_from_slice(&[1, 2, 3]);
        let copy = c.clone();
        c.truncate(1);
        assert_eq!(&*c, &[1]);
        assert_eq!(c.file_start(), Some(64));
        assert_eq!(&*copy, &[1, 2, 3]);
        assert_eq!(copy.file_start(), None);
        c.reserve(7);
        assert_eq!(c.file_start(), Some(64), "room for 7 more");
        c.reserve(8);
        assert_eq!(c.file_start(), None, "no room for 8 more");
        assert_eq!(&*c, &[1]);
    }
}
