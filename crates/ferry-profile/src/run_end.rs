//! How a run's process ended when it ended in the middle of the run: the *end record*
//! ([`RUN_END_FILE`]) a run directory holds beside its native profile.
//!
//! `ferry run` creates the file empty before the chip starts and keeps its descriptor; if the
//! process is ended during the run by a signal (a kernel's NULL dereference, `abort()`, stack
//! overflow, Ctrl-C, SIGTERM) or by a call to `exit()`, its handler writes one record there with
//! one `pwrite` and nothing else: the cause, the faulting core, and per core the task that had
//! started and not ended, with its kernel's name. A run that ends well removes the empty file.
//! An empty file in an unfinished run means the process was ended without a chance to say why
//! (SIGKILL, a power cut).
//!
//! [`EndWriter`] encodes a record into a caller's buffer without allocating (a signal handler
//! calls it); [`read_run_end`] reads one back, bounded.
//!
//! # Layout (little-endian)
//!
//! | bytes | what |
//! |---|---|
//! | 8 | `FERRYEND` |
//! | 4 | format [`RUN_END_FORMAT`] |
//! | 4 | payload bytes |
//! | 8 | XXH3-64 of the payload |
//! | 4 | cause: 1 a signal, 2 `exit()` |
//! | 4 | the signal's number, or the status passed to `exit()` (i32) |
//! | 4 | the signal's `si_code` (i32; 0 for `exit()`) |
//! | 4 | flags: 1 the fault address is known, 2 the faulting core is known, 4 the fault lies in the faulting core's stack (a stack overflow) |
//! | 8 | fault address |
//! | 4 | faulting core |
//! | 4 | unfinished tasks `n` (at most [`MAX_UNFINISHED`]) |
//! | 8 | chunks the process had sealed in its native profiles when it ended |
//! | 8 | records in them |
//! | n × 48 | core (u32), kernel id (u32), task id (u64), kernel name (32 bytes, NUL-padded) |
//!
//! # Examples
//! ```
//! use ferry_profile::run_end::{decode_run_end, EndCause, EndWriter};
//! let mut buf = [0u8; 512];
//! let mut w = EndWriter::new(&mut buf, EndCause::Signal { signal: 11, code: 1 });
//! w.fault(Some(3), Some(0), false);
//! assert!(w.push(3, 256, 0x2a, b"segv"));
//! let n = w.finish();
//! let end = decode_run_end(&buf[..n]).unwrap().unwrap();
//! assert_eq!(end.describe(), "SIGSEGV (address 0x0) on core 3");
//! assert_eq!(end.unfinished[0].kernel, "segv");
//! ```
use std::path::PathBuf;

use ferry_fs::{Dir, FsError};
use serde::Serialize;
use xxhash_rust::xxh3::xxh3_64;

/// File name of the end record in a run's directory.
pub const RUN_END_FILE: &str = "run-end.ferry";
/// Format version of the end record.
pub const RUN_END_FORMAT: u32 = 1;
const MAGIC: &[u8; 8] = b"FERRYEND";
const HEAD: usize = 24;
const FIXED: usize = 48;
const ENTRY: usize = 48;
/// Most unfinished tasks one record holds (one per core of the largest chip, with room).
pub const MAX_UNFINISHED: usize = 256;
/// The most bytes an end record takes: the buffer a writer needs, the most a reader reads.
pub const MAX_RUN_END_BYTES: usize = HEAD + FIXED + ENTRY * MAX_UNFINISHED;

const FLAG_ADDR: u32 = 1;
const FLAG_CORE: u32 = 2;
const FLAG_STACK: u32 = 4;

/// What ended the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum EndCause {
    /// A signal (its number, and its `si_code`: positive when the kernel raised it for a
    /// fault, zero or negative when a process or `abort()` sent it).
    Signal {
        /// The signal's number.
        signal: i32,
        /// Its `si_code`.
        code: i32,
    },
    /// A call to `exit()` during the run (by a kernel, or a library it called).
    Exit {
        /// The status it passed (`ferry run` exits non-zero whatever it was).
        status: i32,
    },
}

/// A task that had started on a core and not ended when the process ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnfinishedTask {
    /// The core (the worker index every ferry command prints).
    pub core: u32,
    /// The task's id, `0x`-hex as every ferry command prints it.
    #[serde(serialize_with = "hex")]
    pub task: u64,
    /// The kernel's id.
    pub kernel_id: u32,
    /// The kernel's name (`id N` when the run did not know it).
    pub kernel: String,
}

