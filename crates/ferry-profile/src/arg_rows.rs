//! [`ArgRows`]: the arguments of an [`ArgsDump`](super::ArgsDump), either as rows (read back from
//! `args_dump.json`, or pushed one by one) or as the device's ArgsDump chains kept as they were
//! collected ([`ChainArgs`]: a run's own model), each argument decoded when it is read.
//!
//! A run's model used to expand every chain into a [`DumpedArg`] (288 bytes) before anything was
//! written: 43 MB for the 150,000 arguments of the 50,000-task storm at level 3, every page of it
//! touched for the first time (~a fifth of the all-five `ferry run`'s page faults). Kept as
//! chains, the same arguments take the collected words (already in memory) plus an index entry of
//! at most 64 bytes each; `args_dump.json`'s writer decodes them in export order.
//!
//! # Examples
//! ```
//! use ferry_profile::{ArgRows, DumpedArg};
//! let mut rows = ArgRows::default();
//! rows.push(DumpedArg { task_id: 7, kind: "scalar".into(), ..DumpedArg::default() });
//! assert_eq!(rows.len(), 1);
//! assert_eq!(rows.get(0).unwrap().task_id, 7);
//! assert_eq!(rows.iter().map(|a| a.task_id).collect::<Vec<_>>(), [7]);
//! ```

use std::borrow::Cow;

use ferry_abi::args_dump::{self as chains, ArgsChainError};
use ferry_abi::records::{self as abi, ArgsDumpRecord, DeviceRecord};

use super::chunks::{ChunkLog, Span};
use super::DumpedArg;

/// Sort key of the export: `(task_id, stage rank, arg_index, role rank)`.
pub(crate) type ExportKey = (u64, u8, u32, u8);

/// Where an argument goes in `args_dump.json`: by task, then stage (`before_dispatch` first),
/// argument index and role (`INPUT`, `OUTPUT`, `INOUT`, others).
pub(crate) fn export_key(a: &DumpedArg) -> ExportKey {
    let role = match &*a.role {
        "INPUT" => 0,
        "OUTPUT" => 1,
        "INOUT" => 2,
        _ => 3,
    };
    (a.task_id, u8::from(a.stage != "before_dispatch"), a.arg_index, role)
}

/// An argument's payload, as its chain's collector placed it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ArgBin {
    /// No payload (a scalar, or level 0).
    #[default]
    None,
    /// `size` bytes at `offset` in `args.bin`.
    At {
        /// Offset in `args.bin`.
        offset: u64,
        /// Bytes.
        size: u64,
    },
    /// Overwritten in the arena before the host copied it.
    Overwritten,
}

/// One argument: where its chain lies (lane, collected buffer, the chain's first word in it),
/// its own first word's offset in the chain, its payload and its export key. Self-contained, so
/// reading an argument back reads this entry and the chain's words, nothing in between.
#[derive(Clone, Copy, Debug)]
struct ArgAt {
    lane: u32,
    buffer: u32,
    chain_at: u32,
    at: u16,
    bin: ArgBin,
    key: ExportKey,
}

// The index's size is the point of keeping chains: a fifth of a row (288 bytes) at most.
const _: () = assert!(size_of::<ArgAt>() <= 64);

/// One lane's collected words and the runs its buffers took in them.
#[derive(Debug)]
struct Lane {
    words: ChunkLog<u64>,
    buffers: Vec<Span>,
}

/// A run's arguments as the device's chains, in lane order, each checked once when added (so
/// reading one back cannot fail) and decoded when read.
#[derive(Debug, Default)]
pub struct ChainArgs {
    lanes: Vec<Lane>,
    args: Vec<ArgAt>,
    /// Before dispatch, after completion, input, output, inout, truncated.
    counts: [usize; 6],
}

/// Why a lane's words could not be kept as arguments.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainArgsError {
    /// The words do not frame as chains.
    #[error("ArgsDump chain: {0}")]
    Chain(ArgsChainError),
    /// An argument's record is outside the format.
    #[error("ArgsDump argument: {0}")]
    Record(#[from] abi::RecordDecodeError),
    /// More lanes, chains or buffers than the index counts (`u32`).
    #[error("ArgsDump: more than 2^32 lanes, buffers or chains")]
    TooMany,
}

