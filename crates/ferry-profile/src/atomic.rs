//! Atomic file replacement: temp file in the target's directory, fsync, rename, fsync the directory.
//!
//! The writer a file is filled through buffers [`WRITE_BUFFER_BYTES`](super::WRITE_BUFFER_BYTES)
//! (serde's JSON serializer and the CSV writer issue one small write per token; with a large
//! buffer they cost a copy, not a system call; a file past one buffer goes on with direct I/O,
//! [`super::sink`]) and counts and
//! hashes (XXH3-64) the bytes that reach the file, so callers learn the size and content hash
//! they wrote (for a run's manifest) without reading it back.
//!
//! Everything goes through a [`Dir`] handle (`ferry-fs`): the target's directory is opened once
//! (checked for writing: owned by this user or root, not writable by every user without the
//! sticky bit), each directory below it is entered without following a link, and the temp file
//! is created with `O_CREAT|O_EXCL|O_NOFOLLOW` and renamed relative to the handle, so a link
//! another user planted under a temp name, a target name or a subdirectory name is never
//! written through. Temp files are named `.<name>.tmp.<pid>.<16 hex digits>`, the digits
//! unpredictable: in the target's directory (so the rename stays within one filesystem), and
//! recognisable ([`temp_owner`]) so a later run can remove what a killed one left behind.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Instant;

use ferry_fs::{Dir, FsError};
use xxhash_rust::xxh3::Xxh3;

use super::sink::FileSink;
#[cfg(test)]
use super::sink::{WRITEBACK_CHUNK_BYTES, WRITE_BUFFER_BYTES};

/// This process's temp files being written, and whether writing was halted.
struct Temps {
    halted: bool,
    live: Vec<(Dir, String)>,
}

fn temps() -> std::sync::MutexGuard<'static, Temps> {
    static TEMPS: Mutex<Temps> = Mutex::new(Temps { halted: false, live: Vec::new() });
    TEMPS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Stops every later [`write_atomic`] of this process before it makes a temp file (each fails
/// with [`io::ErrorKind::Interrupted`]) and removes the temp files of the writes in progress
/// (those then fail at their rename, leaving their targets as they were). For a process that
/// is about to exit on a signal: afterwards the process leaves no temp file behind, and every
/// file under a final name is complete.
pub fn halt_writes() {
    let mut t = temps();
    t.halted = true;
    for (d, name) in t.live.drain(..) {
        let _ = d.remove_file(&name);
    }
}

/// Creates a temp file for `name` in `dir` and lists it, unless writing was halted (atomically
/// with [`halt_writes`]: a temp is either listed, and removed by a halt, or never made).
fn create_temp(dir: &Dir, name: &str) -> io::Result<(File, String)> {
    let mut t = temps();
    if t.halted {
        return Err(io::Error::new(io::ErrorKind::Interrupted, "writing was halted (a signal)"));
    }
    let (f, tmp) = dir.create_temp(name)?;
    t.live.push((dir.clone(), tmp.clone()));
    Ok((f, tmp))
}

fn unlist_temp(dir: &Dir, tmp: &str) {
    let mut t = temps();
    if let Some(i) = t.live.iter().position(|(d, n)| n == tmp && d.path() == dir.path()) {
        t.live.swap_remove(i);
    }
}

/// Removes the temp file unless disarmed (covers errors and panics inside the write closure).
struct TempGuard {
    dir: Dir,
    tmp: Option<String>,
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        if let Some(t) = self.tmp.take() {
            // Best effort: the temp name is ours alone, and a leftover is harmless to readers (it
            // never has the target's name).
            let _ = self.dir.remove_file(&t);
            unlist_temp(&self.dir, &t);
        }
    }
}

