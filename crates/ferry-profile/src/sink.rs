//! The buffer between a file's writer and its temp file, which sends full blocks past the page
//! cache.
//!
//! A run's output directory is ~170 MB written once, fsynced and rarely read back at once.
//! Through the page cache every byte costs a copy into a freshly allocated cache page (on the
//! 2-core VMs ferry is measured on, ~0.3–0.9 s of system time for one storm run: most of the
//! write phase) and the final fsync waits for writeback anyway. So once a file has filled its
//! first [`WRITE_BUFFER_BYTES`] buffer, [`FileSink`] turns on `O_DIRECT` for it (Linux): each
//! full, 4 KiB-aligned buffer goes from this buffer to the disk with no cache page and no copy,
//! and only the file's unaligned tail is written through the cache. Small files never switch.
//!
//! A direct transfer blocks its caller for the disk's time (the cache returned at once), so
//! a direct file's full buffers are written by a helper thread of its own (`ferry-io`) while its
//! writer fills a second buffer: the writer waits only when it has filled that one too, or at
//! the end. At most one transfer is in flight per file, in file order; its error reaches the
//! writer at its next buffer or at [`FileSink::finish`]. Where the thread cannot be started, the
//! writer makes the transfers itself.
//!
//! Direct I/O is an optimisation, never a requirement: where the filesystem refuses it (tmpfs
//! on older kernels, some network filesystems) or a transfer is refused (`EINVAL`) or short, the
//! file goes on through the cache from where it stood, byte for byte the same.
//! [`set_direct_io`] turns it off for the whole process (the `ferry` binary's
//! `FERRY_DIRECT_IO=0`).

use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use xxhash_rust::xxh3::Xxh3;

/// Size of the buffer between a writer and its temp file.
pub const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// Alignment of a direct transfer's buffer address, length and file offset: 4 KiB covers the
/// logical block sizes of 512- and 4096-byte-sector devices.
const DIRECT_ALIGN: usize = 4096;

/// Written bytes after which a file written through the cache asks the kernel to start writing
/// them back (Linux `sync_file_range(SYNC_FILE_RANGE_WRITE)`, which does not wait), so the disk
/// works while the next bytes are produced and the final fsync finds little left to flush.
pub(crate) const WRITEBACK_CHUNK_BYTES: u64 = 8 << 20;

static DIRECT_IO: AtomicBool = AtomicBool::new(true);

/// Whether files that outgrow one write buffer are written with direct I/O from then on (the
/// default: on). Off, every byte goes through the page cache. Takes effect for files opened
/// afterwards.
pub fn set_direct_io(on: bool) {
    // Relaxed: a setting read when a file starts; nothing else is published with it.
    DIRECT_IO.store(on, Ordering::Relaxed);
}

/// The current [`set_direct_io`] setting.
pub fn direct_io() -> bool {
    // Relaxed: see `set_direct_io`.
    DIRECT_IO.load(Ordering::Relaxed)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direct {
    /// Not yet asked for (the file has not filled a buffer).
    Untried,
    On,
    /// Refused, ended for the tail, or not wanted.
    Off,
}

/// Sets or clears `O_DIRECT` on `file`; whether the kernel accepted it.
fn set_direct(file: &File, on: bool) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        // SAFETY: fcntl(F_GETFL / F_SETFL) takes no pointers; `fd` is this open file's.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags < 0 {
                return false;
            }
            let want = if on { flags | libc::O_DIRECT } else { flags & !libc::O_DIRECT };
            libc::fcntl(fd, libc::F_SETFL, want) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, on);
        !on
    }
}

/// Buffers, counts and hashes (XXH3-64) the bytes bound for one file.
pub(crate) struct FileSink {
    file: File,
    storage: Box<[u8]>,
    /// Offset of the [`DIRECT_ALIGN`]-aligned buffer inside `storage`.
    start: usize,
    /// Bytes buffered.
    len: usize,
    /// Bytes that reached the file.
    bytes: u64,
    hash: Xxh3,
    /// Bytes already handed to the kernel's writeback (or written direct).
    kicked: u64,
    direct: Direct,
    /// Bytes written with direct I/O.
    direct_bytes: u64,
    /// The helper thread for direct transfers, once the file has gone direct.
    io: Option<IoThread>,
}

