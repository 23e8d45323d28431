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
        // Zeroed through the allocator: pages are only touched as the buffer fills.
        let storage = vec![0u8; WRITE_BUFFER_BYTES + DIRECT_ALIGN].into_boxed_slice();
        let start = storage.as_ptr().align_offset(DIRECT_ALIGN);
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
        if self.direct == Direct::On && n % DIRECT_ALIGN != 0 {
            self.end_direct();
        }
        let mut done = 0;
        while done < n {
            match self.file.write(&self.storage[s + done..s + n]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(k) => {
                    if self.direct == Direct::On {
                        self.direct_bytes += k as u64;
                    }
                    done += k;
                    // A short direct transfer leaves the rest unaligned: it goes through the
                    // cache.
                    if done < n && self.direct == Direct::On {
                        self.end_direct();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The filesystem took the flag but refuses this transfer: through the cache.
                Err(e) if self.direct == Direct::On && e.raw_os_error() == Some(libc::EINVAL) => {
                    self.end_direct()
                }
                Err(e) => return Err(e),
            }
        }
        self.bytes += n as u64;
        self.len = 0;
        if self.direct == Direct::On {
            self.kicked = self.bytes;
        } else {
            self.kick(WRITEBACK_CHUNK_BYTES);
        }
        Ok(())
    }

    fn end_direct(&mut self) {
        // Clearing the flag only fails on a bad descriptor, which the next write reports.
        let _ = set_direct(&self.file, false);
        self.direct = Direct::Off;
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
        self.drain()
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