/// The process that made temp file `file_name` (a name [`write_atomic`] gives its temp files),
/// or `None` for any other name.
///
/// # Examples
/// ```
/// use ferry_profile::temp_owner;
/// assert_eq!(temp_owner(".deps.json.tmp.4242.7"), Some(4242));
/// assert_eq!(temp_owner(".deps.json.tmp.4242.9f3a00c2d1e8b7a6"), Some(4242));
/// assert_eq!(temp_owner("deps.json"), None);
/// assert_eq!(temp_owner(".deps.json.tmp.x.7"), None);
/// ```
pub fn temp_owner(file_name: &str) -> Option<u32> {
    let rest = file_name.strip_prefix('.')?;
    let (head, n) = rest.rsplit_once('.')?;
    let (head, pid) = head.rsplit_once('.')?;
    let ok = head.ends_with(".tmp")
        && head.len() > ".tmp".len()
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_hexdigit());
    if !ok {
        return None;
    }
    pid.parse().ok()
}

/// What [`write_atomic`] wrote: the new file's size and the XXH3-64 hash of its content.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Bytes in the file.
    pub bytes: u64,
    /// XXH3-64 (seed 0) of the file's bytes.
    pub xxh3: u64,
}

/// The writer [`write_atomic`] hands its closure: a
/// [`WRITE_BUFFER_BYTES`](super::WRITE_BUFFER_BYTES) buffer over the temp file (whose full
/// buffers go to the disk with direct I/O once the file outgrows one; see
/// [`set_direct_io`](super::set_direct_io)). A concrete type (not `dyn Write`), so a
/// serializer's many small writes inline into the buffer's copy.
pub struct AtomicWriter {
    inner: FileSink,
}

impl Write for AtomicWriter {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Opens the directory that holds `path` for writing, creating it where missing, and returns
/// it with `path`'s file name.
///
/// # Errors
/// As [`Dir::open_writable`]; a path without a file name.
pub fn parent_dir(path: &Path) -> Result<(Dir, String), FsError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| FsError::BadName { dir: dir.clone(), name: path.display().to_string() })?;
    Ok((Dir::open_writable(&dir, true)?, name.to_string()))
}

/// Writes `path` atomically: `write` fills a temp file beside it, which is flushed, fsynced and
/// renamed over `path`, then the directory is fsynced. Creates missing parent directories; the
/// directory is opened for writing as [`Dir::open_writable`] checks it. Returns the size and
/// content hash of the new `path`.
///
/// If `write` fails (or panics), the temp file is removed and `path` keeps its previous content
/// (or stays absent): a reader never sees a half-written file.
///
/// # Errors
///
/// Any I/O error of the steps above (a refused directory as [`FsError`] inside the
/// [`io::Error`]), or the error `write` returned.
///
/// # Examples
/// ```
/// use std::io::Write;
/// let dir = std::env::temp_dir().join(format!("ferry-atomic-doc-{}", std::process::id()));
/// let p = dir.join("out.txt");
/// assert_eq!(ferry_profile::write_atomic(&p, |w| w.write_all(b"ok")).unwrap().bytes, 2);
/// assert_eq!(std::fs::read(&p).unwrap(), b"ok");
/// let err = ferry_profile::write_atomic(&p, |w| {
///     w.write_all(b"half")?;
///     Err(std::io::Error::other("aborted"))
/// });
/// assert!(err.is_err());
/// assert_eq!(std::fs::read(&p).unwrap(), b"ok"); // untouched
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn write_atomic<F>(path: &Path, write: F) -> io::Result<Written>
where
    F: FnOnce(&mut AtomicWriter) -> io::Result<()>,
{
    let (dir, name) = parent_dir(path)?;
    write_atomic_in(&dir, &name, write)
}

/// [`write_atomic`] of `rel` (`/`-separated) below the directory handle `dir`: the
/// directories on the way are created where missing and entered without following a link.
///
/// # Errors
/// As [`write_atomic`].
pub fn write_atomic_in<F>(dir: &Dir, rel: &str, write: F) -> io::Result<Written>
where
    F: FnOnce(&mut AtomicWriter) -> io::Result<()>,
{
    let (written, staged) = write_staged(dir, rel, write)?;
    let d = staged.dir.clone();
    staged.commit()?;
    d.sync();
    Ok(written)
}