fn hex<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:#x}"))
}

/// An end record, read back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EndRecord {
    /// What ended the process.
    pub cause: EndCause,
    /// The cause's name: `SIGSEGV`, `exit(0)`.
    pub name: String,
    /// The faulting address of a fault, when the signal carries one.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "opt_hex")]
    pub fault_address: Option<u64>,
    /// The core whose thread took the signal or called `exit()`, when it was a core's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core: Option<u32>,
    /// The fault lies in the faulting core's stack: the kernel overflowed it.
    pub stack_overflow: bool,
    /// The task the faulting core was running (its entry of `unfinished`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<UnfinishedTask>,
    /// Per core, the task that had started and not ended, by core.
    pub unfinished: Vec<UnfinishedTask>,
    /// Chunks the process had sealed in its native profiles when it ended (the native profile
    /// holds at least these: chunks sealed after the record was written, while the process
    /// ended, are there too).
    pub sealed_chunks: u64,
    /// Records in them.
    pub sealed_records: u64,
}

fn opt_hex<S: serde::Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => hex(v, s),
        None => s.serialize_none(),
    }
}

impl EndRecord {
    /// One line: `SIGSEGV (address 0x0) on core 3`, `exit(0) on core 5`, `SIGINT`.
    pub fn describe(&self) -> String {
        let mut s = self.name.clone();
        if self.stack_overflow {
            s.push_str(" (stack overflow)");
        } else if let Some(a) = self.fault_address {
            s.push_str(&format!(" (address {a:#x})"));
        }
        if let Some(c) = self.core {
            s.push_str(&format!(" on core {c}"));
        }
        s
    }
}

/// The name of signal `sig` (`SIGSEGV`), or `signal N`.
pub fn signal_name(sig: i32) -> String {
    signal_str(sig).map_or_else(|| format!("signal {sig}"), str::to_string)
}

/// The name of signal `sig` when it is one a run's end names (allocates nothing: a signal
/// handler calls it).
pub fn signal_str(sig: i32) -> Option<&'static str> {
    Some(match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGABRT => "SIGABRT",
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGKILL => "SIGKILL",
        _ => return None,
    })
}

/// Encodes one end record into a caller's buffer, allocating nothing and calling nothing that
/// is not async-signal-safe: a signal handler's writer.
#[derive(Debug)]
pub struct EndWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
    n: u32,
}