/// A buffer on its way to the disk: `storage[start..start + len]` at the file's offset.
struct Transfer {
    storage: Box<[u8]>,
    start: usize,
    len: usize,
    /// The file's direct state when it was handed over, and after the transfer.
    direct: Direct,
    /// Bytes of it that went direct.
    direct_bytes: u64,
    result: io::Result<()>,
}

/// A direct file's helper thread: takes one [`Transfer`] at a time and hands it back written.
struct IoThread {
    to: Option<std::sync::mpsc::SyncSender<Transfer>>,
    back: std::sync::mpsc::Receiver<Transfer>,
    /// A transfer is with the thread.
    busy: bool,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl IoThread {
    /// Starts the helper over `file` (a clone of the sink's descriptor, so the offset and the
    /// `O_DIRECT` flag are shared: only one side writes at a time). `None` when the clone or
    /// the thread cannot be made.
    fn start(file: &File) -> Option<IoThread> {
        let file = file.try_clone().ok()?;
        let (to, jobs) = std::sync::mpsc::sync_channel::<Transfer>(1);
        let (done, back) = std::sync::mpsc::channel::<Transfer>();
        let handle = std::thread::Builder::new()
            .name("ferry-io".into())
            .spawn(move || {
                for mut t in jobs {
                    let buf = &t.storage[t.start..t.start + t.len];
                    t.result = write_out(&file, buf, &mut t.direct, &mut t.direct_bytes);
                    if done.send(t).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
        Some(IoThread { to: Some(to), back, busy: false, handle: Some(handle) })
    }
}

impl Drop for IoThread {
    fn drop(&mut self) {
        // The thread ends once its queue is closed and its transfer (if any) is written: the
        // file is not touched after the sink is gone.
        self.to = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Writes all of `buf` at `file`'s offset: direct while `direct` is on, through the cache from
/// a refused (`EINVAL`) or short direct transfer on (`direct` then off); counts the bytes that
/// went direct in `direct_bytes`.
fn write_out(
    file: &File,
    buf: &[u8],
    direct: &mut Direct,
    direct_bytes: &mut u64,
) -> io::Result<()> {
    let (n, mut done) = (buf.len(), 0);
    while done < n {
        match (&*file).write(&buf[done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(k) => {
                if *direct == Direct::On {
                    *direct_bytes += k as u64;
                }
                done += k;
                // A short direct transfer leaves the rest unaligned: it goes through the cache.
                if done < n && *direct == Direct::On {
                    end_direct(file, direct);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The filesystem took the flag but refuses this transfer: through the cache.
            Err(e) if *direct == Direct::On && e.raw_os_error() == Some(libc::EINVAL) => {
                end_direct(file, direct)
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Ends direct I/O for `file`: the rest goes through the cache.
fn end_direct(file: &File, direct: &mut Direct) {
    // Clearing the flag only fails on a bad descriptor, which the next write reports.
    let _ = set_direct(file, false);
    *direct = Direct::Off;
}

/// A zeroed buffer of [`WRITE_BUFFER_BYTES`] with room to align it, and the offset of its
/// [`DIRECT_ALIGN`]-aligned start.
fn aligned_buffer() -> (Box<[u8]>, usize) {
    // Zeroed through the allocator: pages are only touched as the buffer fills.
    let storage = vec![0u8; WRITE_BUFFER_BYTES + DIRECT_ALIGN].into_boxed_slice();
    let start = storage.as_ptr().align_offset(DIRECT_ALIGN);
    (storage, start)
}

/// What a finished [`FileSink`] wrote.
pub(crate) struct Finished {
    pub file: File,
    pub bytes: u64,
    pub xxh3: u64,
    /// Of `bytes`, how many went to the disk with direct I/O.
    #[cfg(test)]
    pub direct_bytes: u64,
}

impl FileSink {
    /// A sink over `file` (empty, at offset 0); `direct`: may it switch to direct I/O.
    pub(crate) fn new(file: File, direct: bool) -> Self {
        let (storage, start) = aligned_buffer();
        FileSink {
            file,
            storage,
            start,
            len: 0,
            bytes: 0,
            hash: Xxh3::new(),
            kicked: 0,
            direct: if direct { Direct::Untried } else { Direct::Off },
            direct_bytes: 0,
            io: None,
        }
    }

    /// Appends `buf`, writing out each buffer that fills.
    #[inline]
    pub(crate) fn put(&mut self, mut buf: &[u8]) -> io::Result<()> {
        loop {
            let room = WRITE_BUFFER_BYTES - self.len;
            let n = buf.len().min(room);
            let at = self.start + self.len;
            self.storage[at..at + n].copy_from_slice(&buf[..n]);
            self.len += n;
            if n == buf.len() {
                return Ok(());
            }
            buf = &buf[n..];
            self.drain()?;
        }
    }

    /// Writes out what is buffered. A partial buffer ends direct I/O for the file (the file's
    /// offset would no longer be aligned), so only the last drain should be one.
    pub(crate) fn drain(&mut self) -> io::Result<()> {
        let n = self.len;
        if n == 0 {
            return Ok(());
        }
        let s = self.start;
        self.hash.update(&self.storage[s..s + n]);
        if self.direct == Direct::Untried && n == WRITE_BUFFER_BYTES {
            self.direct = if set_direct(&self.file, true) { Direct::On } else { Direct::Off };
        }
        if self.direct == Direct::On && n == WRITE_BUFFER_BYTES && self.io.is_none() {
            self.io = IoThread::start(&self.file);
        }
        // The transfer in flight first (it may have ended direct I/O for the file).
        let spare = self.settle()?;
        if self.direct == Direct::On && n == WRITE_BUFFER_BYTES && self.io.is_some() {
            return self.hand_over(spare);
        }
        // Everything else is written here.
        if self.direct == Direct::On && n % DIRECT_ALIGN != 0 {
            end_direct(&self.file, &mut self.direct);
        }
        let s = self.start;
        write_out(&self.file, &self.storage[s..s + n], &mut self.direct, &mut self.direct_bytes)?;
        self.bytes += n as u64;
        self.len = 0;
        if self.direct == Direct::On {
            self.kicked = self.bytes;
        } else {
            self.kick(WRITEBACK_CHUNK_BYTES);
        }
        Ok(())
    }

    /// Hands the full buffer to the helper thread (none in flight: [`settle`](Self::settle)
    /// came first) and goes on in `spare`, the buffer that came back, or a new one.
    fn hand_over(&mut self, spare: Option<(Box<[u8]>, usize)>) -> io::Result<()> {
        let Some(io) = self.io.as_mut() else { unreachable!("called with a helper") };
        let (storage, start) = spare.unwrap_or_else(aligned_buffer);
        let full = std::mem::replace(&mut self.storage, storage);
        let at = std::mem::replace(&mut self.start, start);
        let t = Transfer {
            storage: full,
            start: at,
            len: self.len,
            direct: self.direct,
            direct_bytes: 0,
            result: Ok(()),
        };
        let sent = match io.to.as_ref() {
            Some(to) => to.send(t).map_err(|e| e.0),
            None => Err(t),
        };
        match sent {
            Ok(()) => io.busy = true,
            // The helper is gone (it only ends when its queue closes, or by a panic): the
            // transfer comes back with the send error and is written here.
            Err(t) => {
                self.io = None;
                let (s, n) = (t.start, t.len);
                let (mut direct, mut db) = (t.direct, 0);
                write_out(&self.file, &t.storage[s..s + n], &mut direct, &mut db)?;
                self.direct = direct;
                self.direct_bytes += db;
            }
        }
        self.bytes += self.len as u64;
        self.kicked = self.bytes;
        self.len = 0;
        Ok(())
    }

    /// Waits for the transfer in flight, if any: its direct state becomes the file's, its
    /// error is returned, its buffer comes back for reuse.
    fn settle(&mut self) -> io::Result<Option<(Box<[u8]>, usize)>> {
        let Some(io) = self.io.as_mut().filter(|io| io.busy) else { return Ok(None) };
        io.busy = false;
        match io.back.recv() {
            Ok(t) => {
                self.direct = t.direct;
                self.direct_bytes += t.direct_bytes;
                t.result?;
                Ok(Some((t.storage, t.start)))
            }
            Err(_) => {
                self.io = None;
                Err(io::Error::other("the direct-I/O helper thread ended with a transfer"))
            }
        }
    }

    /// Starts the writeback of what was written through the cache since the last kick if that
    /// is at least `at_least` bytes (and not nothing). Advisory: a failure here resurfaces at
    /// the final fsync, which is checked.
    fn kick(&mut self, at_least: u64) {
        let pending = self.bytes - self.kicked;
        if pending == 0 || pending < at_least {
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
        self.kicked = self.bytes;
    }

    /// Writes out the rest and starts its writeback.
    pub(crate) fn finish(mut self) -> io::Result<Finished> {
        self.drain()?;
        self.settle()?;
        // The helper ends here (joined), before the file is handed on.
        self.io = None;
        self.kick(0);
        Ok(Finished {
            bytes: self.bytes,
            xxh3: self.hash.digest(),
            #[cfg(test)]
            direct_bytes: self.direct_bytes,
            file: self.file,
        })
    }
}

impl Write for FileSink {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.put(buf)?;
        Ok(buf.len())
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.put(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.drain()?;
        self.settle().map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ferry-sink-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn content(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 4093) as u8).collect()
    }

    /// Every size around the buffer and block boundaries, fed in pieces of every shape, comes
    /// out whole with the hash of its bytes, direct or not; a file that filled a buffer went
    /// (at least its full buffers) direct where the filesystem allows it, a smaller one never.
    #[test]
    fn every_size_and_piece_shape_is_written_whole_direct_or_not() {
        let _bound = ferry_watchdog::bound("the writer thread");
        let d = tmp("sizes");
        let b = WRITE_BUFFER_BYTES;
        let sizes = [0, 1, 4095, 4096, b - 1, b, b + 1, b + 4096, 3 * b + 123, 5 * b];
        let pieces = [1usize << 30, 1, 7, 4096, 65_537];
        let mut any_direct = false;
        for direct in [true, false] {
            for &len in &sizes {
                for &piece in &pieces {
                    if piece == 1 && len > b + 4096 {
                        continue; // byte by byte is slow and adds nothing past a buffer
                    }
                    let want = content(len);
                    let p = d.join(format!("f-{direct}-{len}-{piece}"));
                    let mut s = FileSink::new(File::create(&p).unwrap(), direct);
                    for c in want.chunks(piece.max(1)) {
                        s.write_all(c).unwrap();
                    }
                    let f = s.finish().unwrap();
                    assert_eq!(f.bytes, len as u64);
                    assert_eq!(f.xxh3, xxhash_rust::xxh3::xxh3_64(&want));
                    drop(f.file);
                    assert_eq!(std::fs::read(&p).unwrap(), want, "{len} bytes in {piece}s");
                    if !direct || len < b {
                        assert_eq!(f.direct_bytes, 0, "{len} bytes, direct {direct}");
                    } else {
                        // All full buffers, or none where the filesystem refused the flag.
                        let full = (len / b * b) as u64;
                        assert!(f.direct_bytes == 0 || f.direct_bytes >= full, "{len}");
                        any_direct |= f.direct_bytes > 0;
                    }
                    std::fs::remove_file(&p).unwrap();
                }
            }
        }
        // Where this directory's filesystem takes direct I/O, the direct path was the one
        // under test.
        if probe_direct(&d) {
            assert!(any_direct, "no file went direct in {}", d.display());
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A disk that fills up fails the file, whether its buffers went through the helper thread
    /// (direct) or not: the error reaches the writer by `finish` at the latest, and nothing
    /// hangs.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_full_disk_fails_the_file_direct_or_not() {
        let _bound = ferry_watchdog::bound("the writer thread");
        for direct in [true, false] {
            for len in [WRITE_BUFFER_BYTES, 3 * WRITE_BUFFER_BYTES + 5] {
                let f = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
                let mut s = FileSink::new(f, direct);
                let data = content(len);
                let err = s
                    .write_all(&data)
                    .and_then(|()| s.finish().map(drop))
                    .expect_err("/dev/full took the bytes");
                assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
            }
        }
    }

    /// Whether a file in `dir` can be opened for direct I/O.
    fn probe_direct(dir: &std::path::Path) -> bool {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::OpenOptionsExt;
            let p = dir.join("probe");
            let ok = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(libc::O_DIRECT)
                .open(&p)
                .is_ok();
            let _ = std::fs::remove_file(&p);
            ok
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = dir;
            false
        }
    }
}