impl ChainArgs {
    /// Keeps one lane's collected words (`buffers`: the run each collected buffer took in
    /// `words`, in collection order), framing its chains and checking each argument; `bin` gives
    /// each argument's payload, in chain order, called with the index of the buffer the argument
    /// is in (a collector that knew a buffer named no payload kept nothing for its arguments).
    /// On error the lane is not kept.
    ///
    /// # Errors
    /// [`ChainArgsError`] for words that are not chains or an argument outside the format.
    pub fn push_lane(
        &mut self,
        words: ChunkLog<u64>,
        buffers: Vec<Span>,
        mut bin: impl FnMut(usize) -> ArgBin,
    ) -> Result<(), ChainArgsError> {
        let lane = u32::try_from(self.lanes.len()).map_err(|_| ChainArgsError::TooMany)?;
        let (args0, counts0) = (self.args.len(), self.counts);
        let r = self.index_lane(lane, &words, &buffers, &mut bin);
        if r.is_err() {
            self.args.truncate(args0);
            self.counts = counts0;
            return r;
        }
        self.lanes.push(Lane { words, buffers });
        Ok(())
    }

    fn index_lane(
        &mut self,
        lane: u32,
        words: &ChunkLog<u64>,
        buffers: &[Span],
        bin: &mut impl FnMut(usize) -> ArgBin,
    ) -> Result<(), ChainArgsError> {
        for (b, &span) in buffers.iter().enumerate() {
            let buffer = u32::try_from(b).map_err(|_| ChainArgsError::TooMany)?;
            let w = words.get(span);
            let mut at = 0usize;
            while at < w.len() {
                let (c, n) = chains::parse_chain(&w[at..]).map_err(ChainArgsError::Chain)?;
                let chain_at = u32::try_from(at).map_err(|_| ChainArgsError::TooMany)?;
                for (off, rec) in c.arg_offsets().zip(c.records()) {
                    // What `DumpedArg::from_record` checks, so reading it back cannot fail; the
                    // key and counts from the codes, as the row's strings would give them.
                    rec.validate()?;
                    self.count(&rec);
                    self.args.push(ArgAt {
                        lane,
                        buffer,
                        chain_at,
                        // A chain is at most 3 + 255 × 10 words.
                        at: off as u16,
                        bin: bin(b),
                        key: (
                            rec.task_id,
                            u8::from(rec.stage != abi::ARG_STAGE_BEFORE_DISPATCH),
                            rec.arg_index,
                            match rec.role {
                                abi::ARG_ROLE_INPUT => 0,
                                abi::ARG_ROLE_OUTPUT => 1,
                                abi::ARG_ROLE_INOUT => 2,
                                _ => 3,
                            },
                        ),
                    });
                }
                at += n;
            }
        }
        Ok(())
    }

    fn count(&mut self, r: &ArgsDumpRecord) {
        let c = &mut self.counts;
        c[0] += usize::from(r.stage == abi::ARG_STAGE_BEFORE_DISPATCH);
        c[1] += usize::from(r.stage == abi::ARG_STAGE_AFTER_COMPLETION);
        c[2] += usize::from(r.role == abi::ARG_ROLE_INPUT);
        c[3] += usize::from(r.role == abi::ARG_ROLE_OUTPUT);
        c[4] += usize::from(r.role == abi::ARG_ROLE_INOUT);
        c[5] += usize::from(r.truncated != 0);
    }

    /// Arguments kept.
    pub fn len(&self) -> usize {
        self.args.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.args.is_empty()
    }

    /// The chain argument `a` is in (from its first word to its buffer's end).
    fn chain_of(&self, a: &ArgAt) -> &[u64] {
        let lane = &self.lanes[a.lane as usize];
        &lane.words.get(lane.buffers[a.buffer as usize])[a.chain_at as usize..]
    }

