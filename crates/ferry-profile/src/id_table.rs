//! [`IdTable`]: a read-mostly table keyed by task id, an array where the ids are dense.
//!
//! The trace's joins look a value up per task (its kernel, its first slice) in tables built
//! once from 50,000-task runs. Device task ids count up from a base, so an array over their
//! range answers a lookup with one index, where a hash map hashes, probes and, while it is
//! built, rehashes as it grows. Ids that are not dense (a hand-built model, a corrupt file) get
//! the hash map: the array's size is bounded by the number of entries, never by an id's value.

use super::stream::IdMap;

/// Most slots a dense table may have per entry (plus [`DENSE_SLACK`]): a range this full or
/// fuller is an array, anything sparser a hash map.
const DENSE_SLOTS_PER_ENTRY: u64 = 4;
/// Slots a dense table may have beyond [`DENSE_SLOTS_PER_ENTRY`] per entry (small runs).
const DENSE_SLACK: u64 = 1024;

/// A table from `u64` ids to values: the first value given per id ([`IdTable::first`]), or
/// every value given folded into it ([`IdTable::fold`]).
///
/// # Examples
/// ```
/// use ferry_profile::IdTable;
/// let rows = [(100u64, 'a'), (102, 'b'), (100, 'c')];
/// let t = IdTable::first(|| rows.iter().copied());
/// assert_eq!((t.get(100), t.get(101), t.get(102)), (Some(&'a'), None, Some(&'b')));
/// assert!(t.is_dense());
/// let far = IdTable::first(|| [(1u64, 1), (u64::MAX, 2)].into_iter());
/// assert!(!far.is_dense());
/// assert_eq!((far.get(1), far.get(u64::MAX), far.get(7)), (Some(&1), Some(&2), None));
/// ```
#[derive(Clone, Debug)]
pub struct IdTable<V> {
    repr: Repr<V>,
}

#[derive(Clone, Debug)]
enum Repr<V> {
    /// Slot `id - lo` holds the value of `id`.
    Dense {
        lo: u64,
        slots: Vec<Option<V>>,
    },
    Sparse(IdMap<u64, V>),
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        Self { repr: Repr::Dense { lo: 0, slots: Vec::new() } }
    }
}

impl<V> IdTable<V> {
    /// The first value per id of the entries `entries()` yields. `entries` is called twice (once
    /// for the ids' range, once to fill the table) and must yield the same entries both times.
    pub fn first<I: Iterator<Item = (u64, V)>>(entries: impl Fn() -> I) -> Self {
        Self::fold(entries, |_, _| {})
    }

