//! The native profile: a flight recorder written while the run runs.
//!
//! Every buffer a DFX collector hands its sink is also appended, as one *chunk* of fixed-size
//! binary records, to [`RECORD_FILE`] in the run's directory. A chunk is sealed when it is
//! whole on the file: a 32-byte header (its length, what it holds, and the XXH3-64 of header and
//! payload) followed by the payload. After a crash the file holds every sealed chunk; a reader
//! ([`read_recording`]) recovers them and ignores a torn tail.
//!
//! # Layout (little-endian)
//!
//! | bytes | what |
//! |---|---|
//! | 16 | file header: `FERRYREC`, format [`RECORD_FORMAT`] (u32), 0 (u32) |
//! | 32 | chunk header: `FRCK` (u32), payload bytes (u32), [`RecordStream`] (u16), record bytes (u16), lane (u32), buffer sequence number (u32), records (u32), XXH3-64 of the header's first 24 bytes and the payload (u64) |
//! | payload | `records` × the stream's [`RecordStream::record_bytes`] |
//!
//! Each record keeps the device record's fields and drops its padding ([`Packed`]).
//!
//! # The recovery rule
//!
//! A reader takes the longest prefix of chunks that are whole and whose checksum, stream, sizes
//! and magic are right; the rest of the file is the torn tail, ignored and counted
//! ([`Recording::torn_bytes`]). A chunk is appended with one write after the one before it was
//! whole, so a crash can only tear the last one.
//!
//! # Writing
//!
//! A [`Recorder`] is created through the run directory's handle ([`ferry_fs::Dir::create_new`]:
//! `O_CREAT|O_EXCL|O_NOFOLLOW`, never through a link) and shared by every collector sink: a
//! collector encodes a chunk, the recorder's writer thread appends it. A failed write stops the
//! recording (the run goes on); [`Recorder::finish`] reports it.
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use ferry_abi::launch::AbiRecord;
use ferry_abi::records::{
    AicoreTaskRecord, AicpuTaskRecord, OrchPhaseRecord, PmuRecord, SchedPhaseRecord,
    ScopeStatsRecord, PMU_MAX_COUNTERS,
};
use ferry_fs::{Dir, FsError};
use xxhash_rust::xxh3::Xxh3;

use super::Written;

pub use super::recorder_read::{
    read_recording, read_recording_bytes, ChunkInfo, Recording, RecordingError,
};

/// File name of the native profile in a run's directory.
pub const RECORD_FILE: &str = "profile.ferry";
/// Format version in the file header.
pub const RECORD_FORMAT: u32 = 2;
/// The file header's magic.
pub(crate) const FILE_MAGIC: &[u8; 8] = b"FERRYREC";
/// Bytes of the file header.
pub const FILE_HEADER_BYTES: usize = 16;
/// A chunk header's magic (`FRCK`).
pub(crate) const CHUNK_MAGIC: u32 = u32::from_le_bytes(*b"FRCK");
/// Bytes of a chunk header.
pub const CHUNK_HEADER_BYTES: usize = 32;
/// The most payload bytes one chunk holds (a reader refuses more before it allocates).
pub const MAX_CHUNK_PAYLOAD: u32 = 16 << 20;

/// Environment variable of the crash test hook: with `N`, the recorder seals `N` chunks, writes
/// half of the next one and sends its own process SIGKILL, after printing how many chunks and
/// records it sealed (`ferry: recorder: killed after N sealed chunks, R records`). For tests of
/// the recovery rule; never set it otherwise.
pub const KILL_AFTER_CHUNK_ENV: &str = "FERRY_TEST_KILL_AFTER_CHUNK";

/// Chunks and records every recorder of this process sealed (for a run's end record, written
/// by a handler that cannot take a recorder's lock).
static SEALED_IN_PROCESS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// `(chunks, records)` every [`Recorder`] of this process sealed so far: whole on their files
/// (counted after the write). Reads atomics only: a signal handler may call it.
pub fn sealed_in_process() -> (u64, u64) {
    // Acquire: pairs with the Release increments after each chunk's write.
    (SEALED_IN_PROCESS[0].load(Ordering::Acquire), SEALED_IN_PROCESS[1].load(Ordering::Acquire))
}

