//! The tensor map: which earlier tasks a new task depends on, from the byte ranges they touch.
//!
//! The map keeps, for every byte of device memory any live task touched, the last task that
//! wrote it and the tasks that read it since. It stores this as disjoint segments
//! `[start, end)` with one state each, split and merged as accesses arrive. A new access of
//! `[s, e)`:
//!
//! - **read**: depends on the last writer of every byte it reads (RAW), then joins the readers;
//! - **write** (output or inout): depends on the last writer (WAW) and on every reader since
//!   (WAR), then becomes the sole writer of `[s, e)` with no readers.
//!
//! These are the per-byte "last writer / readers since" edges: every pair of tasks that touch a
//! common byte with at least one writer is ordered by a path of them, and no edge is redundant
//! within one byte's history. `tests/deps.rs` checks both properties against a brute-force
//! per-byte replay on random graphs.
//!
//! Tasks that have already finished cannot be depended on; the `is_live` callback lets the
//! device orchestrator drop them as it meets them, so the map stays as small as the set of tasks
//! in flight.
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Seg {
    end: u64,
    writer: Option<u64>,
    readers: Vec<u64>,
}

/// Producer regions of the tasks in flight.
#[derive(Clone, Debug, Default)]
pub struct TensorMap {
    segs: BTreeMap<u64, Seg>,
}

impl TensorMap {
    /// An empty map.
    pub fn new() -> TensorMap {
        TensorMap::default()
    }

    /// Segments currently held.
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.segs.clear();
    }

    /// Appends to `out` the last writer of every byte of `[start, end)` that has one
    /// (unsorted, may repeat); the map is left as it is.
    pub fn writers(&self, start: u64, end: u64, out: &mut Vec<u64>) {
        if start >= end {
            return;
        }
        let first = self.segs.range(..=start).next_back().map_or(start, |(&k, _)| k);
        for (&k, seg) in self.segs.range(first..end) {
            if seg.end > start && k < end {
                out.extend(seg.writer);
            }
        }
    }

    /// Splits the segment that strictly contains `at`, so a segment boundary lies at `at`.
    fn split_at(&mut self, at: u64) {
        let Some((_, seg)) = self.segs.range_mut(..at).next_back() else { return };
        if seg.end <= at {
            return;
        }
        let tail = Seg { end: seg.end, writer: seg.writer, readers: seg.readers.clone() };
        seg.end = at;
        self.segs.insert(at, tail);
    }

    /// Records that task `task` accesses `[start, end)` (`write` for output/inout) and appends
    /// the tasks it must wait for to `deps` (unsorted, may repeat). `is_live(t)` says whether
    /// task `t` can still be waited for; dead tasks are dropped from the map.
    pub fn access(
        &mut self,
        task: u64,
        start: u64,
        end: u64,
        write: bool,
        deps: &mut Vec<u64>,
        is_live: &mut dyn FnMut(u64) -> bool,
    ) {
        if start >= end {
            return;
        }
        self.split_at(start);
        self.split_at(end);
        // Walk the segments inside [start, end), filling gaps.
        let mut cursor = start;
        let keys: Vec<u64> = self.segs.range(start..end).map(|(&k, _)| k).collect();
        let mut gaps = Vec::new();
        for k in keys {
            if k > cursor {
                gaps.push((cursor, k));
            }
            let seg = self.segs.get_mut(&k).expect("key collected above");
            if let Some(w) = seg.writer {
                if is_live(w) {
                    deps.push(w);
                } else {
                    seg.writer = None;
                }
            }
            if write {
                for &r in &seg.readers {
                    if r != task && is_live(r) {
                        deps.push(r);
                    }
                }
                seg.readers.clear();
                seg.writer = Some(task);
            } else {
                // Prune finished readers now and then (amortised: only when the list doubles).
                if seg.readers.len() >= 32 && seg.readers.len().is_power_of_two() {
                    seg.readers.retain(|&r| is_live(r));
                }
                if seg.readers.last() != Some(&task) {
                    seg.readers.push(task);
                }
            }
            cursor = seg.end;
        }
        if cursor < end {
            gaps.push((cursor, end));
        }
        for (s, e) in gaps {
            let seg = if write {
                Seg { end: e, writer: Some(task), readers: Vec::new() }
            } else {
                Seg { end: e, writer: None, readers: vec![task] }
            };
            self.segs.insert(s, seg);
        }
        if write {
            // One writer and no readers over the whole range: merge into a single segment.
            let keys: Vec<u64> = self.segs.range(start..end).map(|(&k, _)| k).collect();
            for k in keys.iter().skip(1) {
                self.segs.remove(k);
            }
            self.segs.insert(start, Seg { end, writer: Some(task), readers: Vec::new() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deps(m: &mut TensorMap, t: u64, s: u64, e: u64, w: bool) -> Vec<u64> {
        let mut d = Vec::new();
        m.access(t, s, e, w, &mut d, &mut |_| true);
        d.sort_unstable();
        d.dedup();
        d
    }

    #[test]
    fn raw_war_waw_and_partial_overlap() {
        let mut m = TensorMap::new();
        assert_eq!(deps(&mut m, 0, 0, 64, true), Vec::<u64>::new());
        assert_eq!(deps(&mut m, 1, 0, 32, false), vec![0]); // RAW
        assert_eq!(deps(&mut m, 2, 16, 48, false), vec![0]); // RAW, readers do not order
        assert_eq!(deps(&mut m, 3, 40, 64, true), vec![0, 2]); // WAW on 0, WAR on 2
        assert_eq!(deps(&mut m, 4, 0, 64, true), vec![0, 1, 2, 3]);
        assert_eq!(m.len(), 1);
        assert_eq!(deps(&mut m, 5, 64, 128, false), Vec::<u64>::new()); // disjoint
    }

    #[test]
    fn finished_tasks_are_dropped() {
        let mut m = TensorMap::new();
        let mut d = Vec::new();
        m.access(0, 0, 8, true, &mut d, &mut |_| true);
        m.access(1, 0, 8, false, &mut d, &mut |_| true);
        d.clear();
        m.access(2, 0, 8, true, &mut d, &mut |t| t != 0 && t != 1);
        assert!(d.is_empty());
        d.clear();
        m.access(3, 0, 8, false, &mut d, &mut |_| false);
        assert!(d.is_empty());
    }
}
