//! Interned text: each distinct value once, rows refer to it by index.

use super::*;

/// Interned text: each distinct value once, rows refer to it by index.
#[derive(Debug, Clone, Default)]
pub(super) struct Interner {
    pub(super) values: Vec<String>,
    pub(super) index: FxHashMap<String, u32>,
}

impl Interner {
    pub(super) fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = u32::try_from(self.values.len()).unwrap_or(u32::MAX);
        self.values.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }

    pub(super) fn get(&self, i: u32) -> &str {
        self.values.get(i as usize).map_or("", String::as_str)
    }

    pub(super) fn len(&self) -> usize {
        self.values.len()
    }

    /// Forgets every value interned after the first `len`.
    pub(super) fn truncate(&mut self, len: usize) {
        for v in self.values.drain(len.min(self.values.len())..) {
            self.index.remove(&v);
        }
    }

    /// The interner of distinct `values` (as a cache holds them).
    pub(super) fn from_values(values: Vec<String>) -> Self {
        let index = values.iter().cloned().zip(0..).collect();
        Interner { values, index }
    }
}