/// What a chunk holds: the record type of one DFX region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u16)]
pub enum RecordStream {
    /// ChipSwimlane AICore task records, per core.
    Aicore = 1,
    /// ChipSwimlane AICPU dispatch/finish records, per core.
    Aicpu = 2,
    /// ChipSwimlane scheduler phases, per scheduler thread.
    Sched = 3,
    /// ChipSwimlane orchestrator submit envelopes.
    Orch = 4,
    /// PMU rows, per core.
    Pmu = 5,
    /// DepGen chain words (LEB128 varints).
    DepGen = 6,
    /// ScopeStats records.
    Scope = 7,
    /// ArgsDump chain words (LEB128 varints), per scheduler thread.
    Args = 8,
    /// Bytes the records are read with (one byte per record): the session's end, sealed when
    /// it stops (the lane says which).
    Meta = 9,
    /// ArgsDump payload bytes (one byte per record), per scheduler thread: what the collector
    /// copied out of the thread's arena for one buffer, in the order the buffer's chains name
    /// them (the lane's `args.bin`, chunk after chunk).
    ArgsBin = 10,
}

impl RecordStream {
    /// Every stream, in id order.
    pub const ALL: [RecordStream; 10] = [
        RecordStream::Aicore,
        RecordStream::Aicpu,
        RecordStream::Sched,
        RecordStream::Orch,
        RecordStream::Pmu,
        RecordStream::DepGen,
        RecordStream::Scope,
        RecordStream::Args,
        RecordStream::Meta,
        RecordStream::ArgsBin,
    ];

    /// The stream of id `id`.
    pub fn from_id(id: u16) -> Option<RecordStream> {
        RecordStream::ALL.into_iter().find(|s| *s as u16 == id)
    }

    /// Bytes of one record of this stream on disk; 0 for the chain-word streams (DepGen,
    /// ArgsDump), whose words are LEB128 varints of 1 to 10 bytes.
    pub fn record_bytes(self) -> usize {
        match self {
            RecordStream::Aicore => AicoreTaskRecord::BYTES,
            RecordStream::Aicpu => AicpuTaskRecord::BYTES,
            RecordStream::Sched => SchedPhaseRecord::BYTES,
            RecordStream::Orch => OrchPhaseRecord::BYTES,
            RecordStream::Pmu => PmuRecord::BYTES,
            RecordStream::DepGen | RecordStream::Args => <u64 as Packed>::BYTES,
            RecordStream::Scope => ScopeStatsRecord::BYTES,
            RecordStream::Meta | RecordStream::ArgsBin => u8::BYTES,
        }
    }

    /// The stream's name (`ferry report`'s lines).
    pub fn name(self) -> &'static str {
        match self {
            RecordStream::Aicore => "aicore",
            RecordStream::Aicpu => "aicpu",
            RecordStream::Sched => "sched",
            RecordStream::Orch => "orch",
            RecordStream::Pmu => "pmu",
            RecordStream::DepGen => "dep_gen",
            RecordStream::Scope => "scope",
            RecordStream::Args => "args",
            RecordStream::Meta => "meta",
            RecordStream::ArgsBin => "args_bin",
        }
    }
}

/// A device record as the native profile stores it: its fields, little-endian, without padding;
/// a chain word ([`u64`]) as a LEB128 varint.
pub trait Packed: Copy {
    /// Bytes on disk of one record; 0 for a record of variable length (a LEB128 word).
    const BYTES: usize;
    /// Appends the record's encoding to `out` ([`BYTES`](Self::BYTES) bytes when fixed).
    fn pack(&self, out: &mut Vec<u8>);
    /// The record of `b` (exactly [`BYTES`](Self::BYTES) bytes; for a varint, exactly its
    /// encoding).
    fn unpack(b: &[u8]) -> Self;
    /// Appends the encodings of `records`, in order, to `out`.
    fn pack_all(records: &[Self], out: &mut Vec<u8>) {
        out.reserve(records.len() * Self::BYTES);
        for r in records {
            r.pack(out);
        }
    }
    /// The records' images as they sit in memory (the device's layout, no padding), which a
    /// collector copies as they are; [`pack_images`](Self::pack_images) reads them back.
    fn images(records: &[Self]) -> &[u8];
    /// Appends the encodings of the records whose [`images`](Self::images) `images` holds.
    fn pack_images(images: &[u8], out: &mut Vec<u8>);
    /// The `n` records of a chunk's payload, checked whole when the chunk was indexed.
    fn unpack_all(payload: &[u8], n: usize) -> Vec<Self> {
        let mut v = Vec::with_capacity(n);
        v.extend(payload.chunks_exact(Self::BYTES.max(1)).map(Self::unpack));
        v
    }
}

/// The most bytes one LEB128 word takes (64 bits, 7 per byte).
pub const MAX_VARINT_BYTES: usize = 10;