/// [`write_atomic_in`] of several files below `dir` at once, for a run's last files: each
/// `(rel, bytes)` is written to its temp file, then `also` (files written in place, such as the
/// native profile) and every temp file are fsynced, then each temp file is renamed over its
/// target, then each directory is fsynced once. Every file is as durable as with one
/// [`write_atomic_in`] each, for one directory fsync instead of one per file, and the
/// filesystem commits the files' fsyncs together. Returns each file's size and hash, in order.
///
/// # Errors
/// As [`write_atomic_in`]; after a failed fsync nothing is renamed (the temp files are
/// removed, the targets keep their content).
pub(crate) fn write_batch_in(
    dir: &Dir,
    files: &[(&str, &[u8])],
    also: &[File],
) -> io::Result<Vec<Written>> {
    let mut written = Vec::with_capacity(files.len());
    let mut staged = Vec::with_capacity(files.len());
    for (rel, bytes) in files {
        let (w, s) = write_staged(dir, rel, |w| w.write_all(bytes))?;
        written.push(w);
        staged.push(s);
    }
    for f in also {
        f.sync_all()?;
    }
    for s in &staged {
        s.file.sync_all()?;
    }
    let mut dirs: Vec<Dir> = Vec::new();
    for s in staged {
        if !dirs.iter().any(|d| d.path() == s.dir.path()) {
            dirs.push(s.dir.clone());
        }
        s.rename()?;
    }
    for d in &dirs {
        d.sync();
    }
    Ok(written)
}

/// A temp file whose bytes are complete and flushed, waiting for its fsync and its rename over
/// the target. Dropped uncommitted, it removes the temp file (the target keeps its content).
pub(crate) struct Staged {
    file: File,
    dir: Dir,
    tmp: String,
    name: String,
    guard: TempGuard,
}

impl Staged {
    /// fsync, then rename over the target. The directory's fsync is the caller's
    /// ([`Dir::sync`]), so that several renames into one directory share one.
    fn commit(self) -> io::Result<()> {
        self.file.sync_all()?;
        self.rename()
    }

    /// Renames the temp file (already fsynced) over the target.
    fn rename(mut self) -> io::Result<()> {
        self.dir.rename(&self.tmp, &self.name)?;
        self.guard.tmp = None;
        unlist_temp(&self.dir, &self.tmp);
        Ok(())
    }

    fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }
}

/// The directory of `rel` below `dir` (created where missing, entered without following a
/// link) and `rel`'s file name.
fn dir_of<'a>(dir: &Dir, rel: &'a str) -> Result<(Dir, &'a str), FsError> {
    match rel.rsplit_once('/') {
        Some((sub, name)) => Ok((dir.create_sub(sub)?, name)),
        None => Ok((dir.clone(), rel)),
    }
}

/// The first half of [`write_atomic`]: `write` fills a temp file beside `rel`, which is flushed
/// (its writeback started) but neither fsynced nor renamed.
fn write_staged<F>(dir: &Dir, rel: &str, write: F) -> io::Result<(Written, Staged)>
where
    F: FnOnce(&mut AtomicWriter) -> io::Result<()>,
{
    let (d, name) = dir_of(dir, rel)?;
    let (file, tmp) = create_temp(&d, name)?;
    let guard = TempGuard { dir: d.clone(), tmp: Some(tmp.clone()) };
    let mut w = AtomicWriter { inner: FileSink::new(file, super::sink::direct_io()) };
    write(&mut w)?;
    // The rest goes out, and the writeback of what went through the cache starts now, while
    // the file waits to commit.
    let f = w.inner.finish()?;
    let written = Written { bytes: f.bytes, xxh3: f.xxh3 };
    Ok((written, Staged { file: f.file, dir: d, tmp, name: name.to_string(), guard }))
}

