//! [`Input`]: a regular file opened for reading, bounded by the read itself.
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, FileType, Mode, OFlags};

use crate::{kind_name, FsError};

/// A regular file opened for reading, of which at most `limit` bytes are read: a read past the
/// limit fails with [`FsError::TooLarge`] (as an [`io::Error`] of kind `FileTooLarge`) even
/// when the file grew after it was opened.
#[derive(Debug)]
pub struct Input {
    file: File,
    path: PathBuf,
    len: u64,
    limit: u64,
    read: u64,
}

impl Input {
    /// Checks the opened `fd`: a regular file of at most `limit` bytes; then makes its reads
    /// blocking again (it was opened with `O_NONBLOCK` so that a FIFO could not hang the open).
    pub(crate) fn from_fd(fd: OwnedFd, path: PathBuf, limit: u64) -> Result<Input, FsError> {
        let io = |e: rustix::io::Errno| FsError::Io {
            path: path.clone(),
            source: io::Error::from_raw_os_error(e.raw_os_error()),
        };
        let st = rfs::fstat(&fd).map_err(io)?;
        let t = FileType::from_raw_mode(st.st_mode);
        if t != FileType::RegularFile {
            return Err(FsError::NotAFile { path, kind: kind_name(t) });
        }
        let len = st.st_size as u64;
        if len > limit {
            return Err(FsError::TooLarge { path, size: Some(len), limit });
        }
        let flags = rfs::fcntl_getfl(&fd).map_err(io)?;
        rfs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK).map_err(io)?;
        Ok(Input { file: File::from(fd), path, len, limit, read: 0 })
    }

    /// Its size when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it was empty when opened.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most this reads.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Where it was opened (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the rest of it, at most the limit.
    ///
    /// # Errors
    /// [`FsError::TooLarge`] when it grew past the limit; [`FsError::Io`].
    pub fn read_all(mut self) -> Result<Vec<u8>, FsError> {
        // The size it had, not more: a file that grows is read as it comes, up to the limit.
        let mut v = Vec::with_capacity(self.len.min(self.limit) as usize);
        match self.read_to_end(&mut v) {
            Ok(_) => Ok(v),
            Err(e) => Err(self.error(e)),
        }
    }

    /// The [`FsError`] of a failed read of this file.
    pub fn error(&self, e: io::Error) -> FsError {
        match e.get_ref().and_then(|i| i.downcast_ref::<FsError>()) {
            Some(FsError::TooLarge { size, limit, .. }) => {
                FsError::TooLarge { path: self.path.clone(), size: *size, limit: *limit }
            }
            _ => FsError::Io { path: self.path.clone(), source: e },
        }
    }

    /// Goes back to the start of the file (its limit counts afresh).
    ///
    /// # Errors
    /// The seek.
    pub fn rewind(&mut self) -> io::Result<()> {
        io::Seek::rewind(&mut self.file)?;
        self.read = 0;
        Ok(())
    }

    /// The file, for positioned reads (`read_exact_at`) of at most [`Input::len`] bytes: the
    /// caller bounds each read by the size checked at open.
    pub fn into_file(self) -> File {
        self.file
    }
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = self.limit - self.read;
        if room == 0 {
            // At the limit: one more byte means the file is over it.
            let mut probe = [0u8; 1];
            return match self.file.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(FsError::TooLarge {
                    path: self.path.clone(),
                    size: None,
                    limit: self.limit,
                }
                .into()),
            };
        }
        let n = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let got = self.file.read(&mut buf[..n])?;
        self.read += got as u64;
        Ok(got)
    }
}

/// Opens the file a user named at `path` (resolved as the kernel does: the user chose the
/// path) for reading at most `limit` bytes: without blocking on a FIFO, and refusing anything
/// but a regular file of at most `limit` bytes.
///
/// # Errors
/// [`FsError::NotAFile`], [`FsError::TooLarge`], [`FsError::Io`].
///
/// # Examples
/// ```
/// use ferry_fs::{open_input, FsError};
/// assert!(matches!(open_input("/dev/zero".as_ref(), 1 << 20), Err(FsError::NotAFile { .. })));
/// ```
pub fn open_input(path: &Path, limit: u64) -> Result<Input, FsError> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = rfs::open(path, flags, Mode::empty()).map_err(|e| FsError::Io {
        path: path.to_path_buf(),
        source: io::Error::from_raw_os_error(e.raw_os_error()),
    })?;
    Input::from_fd(fd, path.to_path_buf(), limit)
}

/// Reads the file a user named at `path` whole, as [`open_input`] opens it.
///
/// # Errors
/// As [`open_input`]; [`FsError::TooLarge`] when it grew past `limit` while read.
pub fn read_input(path: &Path, limit: u64) -> Result<Vec<u8>, FsError> {
    open_input(path, limit)?.read_all()
}