/// Whether `payload` is exactly `n` LEB128 words, each at most [`MAX_VARINT_BYTES`] long and
/// within 64 bits.
pub(crate) fn varints_ok(payload: &[u8], n: usize) -> bool {
    let (mut words, mut len) = (0usize, 0usize);
    for &b in payload {
        len += 1;
        if len == MAX_VARINT_BYTES && b > 1 {
            return false;
        }
        if b < 0x80 {
            words += 1;
            len = 0;
        }
    }
    len == 0 && words == n
}

/// [`Packed::images`] and [`Packed::pack_images`] of a device record ([`AbiRecord`]: its layout
/// proved to hold no padding).
macro_rules! device_images {
    () => {
        fn images(records: &[Self]) -> &[u8] {
            // SAFETY: [1] `records` is live for the borrow; [2] `AbiRecord` (implemented only by
            // `abi_record!` after its layout proof) guarantees the type has no padding, so
            // every byte of the slice is initialised; [3] `u8` needs no alignment.
            unsafe {
                std::slice::from_raw_parts(records.as_ptr().cast::<u8>(), size_of_val(records))
            }
        }
        fn pack_images(images: &[u8], out: &mut Vec<u8>) {
            out.reserve(images.len() / <Self as AbiRecord>::SIZE * <Self as Packed>::BYTES);
            for image in images.chunks_exact(<Self as AbiRecord>::SIZE) {
                // An image this process copied from a record of this type: always whole.
                if let Ok(r) = <Self as AbiRecord>::from_bytes(image) {
                    r.pack(out);
                }
            }
        }
    };
}

/// Little-endian field reader over one packed record.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (a, rest) = self.0.split_at(N);
        self.0 = rest;
        a.try_into().unwrap_or([0; N])
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn i32(&mut self) -> i32 {
        i32::from_le_bytes(self.take())
    }
    fn i16(&mut self) -> i16 {
        i16::from_le_bytes(self.take())
    }
}

impl Packed for u64 {
    const BYTES: usize = 0;
    fn pack(&self, out: &mut Vec<u8>) {
        let mut v = *self;
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn unpack(b: &[u8]) -> Self {
        b.iter().rev().fold(0u64, |v, &x| (v << 7) | u64::from(x & 0x7f))
    }
    fn images(words: &[u64]) -> &[u8] {
        // SAFETY: a `u64` has no padding and every bit pattern is valid; the bytes are read
        // for the borrow's lifetime, at alignment 1.
        unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), size_of_val(words)) }
    }
    fn pack_images(images: &[u8], out: &mut Vec<u8>) {
        // Straight from the images: no words copied out first.
        let words =
            images.chunks_exact(8).map(|b| u64::from_ne_bytes(b.try_into().unwrap_or_default()));
        pack_varints(words, images.len() / 8, out);
    }
    fn pack_all(words: &[u64], out: &mut Vec<u8>) {
        pack_varints(words.iter().copied(), words.len(), out);
    }
    fn unpack_all(payload: &[u8], n: usize) -> Vec<Self> {
        let mut v = Vec::with_capacity(n);
        let (mut word, mut shift) = (0u64, 0u32);
        for &b in payload {
            word |= u64::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
            shift += 7;
            if b < 0x80 {
                v.push(word);
                (word, shift) = (0, 0);
            }
        }
        v
    }
}