impl<'a> EndWriter<'a> {
    /// A record of `cause` in `buf`; `buf` shorter than the fixed part writes nothing
    /// ([`EndWriter::finish`] returns 0).
    pub fn new(buf: &'a mut [u8], cause: EndCause) -> EndWriter<'a> {
        if buf.len() < HEAD + FIXED {
            return EndWriter { buf, len: 0, n: 0 };
        }
        buf[..HEAD + FIXED].fill(0);
        buf[..8].copy_from_slice(MAGIC);
        put(buf, 8, &RUN_END_FORMAT.to_le_bytes());
        let (kind, value, code) = match cause {
            EndCause::Signal { signal, code } => (1u32, signal, code),
            EndCause::Exit { status } => (2, status, 0),
        };
        put(buf, HEAD, &kind.to_le_bytes());
        put(buf, HEAD + 4, &value.to_le_bytes());
        put(buf, HEAD + 8, &code.to_le_bytes());
        EndWriter { buf, len: HEAD + FIXED, n: 0 }
    }

    /// Where the fault was: the core whose thread took it, its address, and whether that
    /// address lies in the core's stack.
    pub fn fault(&mut self, core: Option<u32>, addr: Option<u64>, in_stack: bool) {
        if self.len == 0 {
            return;
        }
        let mut flags = 0;
        if let Some(a) = addr {
            flags |= FLAG_ADDR;
            put(self.buf, HEAD + 16, &a.to_le_bytes());
        }
        if let Some(c) = core {
            flags |= FLAG_CORE;
            put(self.buf, HEAD + 24, &c.to_le_bytes());
        }
        if in_stack {
            flags |= FLAG_STACK;
        }
        put(self.buf, HEAD + 12, &flags.to_le_bytes());
    }

    /// Adds core `core`'s unfinished task `task` of kernel `kernel` named `name` (cut to 31
    /// bytes). `false` when the buffer or [`MAX_UNFINISHED`] is full (nothing added).
    pub fn push(&mut self, core: u32, kernel: u32, task: u64, name: &[u8]) -> bool {
        if self.len == 0 || self.n as usize >= MAX_UNFINISHED || self.len + ENTRY > self.buf.len() {
            return false;
        }
        let at = self.len;
        put(self.buf, at, &core.to_le_bytes());
        put(self.buf, at + 4, &kernel.to_le_bytes());
        put(self.buf, at + 8, &task.to_le_bytes());
        let name = &name[..name.len().min(31)];
        self.buf[at + 16..at + ENTRY].fill(0);
        put(self.buf, at + 16, name);
        self.len += ENTRY;
        self.n += 1;
        true
    }

    /// How many chunks and records the process had sealed in its native profiles.
    pub fn sealed(&mut self, chunks: u64, records: u64) {
        if self.len != 0 {
            put(self.buf, HEAD + 32, &chunks.to_le_bytes());
            put(self.buf, HEAD + 40, &records.to_le_bytes());
        }
    }

    /// Seals the record (its count, length and checksum) and returns its bytes' length.
    pub fn finish(self) -> usize {
        if self.len == 0 {
            return 0;
        }
        put(self.buf, HEAD + 28, &self.n.to_le_bytes());
        let payload = (self.len - HEAD) as u32;
        put(self.buf, 12, &payload.to_le_bytes());
        let sum = xxh3_64(&self.buf[HEAD..self.len]);
        put(self.buf, 16, &sum.to_le_bytes());
        self.len
    }
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

/// Why an end record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum EndRecordError {
    /// Opening or reading the file (a link, not a regular file, over the limit).
    #[error("reading the run's end record")]
    Read(#[source] FsError),
    /// The bytes are not a whole, right end record.
    #[error("{} is not a whole end record ({why})", path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: &'static str,
    },
}

/// The end record in `dir` ([`RUN_END_FILE`], through the handle, never through a link, read no
/// further than [`MAX_RUN_END_BYTES`]): `None` when there is no such file or it is empty (the
/// process ended without a chance to say why, or the run is still running).
///
/// # Errors
/// [`EndRecordError::Read`], [`EndRecordError::Damaged`].
pub fn read_run_end(dir: &Dir) -> Result<Option<EndRecord>, EndRecordError> {
    if dir.stat(RUN_END_FILE).map_err(EndRecordError::Read)?.is_none() {
        return Ok(None);
    }
    let bytes = dir.read(RUN_END_FILE, MAX_RUN_END_BYTES as u64).map_err(EndRecordError::Read)?;
    decode_run_end(&bytes)
        .map_err(|why| EndRecordError::Damaged { path: dir.join(RUN_END_FILE), why })
}

/// The end record of `b`: `Ok(None)` for no bytes, `Err` with what is wrong for bytes that are
/// not one whole, right record.
///
/// # Errors
/// What is wrong, in words.
pub fn decode_run_end(b: &[u8]) -> Result<Option<EndRecord>, &'static str> {
    if b.is_empty() {
        return Ok(None);
    }
    if b.len() < HEAD + FIXED || &b[..8] != MAGIC {
        return Err("no FERRYEND header");
    }
    if u32_at(b, 8) != RUN_END_FORMAT {
        return Err("another format");
    }
    let payload = u32_at(b, 12) as usize;
    if payload < FIXED || HEAD + payload != b.len() {
        return Err("its length is not the file's");
    }
    if xxh3_64(&b[HEAD..]) != u64_at(b, 16) {
        return Err("its checksum is wrong");
    }
    let (kind, value, code) = (u32_at(b, HEAD), u32_at(b, HEAD + 4) as i32, u32_at(b, HEAD + 8));
    let cause = match kind {
        1 => EndCause::Signal { signal: value, code: code as i32 },
        2 => EndCause::Exit { status: value },
        _ => return Err("an unknown cause"),
    };
    let flags = u32_at(b, HEAD + 12);
    let n = u32_at(b, HEAD + 28) as usize;
    if n > MAX_UNFINISHED || FIXED + n * ENTRY != payload {
        return Err("its task count is not its length");
    }
    let unfinished: Vec<UnfinishedTask> = (0..n)
        .map(|i| {
            let at = HEAD + FIXED + i * ENTRY;
            let kernel_id = u32_at(b, at + 4);
            let raw = &b[at + 16..at + ENTRY];
            let name = &raw[..raw.iter().position(|&c| c == 0).unwrap_or(raw.len())];
            let kernel = match std::str::from_utf8(name) {
                Ok(s) if !s.is_empty() => s.to_string(),
                _ => format!("id {kernel_id}"),
            };
            UnfinishedTask { core: u32_at(b, at), task: u64_at(b, at + 8), kernel_id, kernel }
        })
        .collect();
    let core = (flags & FLAG_CORE != 0).then(|| u32_at(b, HEAD + 24));
    let name = match cause {
        EndCause::Signal { signal, .. } => signal_name(signal),
        EndCause::Exit { status } => format!("exit({status})"),
    };
    Ok(Some(EndRecord {
        cause,
        name,
        fault_address: (flags & FLAG_ADDR != 0).then(|| u64_at(b, HEAD + 16)),
        core,
        stack_overflow: flags & FLAG_STACK != 0,
        task: core.and_then(|c| unfinished.iter().find(|t| t.core == c).cloned()),
        unfinished,
        sealed_chunks: u64_at(b, HEAD + 32),
        sealed_records: u64_at(b, HEAD + 40),
    }))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(cause: EndCause, tasks: &[(u32, u32, u64, &[u8])]) -> Vec<u8> {
        let mut buf = vec![0u8; MAX_RUN_END_BYTES];
        let mut w = EndWriter::new(&mut buf, cause);
        w.fault(Some(tasks.first().map_or(0, |t| t.0)), None, false);
        for &(c, k, t, n) in tasks {
            assert!(w.push(c, k, t, n));
        }
        let n = w.finish();
        buf.truncate(n);
        buf
    }