    /// The values per id of the entries `entries()` yields, folded in order: an id's first value
    /// is kept, and each later one merged into it with `merge(&mut kept, value)`. `entries` is
    /// called twice, as for [`first`](Self::first).
    ///
    /// # Examples
    /// ```
    /// use ferry_profile::IdTable;
    /// // Each task's first start and last end over its blocks.
    /// let blocks = [(7u64, (10, 30)), (8, (31, 40)), (7, (12, 50))];
    /// let spans = IdTable::fold(|| blocks.iter().copied(), |s: &mut (u64, u64), (a, b)| {
    ///     *s = (s.0.min(a), s.1.max(b));
    /// });
    /// assert_eq!((spans.get(7), spans.get(8)), (Some(&(10, 50)), Some(&(31, 40))));
    /// ```
    pub fn fold<I: Iterator<Item = (u64, V)>>(
        entries: impl Fn() -> I,
        mut merge: impl FnMut(&mut V, V),
    ) -> Self {
        let (mut lo, mut hi, mut n) = (u64::MAX, 0u64, 0u64);
        for (id, _) in entries() {
            lo = lo.min(id);
            hi = hi.max(id);
            n += 1;
        }
        if n == 0 {
            return Self::default();
        }
        let span = (hi - lo).saturating_add(1);
        if span <= n.saturating_mul(DENSE_SLOTS_PER_ENTRY).saturating_add(DENSE_SLACK) {
            // `span` is bounded by the entry count (checked above), so it fits in memory.
            let mut slots: Vec<Option<V>> = Vec::with_capacity(span as usize);
            slots.resize_with(span as usize, || None);
            for (id, v) in entries() {
                // Checked: an `entries` that yields other ids the second time is ignored there.
                let slot = id.checked_sub(lo).and_then(|i| usize::try_from(i).ok());
                match slot.and_then(|i| slots.get_mut(i)) {
                    Some(Some(kept)) => merge(kept, v),
                    Some(s) => *s = Some(v),
                    None => {}
                }
            }
            return Self { repr: Repr::Dense { lo, slots } };
        }
        let mut map: IdMap<u64, V> = IdMap::default();
        map.reserve(n as usize);
        for (id, v) in entries() {
            match map.entry(id) {
                std::collections::hash_map::Entry::Occupied(mut o) => merge(o.get_mut(), v),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(v);
                }
            }
        }
        Self { repr: Repr::Sparse(map) }
    }

    /// The value of `id`.
    #[inline]
    pub fn get(&self, id: u64) -> Option<&V> {
        match &self.repr {
            Repr::Dense { lo, slots } => {
                let i = usize::try_from(id.checked_sub(*lo)?).ok()?;
                slots.get(i)?.as_ref()
            }
            Repr::Sparse(m) => m.get(&id),
        }
    }

    /// Whether the table is an array over its ids' range.
    pub fn is_dense(&self) -> bool {
        matches!(self.repr, Repr::Dense { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_and_sparse_tables_answer_alike() {
        // Dense: ids from a base, with gaps and repeats.
        let base = 0x7000_0000_0000_0000u64;
        let rows: Vec<(u64, usize)> =
            (0..5000u64).filter(|i| i % 3 != 1).map(|i| (base + i, i as usize)).collect();
        let mut with_repeats = rows.clone();
        with_repeats.extend(rows.iter().map(|&(id, v)| (id, v + 1_000_000)));
        let dense = IdTable::first(|| with_repeats.iter().copied());
        assert!(dense.is_dense());
        // Sparse: the same values at ids spread over the whole range.
        let spread = |id: u64| id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let sparse = IdTable::first(|| with_repeats.iter().map(|&(id, v)| (spread(id), v)));
        assert!(!sparse.is_dense());
        for i in 0..5100u64 {
            let want = (i < 5000 && i % 3 != 1).then_some(i as usize);
            assert_eq!(dense.get(base + i).copied(), want, "dense {i}");
            assert_eq!(sparse.get(spread(base + i)).copied(), want, "sparse {i}");
        }
        assert_eq!(dense.get(base - 1), None);
        assert_eq!(dense.get(0), None);
        assert_eq!(dense.get(u64::MAX), None);
    }

    #[test]
    fn folds_merge_every_later_value_in_order_in_both_layouts() {
        // (id, value) pairs; each id's values concatenated in order.
        let rows: Vec<(u64, u32)> = (0..3000u32).map(|i| (u64::from(i % 7) * 3, i)).collect();
        let want = |id: u64| -> Vec<u32> {
            rows.iter().filter(|&&(k, _)| k == id).map(|&(_, v)| v).collect()
        };
        let cat = |kept: &mut Vec<u32>, v: Vec<u32>| kept.extend(v);
        let dense = IdTable::fold(|| rows.iter().map(|&(id, v)| (id, vec![v])), cat);
        assert!(dense.is_dense());
        let spread = |id: u64| id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let sparse = IdTable::fold(|| rows.iter().map(|&(id, v)| (spread(id), vec![v])), cat);
        assert!(!sparse.is_dense());
        for id in 0..21 {
            let w = want(id);
            let w = (!w.is_empty()).then_some(w);
            assert_eq!(dense.get(id), w.as_ref(), "dense {id}");
            assert_eq!(sparse.get(spread(id)), w.as_ref(), "sparse {id}");
        }
    }

    #[test]
    fn a_table_never_allocates_by_id_value() {
        // Two entries at the ends of the id space: a map of two, not an array of 2^64.
        let t = IdTable::first(|| [(0u64, 'a'), (u64::MAX, 'b')].into_iter());
        assert!(!t.is_dense());
        assert_eq!((t.get(0), t.get(u64::MAX), t.get(1)), (Some(&'a'), Some(&'b'), None));
        // Just inside the bound (4 slots per entry + 1024) is an array, just outside a map.
        let at = |hi: u64| IdTable::first(move || [(0u64, ()), (hi, ())].into_iter()).is_dense();
        assert!(at(2 * 4 + 1024 - 1));
        assert!(!at(2 * 4 + 1024));
        let empty: IdTable<u8> = IdTable::first(std::iter::empty);
        assert_eq!(empty.get(0), None);
    }

    #[test]
    fn entries_that_change_between_the_passes_are_ignored_not_a_panic() {
        let calls = std::cell::Cell::new(0);
        let t = IdTable::first(|| {
            calls.set(calls.get() + 1);
            let second: &[(u64, char)] = &[(10, 'a'), (5, 'x'), (999, 'y'), (u64::MAX, 'z')];
            if calls.get() == 1 { &[(10, 'a'), (11, 'b')][..] } else { second }.iter().copied()
        });
        assert!(t.is_dense());
        assert_eq!(calls.get(), 2);
        assert_eq!((t.get(10), t.get(11)), (Some(&'a'), None));
        assert_eq!((t.get(5), t.get(999), t.get(u64::MAX)), (None, None, None));
    }
}