/// Appends the LEB128 encodings of `n` `words` to `out`, room for the widest reserved first (not
/// cleared: a chunk's buffer is reused, and zeroing ten bytes per word cost more than the
/// encoding).
fn pack_varints(words: impl Iterator<Item = u64>, n: usize, out: &mut Vec<u8>) {
    out.reserve(n * MAX_VARINT_BYTES);
    for w in words.take(n) {
        let mut v = w;
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
}

impl Packed for u8 {
    const BYTES: usize = 1;
    fn pack(&self, out: &mut Vec<u8>) {
        out.push(*self);
    }
    fn images(bytes: &[u8]) -> &[u8] {
        bytes
    }
    fn pack_images(images: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(images);
    }
    fn unpack(b: &[u8]) -> Self {
        b[0]
    }
}

impl Packed for AicoreTaskRecord {
    const BYTES: usize = 32;
    device_images!();
    fn pack(&self, o: &mut Vec<u8>) {
        o.extend_from_slice(&self.start_time.to_le_bytes());
        o.extend_from_slice(&self.end_time.to_le_bytes());
        o.extend_from_slice(&self.task_token_raw.to_le_bytes());
        o.extend_from_slice(&self.reg_task_id.to_le_bytes());
        o.extend_from_slice(&self.receive_to_start_cycles.to_le_bytes());
    }
    fn unpack(b: &[u8]) -> Self {
        let mut f = Fields(b);
        AicoreTaskRecord {
            start_time: f.u64(),
            end_time: f.u64(),
            task_token_raw: f.u64(),
            reg_task_id: f.u32(),
            receive_to_start_cycles: f.u32(),
        }
    }
}

impl Packed for AicpuTaskRecord {
    const BYTES: usize = 20;
    device_images!();
    fn pack(&self, o: &mut Vec<u8>) {
        o.extend_from_slice(&self.dispatch_time.to_le_bytes());
        o.extend_from_slice(&self.finish_time.to_le_bytes());
        o.extend_from_slice(&self.reg_task_id.to_le_bytes());
    }
    fn unpack(b: &[u8]) -> Self {
        let mut f = Fields(b);
        AicpuTaskRecord {
            dispatch_time: f.u64(),
            finish_time: f.u64(),
            reg_task_id: f.u32(),
            _pad: [0; 3],
        }
    }
}

impl Packed for SchedPhaseRecord {
    const BYTES: usize = 48;
    device_images!();
    fn pack(&self, o: &mut Vec<u8>) {
        o.extend_from_slice(&self.start.to_le_bytes());
        o.extend_from_slice(&self.end.to_le_bytes());
        for v in [self.loop_iter, self.kind, self.tasks_processed] {
            o.extend_from_slice(&v.to_le_bytes());
        }
        for v in self.phase_data {
            o.extend_from_slice(&v.to_le_bytes());
        }
        for v in self.shared_depth_at_start.iter().chain(&self.shared_depth_at_end) {
            o.extend_from_slice(&v.to_le_bytes());
        }
    }
    fn unpack(b: &[u8]) -> Self {
        let mut f = Fields(b);
        SchedPhaseRecord {
            start: f.u64(),
            end: f.u64(),
            loop_iter: f.u32(),
            kind: f.u32(),
            tasks_processed: f.u32(),
            phase_data: [f.u32(), f.u32()],
            shared_depth_at_start: [f.i16(), f.i16(), f.i16()],
            shared_depth_at_end: [f.i16(), f.i16(), f.i16()],
            ..SchedPhaseRecord::default()
        }
    }
}

impl Packed for OrchPhaseRecord {
    const BYTES: usize = 28;
    device_images!();
    fn pack(&self, o: &mut Vec<u8>) {
        o.extend_from_slice(&self.start.to_le_bytes());
        o.extend_from_slice(&self.end.to_le_bytes());
        o.extend_from_slice(&self.task_id.to_le_bytes());
        o.extend_from_slice(&self.submit_idx.to_le_bytes());
    }
    fn unpack(b: &[u8]) -> Self {
        let mut f = Fields(b);
        OrchPhaseRecord {
            start: f.u64(),
            end: f.u64(),
            task_id: f.u64(),
            submit_idx: f.u32(),
            ..OrchPhaseRecord::default()
        }
    }
}

impl Packed for PmuRecord {
    const BYTES: usize = 24 + 4 * PMU_MAX_COUNTERS;
    device_images!();
    fn pack(&self, o: &mut Vec<u8>) {
        o.extend_from_slice(&self.task_id.to_le_bytes());
        o.extend_from_slice(&self.func_id.to_le_bytes());
        o.extend_from_slice(&self.core_type.to_le_bytes());
        o.extend_from_slice(&self.pmu_total_cycles.to_le_bytes());
        for v in self.counters {
            o.extend_from_slice(&v.to_le_bytes());
        }
    }
    fn unpack(b: &[u8]) -> Self {
        let mut f = Fields(b);
        let mut r = PmuRecord {
            task_id: f.u64(),
            func_id: f.u32(),
            core_type: f.i32(),
            pmu_total_cycles: f.u64(),
            ..PmuRecord::default()
        };
        for c in &mut r.counters {
            *c = f.u32();
        }
        r
    }
}

impl Packed for ScopeStatsRecord {
    const BYTES: usize = 80;
    device_images!();
    fn pack(&self, o: &mut Vec<u8>) {
        o.extend_from_slice(&self.site_file_basename);
        o.extend_from_slice(&self.heap_start.to_le_bytes());
        o.extend_from_slice(&self.heap_end.to_le_bytes());
        for v in [
            self.site_line,
            self.task_start,
            self.task_end,
            self.dep_pool_start,
            self.dep_pool_end,
            self.tensormap_used,
        ] {
            o.extend_from_slice(&v.to_le_bytes());
        }
        for v in [self.depth, self.ring_id, self.phase, 0] {
            o.extend_from_slice(&v.to_le_bytes());
        }
    }
    fn unpack(b: &[u8]) -> Self {
        let mut f = Fields(b);
        ScopeStatsRecord {
            site_file_basename: f.take(),
            heap_start: f.u64(),
            heap_end: f.u64(),
            site_line: f.i32(),
            task_start: f.i32(),
            task_end: f.i32(),
            dep_pool_start: f.i32(),
            dep_pool_end: f.i32(),
            tensormap_used: f.i32(),
            depth: f.i16(),
            ring_id: f.i16(),
            phase: f.i16(),
            ..ScopeStatsRecord::default()
        }
    }
}

/// When the recorder forces sealed chunks to the disk (`fsync`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Never while the run runs (the page cache survives a killed process; only a machine's
    /// crash loses the unsynced chunks): the default.
    #[default]
    Never,
    /// After every `n`-th sealed chunk (1: every chunk).
    Every(u32),
}