    /// Argument `i` (lane order), decoded.
    pub fn get(&self, i: usize) -> Option<DumpedArg> {
        let a = self.args.get(i)?;
        // Both were checked when the lane was added.
        let mut d = chains::arg_record(self.chain_of(a), usize::from(a.at))
            .ok()
            .and_then(|r| DumpedArg::from_record(&r).ok())?;
        match a.bin {
            ArgBin::None => {}
            ArgBin::At { offset, size } => {
                d.bin_offset = Some(offset);
                d.bin_size = size;
            }
            ArgBin::Overwritten => d.overwritten = true,
        }
        Some(d)
    }
}

/// The arguments of an ArgsDump: rows, or a run's chains ([`ChainArgs`]) decoded when read.
#[derive(Debug)]
pub struct ArgRows(Repr);

#[derive(Debug)]
enum Repr {
    Rows(Vec<DumpedArg>),
    Chains(ChainArgs),
}

impl Default for ArgRows {
    fn default() -> Self {
        ArgRows(Repr::Rows(Vec::new()))
    }
}

impl From<Vec<DumpedArg>> for ArgRows {
    fn from(v: Vec<DumpedArg>) -> Self {
        ArgRows(Repr::Rows(v))
    }
}

impl From<ChainArgs> for ArgRows {
    fn from(c: ChainArgs) -> Self {
        ArgRows(Repr::Chains(c))
    }
}

impl Clone for ArgRows {
    /// A clone of chains is their rows (the collected words are not copied as words).
    fn clone(&self) -> Self {
        match &self.0 {
            Repr::Rows(v) => ArgRows(Repr::Rows(v.clone())),
            Repr::Chains(_) => ArgRows(Repr::Rows(self.iter().map(Cow::into_owned).collect())),
        }
    }
}