    #[test]
    fn a_record_reads_back_with_the_faulting_cores_task() {
        let b = record(EndCause::Exit { status: 0 }, &[(5, 257, 0x40, b"quit"), (7, 3, 1, b"")]);
        let e = decode_run_end(&b).unwrap().unwrap();
        assert_eq!(e.describe(), "exit(0) on core 5");
        assert_eq!(e.task.as_ref().map(|t| (t.task, t.kernel.as_str())), Some((0x40, "quit")));
        assert_eq!(e.unfinished[1].kernel, "id 3", "an empty name reads as the id");
        let j = serde_json::to_value(&e).unwrap();
        assert_eq!(j["cause"]["kind"], "exit");
        assert_eq!(j["task"]["task"], "0x40");
    }

    #[test]
    fn a_full_writer_refuses_more_and_a_short_buffer_writes_nothing() {
        let mut buf = vec![0u8; HEAD + FIXED + ENTRY];
        let mut w = EndWriter::new(&mut buf, EndCause::Signal { signal: 6, code: -6 });
        assert!(w.push(0, 1, 2, b"k"));
        assert!(!w.push(1, 1, 3, b"k"));
        assert_eq!(w.finish(), buf.len());
        let mut short = [0u8; 8];
        assert_eq!(EndWriter::new(&mut short, EndCause::Exit { status: 1 }).finish(), 0);
    }

    /// The file is read through the directory's handle: a link under its name is refused, not
    /// followed, and so is a file longer than the largest record.
    #[test]
    fn a_planted_link_or_an_oversized_file_is_refused() {
        let d = std::env::temp_dir().join(format!("ferry-run-end-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let h = Dir::open(&d).unwrap();
        assert!(read_run_end(&h).unwrap().is_none(), "no file");
        std::os::unix::fs::symlink("/etc/passwd", d.join(RUN_END_FILE)).unwrap();
        assert!(matches!(read_run_end(&h), Err(EndRecordError::Read(_))));
        std::fs::remove_file(d.join(RUN_END_FILE)).unwrap();
        std::fs::write(d.join(RUN_END_FILE), vec![0u8; MAX_RUN_END_BYTES + 1]).unwrap();
        assert!(read_run_end(&h).is_err());
        std::fs::write(d.join(RUN_END_FILE), b"").unwrap();
        assert!(read_run_end(&h).unwrap().is_none(), "an empty record: the cause is unknown");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Every byte of a record is covered: a flipped byte, a cut or a longer file is refused.
    #[test]
    fn a_damaged_record_is_refused() {
        let b = record(EndCause::Signal { signal: 11, code: 1 }, &[(1, 256, 9, b"segv")]);
        assert!(decode_run_end(&[]).unwrap().is_none());
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x10;
            assert!(decode_run_end(&d).is_err(), "byte {i} flipped");
        }
        assert!(decode_run_end(&b[..b.len() - 1]).is_err());
        let mut long = b.clone();
        long.push(0);
        assert!(decode_run_end(&long).is_err());
    }
}