/// Why the native profile could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    /// Creating the file.
    #[error("creating the native profile")]
    Create(#[source] FsError),
    /// Writing or syncing it.
    #[error("writing the native profile {path}")]
    Write {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Counts of what a [`Recorder`] sealed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sealed {
    /// Chunks.
    pub chunks: u64,
    /// Records (words for the DepGen and ArgsDump streams).
    pub records: u64,
    /// Bytes of the file, its header included.
    pub bytes: u64,
    /// `fsync`s the policy made.
    pub syncs: u64,
}

/// The native profile's writer, shared by every collector sink of a session.
///
/// A collector copies each buffer's records as they are (one copy, as it makes for itself) and
/// hands them to the recorder's own writer thread, which encodes the chunk (the records packed,
/// the header and checksum), appends it to the file, hashes it for the manifest and starts its
/// writeback: the collector returns to its lanes right after the copy, and neither the encoding
/// nor the file's write holds up a lane's buffer (measured: encoding on the collector made the
/// storm's writers wait at their gates 5–10 times as often). The writer thread runs at nice [`WRITER_NICE`], as the DFX engine's host threads do
/// (below the chip's threads sharing the machine's CPUs). At most [`QUEUED_CHUNKS`] chunks wait
/// for it; a collector that finds the queue full waits for a place (parked).
pub struct Recorder {
    shared: Arc<Shared>,
    /// The writer's queue; `None` once finished.
    tx: Mutex<Option<SyncSender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    path: String,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("path", &self.path).finish_non_exhaustive()
    }
}

/// Chunks that may wait for the writer thread: at most 16 MiB of images (a buffer of the
/// largest default pool is 64 KiB). With 64 the storm's collector found the queue full up to 90
/// times a run on a loaded 2-core machine, and its lanes waited at their gates meanwhile; with
/// 256, never.
pub const QUEUED_CHUNKS: usize = 256;

/// The writer thread's nice value: the DFX engine's host threads' (`HOST_NICE` of
/// `ferry_runtime::host::dfx`).
pub const WRITER_NICE: i32 = 12;

/// What the collectors and the writer thread share.
struct Shared {
    state: Mutex<State>,
    /// Encoded chunks' buffers, back from the writer for the next chunks.
    pool: Mutex<Vec<Vec<u8>>>,
    /// A write failed: later chunks are not even encoded.
    failed: AtomicBool,
}

/// What a chunk's header says, but for its payload's length and checksum.
#[derive(Clone, Copy)]
struct Head {
    stream: RecordStream,
    lane: u32,
    seq: u32,
    record_bytes: usize,
    records: usize,
}

/// A job of the writer thread.
enum Job {
    /// A chunk to encode from its records' images (`pack`: the record type's
    /// [`Packed::pack_images`]) and append.
    Chunk { head: Head, images: Vec<u8>, pack: fn(&[u8], &mut Vec<u8>) },
    /// Answer once every chunk queued before is written.
    Flush(SyncSender<()>),
}

struct State {
    file: File,
    /// XXH3-64 of the whole file so far (for the manifest).
    hash: Xxh3,
    sealed: Sealed,
    policy: FsyncPolicy,
    since_sync: u32,
    error: Option<std::io::Error>,
    kill_after: Option<u64>,
    /// Bytes of the file whose writeback was started ([`State::kick`]).
    kicked: u64,
}

impl Recorder {
    /// Creates `rel` (one component) in `dir` (`O_CREAT|O_EXCL|O_NOFOLLOW`: an existing file or
    /// link under that name is an error), writes the file header and starts the writer thread.
    ///
    /// # Errors
    /// [`RecorderError::Create`], or [`RecorderError::Write`] for the header or the thread.
    pub fn create(dir: &Dir, rel: &str, policy: FsyncPolicy) -> Result<Recorder, RecorderError> {
        let mut file = dir.create_new(rel).map_err(RecorderError::Create)?;
        let path = dir.join(rel).display().to_string();
        let mut head = Vec::with_capacity(FILE_HEADER_BYTES);
        head.extend_from_slice(FILE_MAGIC);
        head.extend_from_slice(&RECORD_FORMAT.to_le_bytes());
        head.extend_from_slice(&0u32.to_le_bytes());
        file.write_all(&head)
            .map_err(|source| RecorderError::Write { path: path.clone(), source })?;
        let mut hash = Xxh3::new();
        hash.update(&head);
        let kill_after = std::env::var(KILL_AFTER_CHUNK_ENV).ok().and_then(|v| v.parse().ok());
        let sealed = Sealed { bytes: head.len() as u64, ..Sealed::default() };
        let state =
            State { file, hash, sealed, policy, since_sync: 0, error: None, kill_after, kicked: 0 };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            pool: Mutex::new(Vec::new()),
            failed: AtomicBool::new(false),
        });
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(QUEUED_CHUNKS);
        let sh = shared.clone();
        let writer = std::thread::Builder::new()
            .name("ferry-recorder".into())
            .spawn(move || write_loop(&sh, rx))
            .map_err(|source| RecorderError::Write { path: path.clone(), source })?;
        Ok(Recorder { shared, tx: Mutex::new(Some(tx)), writer: Mutex::new(Some(writer)), path })
    }

    /// Seals `records`, buffer `seq` of `lane` of `stream`, as one chunk at the file's end (in
    /// the order of the calls). An empty buffer writes nothing; after a failed write nothing
    /// more is written.
    ///
    /// # Panics
    /// When `R`'s size is not `stream`'s record size.
    pub fn append<R: Packed>(&self, stream: RecordStream, lane: u32, seq: u32, records: &[R]) {
        assert_eq!(R::BYTES, stream.record_bytes(), "record type of {stream:?}");
        if records.is_empty() {
            return;
        }
        // One chunk per collected buffer; a buffer above the chunk limit (none of the default
        // pools comes near) is split.
        let widest = if R::BYTES == 0 { MAX_VARINT_BYTES } else { R::BYTES };
        let per_chunk = (MAX_CHUNK_PAYLOAD as usize / widest).max(1);
        for part in records.chunks(per_chunk) {
            // One copy here; the writer encodes the chunk from it.
            let mut images = self.buffer();
            images.clear();
            images.extend_from_slice(R::images(part));
            let head = Head { stream, lane, seq, record_bytes: R::BYTES, records: part.len() };
            self.queue(Job::Chunk { head, images, pack: R::pack_images });
        }
    }

    /// Seals `bytes`, the payload bytes of buffer `seq` of `lane` of a byte stream
    /// ([`RecordStream::Meta`], [`RecordStream::ArgsBin`]), as chunks of at most
    /// [`MAX_CHUNK_PAYLOAD`] bytes at the file's end. Bytes are not records: they count in
    /// [`Sealed::chunks`] and [`Sealed::bytes`] only. Nothing is written for no bytes, nor after a
    /// failed write.
    ///
    /// # Panics
    /// When `stream` is not a byte stream.
    pub fn append_bytes(&self, stream: RecordStream, lane: u32, seq: u32, bytes: &[u8]) {
        assert_eq!(stream.record_bytes(), 1, "{stream:?} is not a byte stream");
        for part in bytes.chunks(MAX_CHUNK_PAYLOAD as usize) {
            let mut images = self.buffer();
            images.clear();
            images.extend_from_slice(part);
            let head = Head { stream, lane, seq, record_bytes: 1, records: part.len() };
            self.queue(Job::Chunk { head, images, pack: u8::pack_images });
        }
    }

    /// A buffer to encode a chunk into: one the writer is done with, or a new one.
    fn buffer(&self) -> Vec<u8> {
        self.shared.pool.lock().unwrap_or_else(|p| p.into_inner()).pop().unwrap_or_default()
    }

    /// Hands `job` to the writer thread (nothing after a failed write, or once finished).
    fn queue(&self, job: Job) {
        // Relaxed: a hint to stop encoding; the writer drops what comes after a failure anyway.
        if self.shared.failed.load(Ordering::Relaxed) {
            return;
        }
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(tx) = tx {
            // A writer that is gone (it panicked) leaves the error to `finish`.
            let _ = tx.send(job);
        }
    }

    /// Waits until every chunk appended before this call is on the file (or dropped after a
    /// failed write).
    pub fn flush(&self) {
        let (ack, done) = std::sync::mpsc::sync_channel(1);
        self.queue(Job::Flush(ack));
        // Answered by the writer, or an error when no writer holds the sender (finished).
        let _ = done.recv();
    }

    /// What was sealed: every chunk appended before this call ([`flush`](Self::flush)).
    pub fn sealed(&self) -> Sealed {
        self.flush();
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner()).sealed
    }

    /// Ends the recording: waits for the writer to write every chunk appended, syncs the file
    /// and returns its size and hash for the manifest. Appends after it write nothing.
    ///
    /// # Errors
    /// The first failed write, or the sync.
    pub fn finish(&self) -> Result<Written, RecorderError> {
        let (w, file) = self.finish_unsynced()?;
        file.sync_all()
            .map_err(|source| RecorderError::Write { path: self.path.clone(), source })?;
        Ok(w)
    }

    /// [`finish`](Self::finish) but for the sync: returns the file's size and hash and a handle
    /// of the file, whose fsync is the caller's (with the run's last files, before its manifest
    /// says it is complete: [`OutDir::record_unsynced`](crate::OutDir::record_unsynced)).
    ///
    /// # Errors
    /// The first failed write, or duplicating the file's handle.
    pub fn finish_unsynced(&self) -> Result<(Written, File), RecorderError> {
        self.stop();
        let mut s = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let err = |source| RecorderError::Write { path: self.path.clone(), source };
        if let Some(e) = s.error.take() {
            return Err(err(e));
        }
        let file = s.file.try_clone().map_err(err)?;
        Ok((Written { bytes: s.sealed.bytes, xxh3: s.hash.digest() }, file))
    }

    /// Closes the writer's queue and joins it once it wrote what was queued.
    fn stop(&self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        let writer = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = writer {
            if w.join().is_err() {
                let mut s = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
                s.error
                    .get_or_insert_with(|| std::io::Error::other("the recorder's writer panicked"));
            }
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The writer thread: each queued chunk encoded and appended in order, its images' buffer given
/// back.
fn write_loop(shared: &Shared, rx: Receiver<Job>) {
    set_nice(WRITER_NICE);
    let mut buf = Vec::new();
    for job in rx {
        match job {
            Job::Chunk { head, images, pack } => {
                encode_head(
                    &mut buf,
                    head.stream,
                    head.lane,
                    head.seq,
                    head.record_bytes,
                    head.records,
                );
                pack(&images, &mut buf);
                seal_payload(&mut buf);
                // Bytes are not records.
                let records = if head.record_bytes == 1 { 0 } else { head.records as u64 };
                let mut s = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                if s.error.is_none() {
                    if let Err(e) = s.seal(&buf, records) {
                        s.error = Some(e);
                        // Relaxed: see `Recorder::queue`.
                        shared.failed.store(true, Ordering::Relaxed);
                    }
                }
                drop(s);
                let mut pool = shared.pool.lock().unwrap_or_else(|p| p.into_inner());
                if pool.len() < QUEUED_CHUNKS {
                    pool.push(images);
                }
            }
            Job::Flush(ack) => {
                let _ = ack.send(());
            }
        }
    }
}

/// Lowers this thread's priority to `nice` (Linux; a failure leaves it).
fn set_nice(nice: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid and setpriority take no pointers; PRIO_PROCESS with a thread id changes
    // only that thread's nice value.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State").field("sealed", &self.sealed).finish_non_exhaustive()
    }
}

impl State {
    /// Appends one encoded chunk (`buf`, holding `records`) and syncs it per the policy.
    fn seal(&mut self, buf: &[u8], records: u64) -> std::io::Result<()> {
        if self.kill_after.is_some_and(|n| self.sealed.chunks >= n) {
            self.kill(buf);
        }
        self.file.write_all(buf)?;
        self.hash.update(buf);
        self.sealed.chunks += 1;
        self.sealed.records += records;
        // Release: counted once whole on the file; pairs with `sealed_in_process`.
        SEALED_IN_PROCESS[1].fetch_add(records, Ordering::Release);
        // Release: as above.
        SEALED_IN_PROCESS[0].fetch_add(1, Ordering::Release);
        self.sealed.bytes += buf.len() as u64;
        self.kick();
        if let FsyncPolicy::Every(n) = self.policy {
            self.since_sync += 1;
            if self.since_sync >= n.max(1) {
                self.since_sync = 0;
                self.file.sync_data()?;
                self.sealed.syncs += 1;
            }
        }
        Ok(())
    }

    /// Starts the writeback of every [`WRITEBACK_CHUNK_BYTES`](crate::sink::WRITEBACK_CHUNK_BYTES)
    /// sealed (Linux `sync_file_range(SYNC_FILE_RANGE_WRITE)`, which does not wait for it), so
    /// the disk writes the profile while the run runs and the sync at its end finds little left
    /// (the storm with all five: 19 MB).
    fn kick(&mut self) {
        let pending = self.sealed.bytes - self.kicked;
        if pending < crate::sink::WRITEBACK_CHUNK_BYTES {
            return;
        }
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let (off, len) = (self.kicked as libc::off64_t, pending as libc::off64_t);
            // SAFETY: sync_file_range takes no pointers; the descriptor is this open file's.
            let _ = unsafe {
                libc::sync_file_range(self.file.as_raw_fd(), off, len, libc::SYNC_FILE_RANGE_WRITE)
            };
        }
        self.kicked = self.sealed.bytes;
    }

    /// The crash test hook ([`KILL_AFTER_CHUNK_ENV`]): half of `next` goes to the file (a torn
    /// tail), then the process is killed.
    fn kill(&mut self, next: &[u8]) -> ! {
        let _ = self.file.write_all(&next[..next.len() / 2]);
        eprintln!(
            "ferry: recorder: killed after {} sealed chunks, {} records",
            self.sealed.chunks, self.sealed.records
        );
        // SAFETY: `raise` has no memory-safety preconditions; SIGKILL ends the process here.
        unsafe { libc::raise(libc::SIGKILL) };
        std::process::abort()
    }
}