impl PartialEq for ArgRows {
    /// The same arguments in the same order, however they are kept.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl Eq for ArgRows {}

impl ArgRows {
    /// Arguments.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Rows(v) => v.len(),
            Repr::Chains(c) => c.len(),
        }
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Argument `i` (borrowed from rows, decoded from chains).
    pub fn get(&self, i: usize) -> Option<Cow<'_, DumpedArg>> {
        match &self.0 {
            Repr::Rows(v) => v.get(i).map(Cow::Borrowed),
            Repr::Chains(c) => c.get(i).map(Cow::Owned),
        }
    }

    /// The arguments in order.
    pub fn iter(&self) -> impl Iterator<Item = Cow<'_, DumpedArg>> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The arguments of task `task`, in order (for chains, only theirs are decoded: the index
    /// holds each one's task id).
    pub fn of_task(&self, task: u64) -> impl Iterator<Item = Cow<'_, DumpedArg>> + '_ {
        let n = self.len();
        (0..n)
            .filter(move |&i| match &self.0 {
                Repr::Rows(v) => v[i].task_id == task,
                Repr::Chains(c) => c.args[i].key.0 == task,
            })
            .filter_map(|i| self.get(i))
    }

    /// Appends `a` (chains become rows first).
    pub fn push(&mut self, a: DumpedArg) {
        self.rows_mut().push(a);
    }

    /// The arguments as rows to change in place (chains become rows first).
    pub fn rows_mut(&mut self) -> &mut Vec<DumpedArg> {
        if let Repr::Chains(_) = self.0 {
            let rows: Vec<DumpedArg> = self.iter().map(Cow::into_owned).collect();
            self.0 = Repr::Rows(rows);
        }
        match &mut self.0 {
            Repr::Rows(v) => v,
            Repr::Chains(_) => unreachable!("converted above"),
        }
    }

    /// Hints the CPU to fetch what reading argument `i` reads: `far` its index entry (chains;
    /// nothing for rows), else its row, or its chain's header and its own words (the entry
    /// must be in cache by then: hint it `far` first). Nothing for an index out of range.
    pub(crate) fn prefetch(&self, i: usize, far: bool) {
        let (p, len) = match (&self.0, far) {
            (Repr::Rows(_), true) => return,
            (Repr::Rows(v), false) => match v.get(i) {
                Some(a) => (std::ptr::from_ref(a).cast::<u8>(), size_of::<DumpedArg>()),
                None => return,
            },
            (Repr::Chains(c), true) => match c.args.get(i) {
                Some(a) => (std::ptr::from_ref(a).cast::<u8>(), size_of::<ArgAt>()),
                None => return,
            },
            (Repr::Chains(c), false) => match c.args.get(i) {
                Some(a) => {
                    let w = c.chain_of(a);
                    // The header's first two words, then the argument's first two.
                    let at = usize::from(a.at).min(w.len());
                    ferry_dfx::mem::prefetch_read(w.as_ptr().cast());
                    (w[at..].as_ptr().cast::<u8>(), 16.min(8 * (w.len() - at)))
                }
                None => return,
            },
        };
        for line in 0..len.div_ceil(64) {
            // `p + 64·line` stays inside what `p` points at (`line` < its size in lines).
            ferry_dfx::mem::prefetch_read(p.wrapping_add(64 * line));
        }
    }

    /// Each argument's export key, in order (from the index for chains: nothing decoded).
    pub(crate) fn keys(&self) -> Vec<ExportKey> {
        match &self.0 {
            Repr::Rows(v) => v.iter().map(export_key).collect(),
            Repr::Chains(c) => c.args.iter().map(|a| a.key).collect(),
        }
    }

    /// Before dispatch, after completion, input, output, inout, truncated.
    pub(crate) fn counts(&self) -> [usize; 6] {
        match &self.0 {
            Repr::Chains(c) => c.counts,
            Repr::Rows(v) => {
                let mut c = [0usize; 6];
                for a in v {
                    c[0] += usize::from(a.stage == "before_dispatch");
                    c[1] += usize::from(a.stage == "after_completion");
                    c[2] += usize::from(a.role == "INPUT");
                    c[3] += usize::from(a.role == "OUTPUT");
                    c[4] += usize::from(a.role == "INOUT");
                    c[5] += usize::from(a.truncated);
                }
                c
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_abi::args_dump::{push, start, ArgsChainHead};
    use ferry_abi::records::{ARG_KIND_SCALAR, ARG_KIND_TENSOR};

    fn rec(task: u64, stage: u8, index: u32, scalar: bool) -> ArgsDumpRecord {
        let mut r = ArgsDumpRecord {
            task_id: task,
            stage,
            func_ids: [3, 0, 0],
            func_count: 1,
            arg_index: index,
            ..Default::default()
        };
        if scalar {
            r.kind = ARG_KIND_SCALAR;
            r.role = abi::ARG_ROLE_SCALAR;
            r.scalar_value = 40 + u64::from(index);
        } else {
            r.kind = ARG_KIND_TENSOR;
            r.role = if stage == 0 { abi::ARG_ROLE_INPUT } else { abi::ARG_ROLE_OUTPUT };
            r.dtype = abi::DType::Float32 as u8;
            r.ndims = 1;
            r.shapes[0] = 16;
            r.strides[0] = 1;
            r.is_contiguous = 1;
            r.payload_size = 64;
        }
        r
    }

    /// Chains of `tasks` (two arguments each, one stage), appended to `log` as one buffer.
    fn buffer(log: &mut ChunkLog<u64>, tasks: &[(u64, u8)]) -> (Span, Vec<ArgsDumpRecord>) {
        let (mut words, mut recs) = (Vec::new(), Vec::new());
        for &(task, stage) in tasks {
            let r = [rec(task, stage, 0, false), rec(task, stage, 1, true)];
            let mut w = [0u64; 32];
            let mut n = start(&mut w, &ArgsChainHead::of(&r[0])).unwrap();
            for x in &r {
                n = push(&mut w, n, x).unwrap();
            }
            words.extend_from_slice(&w[..n]);
            recs.extend(r);
        }
        (log.append_whole(&words), recs)
    }

    #[test]
    fn chains_read_back_as_the_rows_they_describe_with_their_payloads() {
        let mut log = ChunkLog::new();
        let (b0, mut recs) = buffer(&mut log, &[(9, 1), (2, 0)]);
        let (b1, more) = buffer(&mut log, &[(2, 1)]);
        recs.extend(more);
        let mut k = 0u64;
        let mut c = ChainArgs::default();
        c.push_lane(log, vec![b0, b1], |_| {
            k += 1;
            match k % 3 {
                1 => ArgBin::At { offset: 64 * k, size: 64 },
                2 => ArgBin::None,
                _ => ArgBin::Overwritten,
            }
        })
        .unwrap();
        assert_eq!(c.len(), 6);
        let mut expect: Vec<DumpedArg> = Vec::new();
        for (i, r) in recs.iter().enumerate() {
            let mut a = DumpedArg::from_record(r).unwrap();
            match (i + 1) % 3 {
                1 => (a.bin_offset, a.bin_size) = (Some(64 * (i as u64 + 1)), 64),
                2 => {}
                _ => a.overwritten = true,
            }
            expect.push(a);
        }
        let rows = ArgRows::from(c);
        let got: Vec<DumpedArg> = rows.iter().map(Cow::into_owned).collect();
        assert_eq!(got, expect);
        let of_2: Vec<DumpedArg> = rows.of_task(2).map(Cow::into_owned).collect();
        assert_eq!(of_2, [&expect[2..4], &expect[4..]].concat());
        assert_eq!(rows.of_task(5).count(), 0);
        assert!(rows.get(6).is_none());
        // The index's keys and counts are the rows' own.
        assert_eq!(rows.keys(), expect.iter().map(export_key).collect::<Vec<_>>());
        assert_eq!(rows.counts(), ArgRows::from(expect.clone()).counts());
        assert_eq!(rows.counts(), [2, 4, 1, 2, 0, 0]);
        // Equal to the same rows kept as rows, cloned as rows, and pushed to as rows.
        assert_eq!(rows, ArgRows::from(expect.clone()));
        let mut copy = rows.clone();
        assert_eq!(copy, rows);
        copy.push(DumpedArg::default());
        assert_eq!(copy.len(), 7);
        assert_ne!(copy, rows);
    }

    #[test]
    fn a_lane_that_is_not_chains_is_refused_and_leaves_the_kept_lanes_as_they_were() {
        let mut log = ChunkLog::new();
        let (good, _) = buffer(&mut log, &[(1, 0)]);
        let mut c = ChainArgs::default();
        c.push_lane(log, vec![good], |_| ArgBin::None).unwrap();
        let before: Vec<DumpedArg> = (0..c.len()).filter_map(|i| c.get(i)).collect();
        // A good chain followed by one with a reserved bit set, then a cut chain.
        for cut in [false, true] {
            let mut log = ChunkLog::new();
            let (span, _) = buffer(&mut log, &[(5, 0), (6, 0)]);
            let mut w = log.get(span).to_vec();
            if cut {
                w.pop();
            } else {
                let second = w.len() / 2 + ferry_abi::args_dump::ARGS_CHAIN_HEADER_WORDS;
                w[second] |= 1 << 40;
            }
            let mut bad = ChunkLog::new();
            let span = bad.append_whole(&w);
            let e = c.push_lane(bad, vec![span], |_| ArgBin::None).unwrap_err();
            assert!(matches!(e, ChainArgsError::Chain(_)), "{e}");
            // Words that frame, but an argument whose role no record has.
            let mut log = ChunkLog::new();
            let (span, _) = buffer(&mut log, &[(7, 0)]);
            let mut w = log.get(span).to_vec();
            w[ferry_abi::args_dump::ARGS_CHAIN_HEADER_WORDS] |= 0x7F << 8;
            let mut odd = ChunkLog::new();
            let span = odd.append_whole(&w);
            let e = c.push_lane(odd, vec![span], |_| ArgBin::None).unwrap_err();
            assert!(matches!(e, ChainArgsError::Record(_)), "{e}");
            let after: Vec<DumpedArg> = (0..c.len()).filter_map(|i| c.get(i)).collect();
            assert_eq!(after, before);
            assert_eq!(ArgRows::from(std::mem::take(&mut c)).counts(), [2, 0, 1, 0, 0, 0]);
            let mut log = ChunkLog::new();
            let (good, _) = buffer(&mut log, &[(1, 0)]);
            c.push_lane(log, vec![good], |_| ArgBin::None).unwrap();
        }
    }
}
