//! [`Dir`]: a directory opened once, everything below it reached through its handle.
use std::ffi::OsString;
use std::fs::File;
use std::hash::BuildHasher;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::input::Input;
use crate::{check_writable_dir, components, euid, kind_name, FsError};

const DIR_FLAGS: OFlags =
    OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC).union(OFlags::NOCTTY);

/// How many unpredictable names [`Dir::create_temp`] tries before it gives up (each taken name
/// is a file someone planted, or a one-in-2^64 collision).
const TEMP_TRIES: usize = 16;

/// A directory opened once; every file and directory below it is reached through this handle
/// without following a symbolic link (see the [crate docs](crate)). Cloning shares the handle.
#[derive(Clone, Debug)]
pub struct Dir {
    fd: Arc<OwnedFd>,
    path: PathBuf,
    /// Whether it was checked for writing (its subdirectories are checked too).
    writable: bool,
}

/// What a directory entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed).
    Symlink,
    /// Anything else: a FIFO, a socket, a device.
    Other,
}

impl Kind {
    fn of(t: FileType) -> Kind {
        match t {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::Other,
        }
    }
}

/// One entry of [`Dir::entries`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its name.
    pub name: OsString,
    /// What it is (the link itself for a symbolic link).
    pub kind: Kind,
}

/// What [`Dir::stat`] found (of the entry itself: a link is not followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// What it is.
    pub kind: Kind,
    /// Its size in bytes.
    pub len: u64,
    /// Its owner.
    pub uid: u32,
}

/// An exclusive advisory lock (`flock`) on a file of a directory, released when dropped.
#[derive(Debug)]
pub struct Lock {
    _file: File,
}