/// When a [`Committer`] finished one file.
#[derive(Clone, Debug)]
pub(crate) struct Committed {
    /// The file.
    pub path: PathBuf,
    /// When its rename was done.
    pub at: Instant,
}

/// Commits atomic writes on a thread of its own, in the order they were handed over: each
/// temp file is fsynced and renamed over its target there, so the writer goes on producing the
/// next file while the disk catches up (a 90 MB output directory spends ~0.2 s in fsyncs, which
/// would otherwise stop its writers). Each directory is fsynced once, after its last rename.
///
/// Order is kept: a file handed over after another is never under its final name before it
/// (e.g. `args.bin` before the `args_dump.json` that names it). After the first failure nothing
/// more is renamed: the later files' temps are removed, their targets keep their content, and
/// [`failed`](Self::failed) tells the writers to start nothing new.
#[derive(Clone)]
pub(crate) struct Committer {
    tx: std::sync::mpsc::Sender<Staged>,
    failed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// What a [`Committer`]'s thread returns: the files it committed, and the first failure.
pub(crate) type CommitResult = (Vec<Committed>, Option<(PathBuf, io::Error)>);

impl Committer {
    /// A committer and the loop its thread runs (until every clone of the committer is
    /// dropped).
    pub(crate) fn new() -> (Committer, impl FnOnce() -> CommitResult + Send) {
        let (tx, rx) = std::sync::mpsc::channel::<Staged>();
        let failed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = failed.clone();
        let run = move || {
            let (mut done, mut err, mut dirs) = (Vec::new(), None, Vec::<Dir>::new());
            for s in rx {
                if err.is_some() {
                    // Dropping it removes its temp file.
                    continue;
                }
                let (path, dir) = (s.path(), s.dir.clone());
                match s.commit() {
                    Ok(()) => {
                        done.push(Committed { path, at: Instant::now() });
                        if !dirs.iter().any(|d| d.path() == dir.path()) {
                            dirs.push(dir);
                        }
                    }
                    Err(e) => {
                        // Relaxed: a hint to the writers; the result is joined.
                        flag.store(true, Ordering::Relaxed);
                        err = Some((path, e));
                    }
                }
            }
            for d in &dirs {
                d.sync();
            }
            (done, err)
        };
        (Committer { tx, failed }, run)
    }

    /// Writes the temp file of `rel` below `dir` with `write` and hands it over for its fsync
    /// and rename.
    ///
    /// # Errors
    /// Any I/O error of writing the temp file, or the error `write` returned (the temp file is
    /// then removed); [`io::ErrorKind::Other`] when the committer's thread has ended.
    pub(crate) fn write<F>(&self, dir: &Dir, rel: &str, write: F) -> io::Result<Written>
    where
        F: FnOnce(&mut AtomicWriter) -> io::Result<()>,
    {
        let (written, staged) = write_staged(dir, rel, write)?;
        self.tx.send(staged).map_err(|_| io::Error::other("the commit thread ended"))?;
        Ok(written)
    }

    /// Whether a commit failed (nothing more will be renamed).
    pub(crate) fn failed(&self) -> bool {
        // Relaxed: as in the commit loop.
        self.failed.load(Ordering::Relaxed)
    }
}

/// The XXH3-64 hash and size of what `r` reads, in bounded chunks (what [`write_atomic`]
/// reported when it wrote an unchanged file).
///
/// # Errors
/// Reading.
pub fn hash_reader(mut r: impl io::Read) -> io::Result<Written> {
    let mut buf = vec![0u8; 1 << 16];
    let (mut hash, mut bytes) = (Xxh3::new(), 0u64);
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hash.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok(Written { bytes, xxh3: hash.digest() })
}

/// The XXH3-64 hash and size of the regular file at `path` ([`hash_reader`]).
///
/// # Errors
/// Opening (a FIFO or device is refused) or reading the file.
pub fn hash_file(path: &Path) -> io::Result<Written> {
    hash_reader(ferry_fs::open_input(path, u64::MAX)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ferry-atomic-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn entries(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A writer that accepts `n` bytes and then fails, as a full disk would.
    struct FailAfter<'a> {
        inner: &'a mut dyn Write,
        left: usize,
    }

    impl Write for FailAfter<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.left == 0 {
                return Err(io::Error::other("disk full"));
            }
            let n = buf.len().min(self.left);
            self.left -= n;
            self.inner.write(&buf[..n])
        }
        fn flush(&mut self) -> io::Result<()> {
            self.inner.flush()
        }
    }