/// Encodes one chunk of `records` into `buf` (cleared first): what the writer thread makes of
/// their images.
#[cfg(test)]
pub(crate) fn encode_chunk<R: Packed>(
    buf: &mut Vec<u8>,
    stream: RecordStream,
    lane: u32,
    seq: u32,
    records: &[R],
) {
    encode_head(buf, stream, lane, seq, R::BYTES, records.len());
    R::pack_all(records, buf);
    seal_payload(buf);
}

/// Fills the payload's length (known once it is packed: varints) and the checksum of the
/// encoded chunk in `buf`.
fn seal_payload(buf: &mut [u8]) {
    let payload = (buf.len() - CHUNK_HEADER_BYTES) as u32;
    buf[4..8].copy_from_slice(&payload.to_le_bytes());
    seal_sum(buf);
}

/// Clears `buf` and writes a chunk header for `records` records of `record_bytes` each (0: LEB128
/// words, whose payload length the caller fills in), its checksum left 0 ([`seal_sum`] fills it
/// once the payload follows).
fn encode_head(
    buf: &mut Vec<u8>,
    stream: RecordStream,
    lane: u32,
    seq: u32,
    record_bytes: usize,
    records: usize,
) {
    buf.clear();
    let payload = (records * record_bytes) as u32;
    buf.reserve(CHUNK_HEADER_BYTES + payload as usize);
    buf.extend_from_slice(&CHUNK_MAGIC.to_le_bytes());
    buf.extend_from_slice(&payload.to_le_bytes());
    buf.extend_from_slice(&(stream as u16).to_le_bytes());
    buf.extend_from_slice(&(record_bytes as u16).to_le_bytes());
    buf.extend_from_slice(&lane.to_le_bytes());
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend_from_slice(&(records as u32).to_le_bytes());
    buf.extend_from_slice(&[0; 8]);
}

/// Fills the checksum of the encoded chunk in `buf` (header, then payload).
fn seal_sum(buf: &mut [u8]) {
    let sum = chunk_sum(&buf[..24], &buf[CHUNK_HEADER_BYTES..]);
    buf[24..32].copy_from_slice(&sum.to_le_bytes());
}

/// A chunk's checksum: XXH3-64 of its header's first 24 bytes, then its payload.
pub(crate) fn chunk_sum(head: &[u8], payload: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(head);
    h.update(payload);
    h.digest()
}

#[cfg(test)]
#[path = "recorder_tests.rs"]
mod tests;
