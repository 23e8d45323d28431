//! Reading the native profile ([`RECORD_FILE`](super::recorder::RECORD_FILE)) by the recovery
//! rule: every sealed chunk, up to the first one that is not whole and right; the rest is the
//! torn tail.
use std::collections::BTreeMap;
use std::path::PathBuf;

use ferry_fs::{Dir, FsError};

use super::recorder::{
    chunk_sum, varints_ok, Packed, RecordStream, CHUNK_HEADER_BYTES, CHUNK_MAGIC,
    FILE_HEADER_BYTES, FILE_MAGIC, MAX_CHUNK_PAYLOAD, RECORD_FORMAT,
};

/// Why a native profile could not be read at all (a torn tail is not an error: it is counted).
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// Opening or reading the file (a link, a FIFO, over the limit, …).
    #[error("reading the native profile")]
    Read(#[source] FsError),
    /// The file does not start with the native profile's header.
    #[error("{} is not a ferry native profile (no FERRYREC header)", .0.display())]
    NotARecording(PathBuf),
    /// A format this ferry does not read.
    #[error("{} is native profile format {found}; this ferry reads format {RECORD_FORMAT}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// Its format.
        found: u32,
    },
}

/// One sealed chunk of a [`Recording`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkInfo {
    /// What it holds.
    pub stream: RecordStream,
    /// The lane its buffer came from.
    pub lane: u32,
    /// The buffer's sequence number in its lane.
    pub seq: u32,
    /// Records in it.
    pub records: u32,
    /// Where its payload starts in the file.
    pub offset: u64,
    /// Bytes of its payload.
    pub bytes: u32,
}

/// What a native profile holds by the recovery rule.
#[derive(Debug, Default)]
pub struct Recording {
    /// The sealed chunks, in file order.
    pub chunks: Vec<ChunkInfo>,
    /// Bytes after the last sealed chunk (a chunk a crash tore), ignored.
    pub torn_bytes: u64,
    /// Bytes of the file.
    pub bytes: u64,
    data: Vec<u8>,
}

impl Recording {
    /// Records of `stream` over every chunk and lane.
    pub fn count(&self, stream: RecordStream) -> u64 {
        self.chunks.iter().filter(|c| c.stream == stream).map(|c| u64::from(c.records)).sum()
    }

    /// Records of every device record stream (the bytes of [`RecordStream::Meta`] and
    /// [`RecordStream::ArgsBin`] left out).
    pub fn total(&self) -> u64 {
        self.chunks
            .iter()
            .filter(|c| !matches!(c.stream, RecordStream::Meta | RecordStream::ArgsBin))
            .map(|c| u64::from(c.records))
            .sum()
    }

    /// Records of `stream` per lane.
    pub fn per_lane(&self, stream: RecordStream) -> BTreeMap<u32, u64> {
        let mut m = BTreeMap::new();
        for c in self.chunks.iter().filter(|c| c.stream == stream) {
            *m.entry(c.lane).or_insert(0) += u64::from(c.records);
        }
        m
    }

    /// The payload of chunk `c` (one of [`chunks`](Self::chunks)) as stored: its records
    /// packed (a byte stream's bytes, a word stream's LEB128 words).
    pub fn payload(&self, c: &ChunkInfo) -> &[u8] {
        let at = c.offset as usize;
        &self.data[at..at + c.bytes as usize]
    }

    /// The records of chunk `c` (one of [`chunks`](Self::chunks)).
    ///
    /// # Panics
    /// When `R` is not `c`'s record type (its size differs).
    pub fn chunk_records<R: Packed>(&self, c: &ChunkInfo) -> Vec<R> {
        assert_eq!(R::BYTES, c.stream.record_bytes(), "record type of {:?}", c.stream);
        R::unpack_all(self.payload(c), c.records as usize)
    }