    /// The committer renames in hand-over order; after a failed commit it renames nothing more
    /// (the later files' temps are removed, their targets keep their content), says so to the
    /// writers, and reports the failing file.
    #[test]
    fn a_committer_keeps_order_and_stops_at_the_first_failure() {
        let bound = ferry_watchdog::bound("the committing thread");
        let d = tmpdir("committer");
        fs::create_dir_all(d.join("blocked")).unwrap();
        // A non-empty directory where "blocked" goes: its rename fails.
        fs::write(d.join("blocked").join("inside"), b"x").unwrap();
        fs::write(d.join("after"), b"old").unwrap();
        let (commit, run) = Committer::new();
        let t = std::thread::spawn(run);
        let dir = Dir::open_writable(&d, false).unwrap();
        for name in ["one", "two"] {
            commit.write(&dir, name, |w| w.write_all(name.as_bytes())).unwrap();
        }
        commit.write(&dir, "blocked", |w| w.write_all(b"new")).unwrap();
        // The committer reports the failed rename to the writers; a committer that never does
        // keeps this loop going until the liveness bound fails the test.
        bound.waiting_for("the committer to report the failed rename");
        while !commit.failed() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let n = commit.write(&dir, "after", |w| w.write_all(b"new")).unwrap();
        assert_eq!(n.bytes, 3);
        drop(commit);
        let (done, err) = t.join().unwrap();
        let names: Vec<_> = done.iter().map(|c| c.path.file_name().unwrap().to_owned()).collect();
        assert_eq!(names, ["one", "two"]);
        assert!(done[0].at <= done[1].at);
        let (path, _) = err.expect("the blocked rename fails");
        assert_eq!(path, d.join("blocked"));
        assert_eq!(fs::read(d.join("one")).unwrap(), b"one");
        assert_eq!(fs::read(d.join("after")).unwrap(), b"old");
        assert_eq!(entries(&d), ["after", "blocked", "one", "two"], "no temp file left");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn failing_mid_write_leaves_no_file_and_no_temp() {
        let _bound = ferry_watchdog::bound("the committing thread");
        let d = tmpdir("fail");
        let p = d.join("pmu.csv");
        let big = vec![b'x'; 100_000];
        let r = write_atomic(&p, |w| {
            let mut f = FailAfter { inner: w, left: 50_000 };
            f.write_all(&big)
        });
        assert!(r.is_err());
        assert!(entries(&d).is_empty(), "{:?}", entries(&d));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_count_is_the_size_of_the_file() {
        let _bound = ferry_watchdog::bound("the committing thread");
        let d = tmpdir("count");
        let p = d.join("big.bin");
        // Small writes spanning several buffer flushes, then one write larger than the buffer.
        let n = write_atomic(&p, |w| {
            for i in 0..(3 * WRITE_BUFFER_BYTES / 7) {
                w.write_all(&[i as u8; 7])?;
            }
            w.write_all(&vec![1u8; WRITE_BUFFER_BYTES + 3])
        })
        .unwrap();
        assert_eq!(n.bytes, fs::metadata(&p).unwrap().len());
        assert_eq!(n.bytes as usize, 3 * WRITE_BUFFER_BYTES / 7 * 7 + WRITE_BUFFER_BYTES + 3);
        // The hash is the content's, as a reader computes it.
        assert_eq!(n, hash_file(&p).unwrap());
        assert_eq!(n.xxh3, xxhash_rust::xxh3::xxh3_64(&fs::read(&p).unwrap()));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_past_several_writeback_chunks_is_whole_and_hashed() {
        let _bound = ferry_watchdog::bound("the committing thread");
        let d = tmpdir("writeback");
        let p = d.join("large.bin");
        let chunk = WRITEBACK_CHUNK_BYTES as usize;
        // Writes that end inside, exactly at and past chunk boundaries.
        let parts: Vec<Vec<u8>> = [chunk - 5, 5, chunk + 11, 3]
            .iter()
            .enumerate()
            .map(|(i, &n)| vec![i as u8 + 1; n])
            .collect();
        let n = write_atomic(&p, |w| parts.iter().try_for_each(|b| w.write_all(b))).unwrap();
        let back = fs::read(&p).unwrap();
        assert_eq!(back, parts.concat());
        assert_eq!(n.bytes as usize, 2 * chunk + 14);
        assert_eq!(n.xxh3, xxhash_rust::xxh3::xxh3_64(&back));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn failing_rewrite_keeps_the_previous_file() {
        let _bound = ferry_watchdog::bound("the committing thread");
        let d = tmpdir("keep");
        let p = d.join("deps.json");
        write_atomic(&p, |w| w.write_all(b"{\"v\":1}")).unwrap();
        let r = write_atomic(&p, |w| {
            w.write_all(b"{\"v\":")?;
            Err(io::Error::other("aborted"))
        });
        assert_eq!(r.unwrap_err().to_string(), "aborted");
        assert_eq!(fs::read(&p).unwrap(), b"{\"v\":1}");
        assert_eq!(entries(&d), vec!["deps.json".to_string()]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn panicking_writer_leaves_no_temp() {
        let _bound = ferry_watchdog::bound("the committing thread");
        let d = tmpdir("panic");
        let p = d.join("sub").join("scope_stats.jsonl");
        let r = std::panic::catch_unwind(|| {
            let _ = write_atomic(&p, |w| {
                w.write_all(b"{}")?;
                panic!("writer panicked mid-file");
            });
        });
        assert!(r.is_err());
        assert!(!p.exists());
        assert!(entries(&d.join("sub")).is_empty());
        fs::remove_dir_all(&d).unwrap();
    }

    /// A batch writes every file whole with its hash and leaves no temp; one that fails at a
    /// file's temp (its name is a directory's) renames nothing: the earlier file keeps its
    /// content and no temp stays.
    #[test]
    fn a_batch_renames_every_file_or_none() {
        let d = tmpdir("batch");
        let dir = Dir::open_writable(&d, false).unwrap();
        let w = write_batch_in(&dir, &[("a.json", b"{}"), ("sub/b.f32", b"0123")], &[]).unwrap();
        assert_eq!(w[0], Written { bytes: 2, xxh3: xxhash_rust::xxh3::xxh3_64(b"{}") });
        assert_eq!(w[1].bytes, 4);
        assert_eq!(fs::read(d.join("a.json")).unwrap(), b"{}");
        assert_eq!(fs::read(d.join("sub/b.f32")).unwrap(), b"0123");
        assert_eq!(entries(&d), vec!["a.json".to_string(), "sub".to_string()]);
        assert_eq!(entries(&d.join("sub")), vec!["b.f32".to_string()]);
        let r = write_batch_in(&dir, &[("a.json", b"[1]"), ("sub/b.f32/x", b"!")], &[]);
        assert!(r.is_err());
        assert_eq!(fs::read(d.join("a.json")).unwrap(), b"{}", "renamed before the batch failed");
        assert_eq!(entries(&d), vec!["a.json".to_string(), "sub".to_string()]);
        fs::remove_dir_all(&d).unwrap();
    }
}