fn errno_io(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

impl Dir {
    /// Opens the directory at `path` for reading, resolving `path` as the kernel does (the
    /// caller named it).
    ///
    /// # Errors
    /// [`FsError::NotADirectory`]; [`FsError::Io`] (missing, no permission).
    pub fn open(path: &Path) -> Result<Dir, FsError> {
        let fd = rfs::open(path, DIR_FLAGS, Mode::empty()).map_err(|e| match e {
            Errno::NOTDIR => FsError::NotADirectory { path: path.to_path_buf() },
            e => FsError::io(path)(errno_io(e)),
        })?;
        Ok(Dir { fd: Arc::new(fd), path: path.to_path_buf(), writable: false })
    }

    /// Opens the directory at `path` for writing, creating it (and its parents) when `create`
    /// and it is missing, and checks it: the last component of `path` may not be a symbolic
    /// link another user owns, and the directory must be owned by this user or root and not
    /// writable by every user unless sticky ([`check_writable_dir`]).
    ///
    /// # Errors
    /// [`FsError::Symlink`], [`FsError::ForeignOwner`], [`FsError::WorldWritable`],
    /// [`FsError::NotADirectory`], [`FsError::Io`].
    pub fn open_writable(path: &Path, create: bool) -> Result<Dir, FsError> {
        match rfs::lstat(path) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                if st.st_uid != euid() && st.st_uid != 0 {
                    return Err(FsError::Symlink { path: path.to_path_buf() });
                }
            }
            Ok(_) => {}
            Err(Errno::NOENT) if create => {
                std::fs::create_dir_all(path).map_err(FsError::io(path))?;
            }
            Err(e) => return Err(FsError::io(path)(errno_io(e))),
        }
        let mut d = Dir::open(path)?;
        d.check_writable()?;
        d.writable = true;
        Ok(d)
    }

    fn check_writable(&self) -> Result<(), FsError> {
        let st = rfs::fstat(&*self.fd).map_err(|e| FsError::io(&self.path)(errno_io(e)))?;
        check_writable_dir(&self.path, st.st_uid, st.st_mode, euid())
    }

    /// The path it was opened at (for messages: what is done goes through the handle).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `rel` below this directory, as a path (for messages).
    pub fn join(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }

    /// The child directory `name` (one component), created first when `create`; a link is
    /// refused, and a directory for writing is checked like [`Dir::open_writable`]'s.
    fn child(&self, name: &str, create: bool) -> Result<Dir, FsError> {
        let path = self.path.join(name);
        if create {
            match rfs::mkdirat(&*self.fd, name, Mode::from_bits_truncate(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(FsError::io(&path)(errno_io(e))),
            }
        }
        match rfs::openat(&*self.fd, name, DIR_FLAGS | OFlags::NOFOLLOW, Mode::empty()) {
            Ok(fd) => {
                let d = Dir { fd: Arc::new(fd), path, writable: self.writable };
                if d.writable {
                    d.check_writable()?;
                }
                Ok(d)
            }
            Err(Errno::LOOP | Errno::NOTDIR) => Err(self.not_a_dir(name)),
            Err(e) => Err(FsError::io(&path)(errno_io(e))),
        }
    }

    /// Why `name`, which did not open as a directory, is not one.
    fn not_a_dir(&self, name: &str) -> FsError {
        let path = self.path.join(name);
        match rfs::statat(&*self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                FsError::Symlink { path }
            }
            _ => FsError::NotADirectory { path },
        }
    }

    /// The directory `rel` (`/`-separated) below this one, for reading.
    ///
    /// # Errors
    /// [`FsError::Symlink`] for a link on the way, [`FsError::NotADirectory`],
    /// [`FsError::BadName`], [`FsError::Io`] (missing).
    pub fn sub(&self, rel: &str) -> Result<Dir, FsError> {
        let mut d = self.clone();
        for c in components(&self.path, rel)? {
            d = d.child(c, false)?;
        }
        Ok(d)
    }

    /// The directory `rel` below this one, created where missing; each component is checked
    /// like [`Dir::open_writable`]'s when this directory was opened for writing.
    ///
    /// # Errors
    /// As [`Dir::sub`]; [`FsError::ForeignOwner`], [`FsError::WorldWritable`].
    pub fn create_sub(&self, rel: &str) -> Result<Dir, FsError> {
        let mut d = self.clone();
        for c in components(&self.path, rel)? {
            d = d.child(c, true)?;
        }
        Ok(d)
    }

    /// The directory holding `rel` and `rel`'s last component.
    fn parent_of<'a>(&self, rel: &'a str, create: bool) -> Result<(Dir, &'a str), FsError> {
        let parts = components(&self.path, rel)?;
        let (name, dirs) = parts.split_last().expect("components are never empty");
        let mut d = self.clone();
        for c in dirs {
            d = d.child(c, create)?;
        }
        Ok((d, name))
    }

    /// What `rel` is, without following a link; `None` when it (or a directory on the way) is
    /// missing.
    ///
    /// # Errors
    /// [`FsError::Symlink`] for a link among the directories on the way; [`FsError::Io`].
    pub fn stat(&self, rel: &str) -> Result<Option<Meta>, FsError> {
        let (d, name) = match self.parent_of(rel, false) {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        match rfs::statat(&*d.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(Meta {
                kind: Kind::of(FileType::from_raw_mode(st.st_mode)),
                len: st.st_size as u64,
                uid: st.st_uid,
            })),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(FsError::io(self.join(rel))(errno_io(e))),
        }
    }

    /// Opens the regular file `rel` for reading, at most `limit` bytes of it (see [`Input`]).
    ///
    /// # Errors
    /// [`FsError::Symlink`], [`FsError::NotAFile`] (a FIFO, device, directory),
    /// [`FsError::TooLarge`] (over `limit`), [`FsError::Io`] (missing: [`FsError::is_not_found`]).
    pub fn open_file(&self, rel: &str, limit: u64) -> Result<Input, FsError> {
        let (d, name) = self.parent_of(rel, false)?;
        let path = self.join(rel);
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = match rfs::openat(&*d.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::LOOP) => return Err(FsError::Symlink { path }),
            Err(e) => return Err(FsError::io(path)(errno_io(e))),
        };
        Input::from_fd(fd, path, limit)
    }

    /// Reads the regular file `rel` whole, refusing one over `limit` bytes.
    ///
    /// # Errors
    /// As [`Dir::open_file`].
    pub fn read(&self, rel: &str, limit: u64) -> Result<Vec<u8>, FsError> {
        self.open_file(rel, limit)?.read_all()
    }

    /// Creates the new file `name` (one component) for writing: `O_CREAT|O_EXCL|O_NOFOLLOW`, so
    /// an existing file or link of that name is an error, never opened.
    ///
    /// # Errors
    /// [`FsError::Io`] (`AlreadyExists` for a taken name), [`FsError::BadName`].
    pub fn create_new(&self, name: &str) -> Result<File, FsError> {
        let (d, name) = self.parent_of(name, false)?;
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | OFlags::NOCTTY;
        let fd = rfs::openat(&*d.fd, name, flags, Mode::from_bits_truncate(0o666))
            .map_err(|e| FsError::io(d.join(name))(errno_io(e)))?;
        Ok(File::from(fd))
    }

    /// Creates a temp file for writing `name` (one component) in this directory:
    /// `.<name>.tmp.<pid>.<16 hex digits>`, the digits unpredictable (keyed by the process's
    /// random hash seed), created as [`Dir::create_new`] does. Returns the file and its name.
    ///
    /// # Errors
    /// [`FsError::Io`]; `AlreadyExists` when 16 names in a row were all taken.
    pub fn create_temp(&self, name: &str) -> Result<(File, String), FsError> {
        if components(&self.path, name)?.len() != 1 {
            return Err(FsError::BadName { dir: self.path.clone(), name: name.to_string() });
        }
        let mut last = None;
        for _ in 0..TEMP_TRIES {
            let tmp = format!(".{name}.tmp.{}.{:016x}", std::process::id(), unpredictable());
            match self.create_new(&tmp) {
                Ok(f) => return Ok((f, tmp)),
                Err(FsError::Io { source, path })
                    if source.kind() == io::ErrorKind::AlreadyExists =>
                {
                    last = Some(FsError::Io { source, path });
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("TEMP_TRIES > 0"))
    }

    /// Renames `from` to `to`, both names in this directory (one component each); `to` is
    /// replaced (a link there is replaced, not followed).
    ///
    /// # Errors
    /// [`FsError::Io`], [`FsError::BadName`].
    pub fn rename(&self, from: &str, to: &str) -> Result<(), FsError> {
        let (a, from) = self.parent_of(from, false)?;
        let (b, to) = self.parent_of(to, false)?;
        rfs::renameat(&*a.fd, from, &*b.fd, to).map_err(|e| FsError::io(b.join(to))(errno_io(e)))
    }

    /// Removes the file (or link: the link itself) `rel`; `false` when it was not there.
    ///
    /// # Errors
    /// [`FsError::Symlink`] for a link among the directories on the way; [`FsError::Io`].
    pub fn remove_file(&self, rel: &str) -> Result<bool, FsError> {
        let (d, name) = match self.parent_of(rel, false) {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Ok(false),
            Err(e) => return Err(e),
        };
        match rfs::unlinkat(&*d.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(FsError::io(self.join(rel))(errno_io(e))),
        }
    }

    /// Removes the directory `rel` if it is empty; `false` when it was not there or holds
    /// something.
    ///
    /// # Errors
    /// [`FsError::Symlink`] for a link on the way; [`FsError::Io`].
    pub fn remove_dir(&self, rel: &str) -> Result<bool, FsError> {
        let (d, name) = match self.parent_of(rel, false) {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Ok(false),
            Err(e) => return Err(e),
        };
        match rfs::unlinkat(&*d.fd, name, AtFlags::REMOVEDIR) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST) => Ok(false),
            Err(Errno::NOTDIR) => Err(self.not_a_dir(rel)),
            Err(e) => Err(FsError::io(self.join(rel))(errno_io(e))),
        }
    }

    /// Takes an exclusive advisory lock on the file `name` of this directory, creating it
    /// (`O_NOFOLLOW`, and it must be a regular file: a planted link or FIFO is refused);
    /// `None` when another process holds it.
    ///
    /// # Errors
    /// [`FsError::Symlink`], [`FsError::NotAFile`], [`FsError::Io`].
    pub fn try_lock(&self, name: &str) -> Result<Option<Lock>, FsError> {
        let (d, name) = self.parent_of(name, false)?;
        let path = d.join(name);
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::CLOEXEC
            | OFlags::NOCTTY;
        let fd = match rfs::openat(&*d.fd, name, flags, Mode::from_bits_truncate(0o666)) {
            Ok(fd) => fd,
            Err(Errno::LOOP) => return Err(FsError::Symlink { path }),
            Err(Errno::NXIO) => return Err(FsError::NotAFile { path, kind: "a FIFO" }),
            Err(e) => return Err(FsError::io(path)(errno_io(e))),
        };
        let st = rfs::fstat(&fd).map_err(|e| FsError::io(&path)(errno_io(e)))?;
        let t = FileType::from_raw_mode(st.st_mode);
        if t != FileType::RegularFile {
            return Err(FsError::NotAFile { path, kind: kind_name(t) });
        }
        match rfs::flock(&fd, rfs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(Lock { _file: File::from(fd) })),
            Err(Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(FsError::io(path)(errno_io(e))),
        }
    }

    /// The entries of this directory (`.` and `..` left out), links as links.
    ///
    /// # Errors
    /// [`FsError::Io`].
    pub fn entries(&self) -> Result<Vec<Entry>, FsError> {
        let io = |e| FsError::io(&self.path)(errno_io(e));
        let mut rd = rfs::Dir::read_from(&*self.fd).map_err(io)?;
        let mut out = Vec::new();
        while let Some(e) = rd.read() {
            let e = e.map_err(io)?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let mut kind = Kind::of(e.file_type());
            if e.file_type() == FileType::Unknown {
                // A file system without d_type: ask, without following.
                kind = match rfs::statat(&*self.fd, e.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => Kind::of(FileType::from_raw_mode(st.st_mode)),
                    Err(_) => continue,
                };
            }
            out.push(Entry { name: std::ffi::OsStr::from_bytes(name).to_os_string(), kind });
        }
        Ok(out)
    }

    /// Makes the renames and removals in this directory durable (`fsync` of the directory).
    /// Where the platform refuses, the files are still complete, only the durability of their
    /// names is weaker: that failure is not reported.
    pub fn sync(&self) {
        let _ = rfs::fsync(&*self.fd);
    }

    /// The handle, for a caller that needs the descriptor.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// 64 bits an attacker cannot predict: a counter hashed under the process's random SipHash key
/// (seeded by the OS's random source).
fn unpredictable() -> u64 {
    static KEY: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // Relaxed: only uniqueness of the counter matters (an RMW), nothing is ordered by it.
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    KEY.get_or_init(std::collections::hash_map::RandomState::new).hash_one(n)
}