    /// Every record of `stream` as `(lane, seq, record)`, in file order.
    ///
    /// # Panics
    /// When `R` is not `stream`'s record type (its size differs).
    pub fn records<R: Packed + 'static>(
        &self,
        stream: RecordStream,
    ) -> impl Iterator<Item = (u32, u32, R)> + '_ {
        assert_eq!(R::BYTES, stream.record_bytes(), "record type of {stream:?}");
        self.chunks.iter().filter(move |c| c.stream == stream).flat_map(move |c| {
            let records: Vec<R> = self.chunk_records(c);
            records.into_iter().map(move |r| (c.lane, c.seq, r))
        })
    }
}

/// Reads the native profile `rel` in `dir`: opened through the handle without following a link,
/// a regular file, read no further than `limit` bytes.
///
/// # Errors
/// [`RecordingError::Read`], and as [`read_recording_bytes`].
pub fn read_recording(dir: &Dir, rel: &str, limit: u64) -> Result<Recording, RecordingError> {
    let bytes = dir.read(rel, limit).map_err(RecordingError::Read)?;
    read_recording_bytes(dir.join(rel), bytes)
}

/// The [`Recording`] of a native profile's bytes (`path` names it in errors), by the recovery
/// rule.
///
/// # Errors
/// [`RecordingError::NotARecording`] without the file header (a file shorter than the header
/// is a recording of nothing, all torn), [`RecordingError::Format`] for another format.
pub fn read_recording_bytes(path: PathBuf, data: Vec<u8>) -> Result<Recording, RecordingError> {
    let len = data.len();
    if len < FILE_HEADER_BYTES {
        if !FILE_MAGIC.starts_with(&data[..len.min(FILE_MAGIC.len())]) {
            return Err(RecordingError::NotARecording(path));
        }
        return Ok(Recording { torn_bytes: len as u64, bytes: len as u64, ..Recording::default() });
    }
    if &data[..8] != FILE_MAGIC {
        return Err(RecordingError::NotARecording(path));
    }
    let found = u32::from_le_bytes(data[8..12].try_into().unwrap_or_default());
    if found != RECORD_FORMAT {
        return Err(RecordingError::Format { path, found });
    }
    let mut chunks = Vec::new();
    let mut at = FILE_HEADER_BYTES;
    while let Some((c, next)) = chunk_at(&data, at) {
        chunks.push(c);
        at = next;
    }
    Ok(Recording { chunks, torn_bytes: (len - at) as u64, bytes: len as u64, data })
}

/// The sealed chunk at `at` and where the next starts, or `None` where the sealed chunks end.
fn chunk_at(data: &[u8], at: usize) -> Option<(ChunkInfo, usize)> {
    let head = data.get(at..at.checked_add(CHUNK_HEADER_BYTES)?)?;
    let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().unwrap_or_default());
    let u16_at = |i: usize| u16::from_le_bytes(head[i..i + 2].try_into().unwrap_or_default());
    if u32_at(0) != CHUNK_MAGIC {
        return None;
    }
    let payload = u32_at(4);
    let stream = RecordStream::from_id(u16_at(8))?;
    let record_bytes = usize::from(u16_at(10));
    let records = u32_at(20);
    // Every size is checked against the format and what the file holds before it is used.
    if payload > MAX_CHUNK_PAYLOAD
        || record_bytes != stream.record_bytes()
        || (record_bytes > 0 && (records as usize).checked_mul(record_bytes)? != payload as usize)
        || (record_bytes == 0 && payload < records)
    {
        return None;
    }
    let start = at + CHUNK_HEADER_BYTES;
    let end = start.checked_add(payload as usize)?;
    let body = data.get(start..end)?;
    let sum = u64::from_le_bytes(head[24..32].try_into().unwrap_or_default());
    if chunk_sum(&head[..24], body) != sum
        || (record_bytes == 0 && !varints_ok(body, records as usize))
    {
        return None;
    }
    let (lane, seq) = (u32_at(12), u32_at(16));
    let c = ChunkInfo { stream, lane, seq, records, offset: start as u64, bytes: payload };
    Some((c, end))
}
