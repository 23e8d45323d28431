//! Files on a shared machine: directory handles that never follow a planted link, output
//! directories checked before anything is written into them, temp files no one can pre-create,
//! and reads bounded by the read itself.
//!
//! ferry writes profiles where its users point it (`/tmp/storm` in the README), and reads
//! profiles, workloads and kernel libraries others may have written. Another local user may own
//! or write those directories. The rules this crate enforces for every caller:
//!
//! - **One handle per directory.** A directory is opened once ([`Dir`]) and everything below it
//!   is created, opened, renamed, locked and removed relative to that handle (`openat`,
//!   `mkdirat`, `renameat`, `unlinkat`), so renaming a directory or swapping a path component
//!   while ferry works cannot send a write elsewhere.
//! - **No link below a handle is followed.** Every component below a [`Dir`] is opened with
//!   `O_NOFOLLOW`; a symbolic link there is an [`FsError::Symlink`] naming it. Only the path a
//!   user typed is resolved as the kernel resolves it (that link is the user's choice) — except
//!   that the last component of an output directory must not be a link another user owns.
//! - **Output directories are checked** ([`Dir::open_writable`], [`Dir::create_sub`]): one owned
//!   by another user than this one or root ([`FsError::ForeignOwner`]), or writable by every
//!   user without the sticky bit ([`FsError::WorldWritable`]), is refused before anything is
//!   written.
//! - **New files are new.** [`Dir::create_temp`] creates with `O_CREAT|O_EXCL|O_NOFOLLOW` under a
//!   name with 64 unpredictable bits; a planted file or link of that name makes it pick another
//!   name, never open the planted one. The lock file is opened with `O_NOFOLLOW` and must be a
//!   regular file ([`Dir::try_lock`]).
//! - **Reads are bounded by the read.** [`Dir::open_file`] and [`open_input`] open without
//!   blocking (`O_NONBLOCK`: a FIFO cannot hang the open), refuse anything but a regular file
//!   ([`FsError::NotAFile`]) and a file over the caller's limit ([`FsError::TooLarge`]), and
//!   the [`Input`] they return fails a read that goes past the limit even when the file grew
//!   after it was opened.
//!
//! # Examples
//! ```
//! use std::io::{Read, Write};
//! use ferry_fs::{Dir, FsError};
//!
//! let root = std::env::temp_dir().join(format!("ferry-fs-doc-{}", std::process::id()));
//! let out = Dir::open_writable(&root, true).unwrap();
//! let sub = out.create_sub("args_dump").unwrap();
//! let (mut f, tmp) = sub.create_temp("args.bin").unwrap();
//! f.write_all(b"payload").unwrap();
//! sub.rename(&tmp, "args.bin").unwrap();
//! assert_eq!(out.read("args_dump/args.bin", 1 << 20).unwrap(), b"payload");
//! // A read past the caller's limit is refused before anything is read.
//! assert!(matches!(out.read("args_dump/args.bin", 3), Err(FsError::TooLarge { .. })));
//! // A link planted inside the directory is never followed.
//! std::os::unix::fs::symlink("/etc", root.join("elsewhere")).unwrap();
//! assert!(matches!(out.create_sub("elsewhere"), Err(FsError::Symlink { .. })));
//! # std::fs::remove_dir_all(&root).unwrap();
//! ```
#![deny(unsafe_code)]

mod dir;
mod input;

use std::io;
use std::path::PathBuf;

pub use dir::{Dir, Entry, Kind, Lock, Meta};
pub use input::{open_input, read_input, Input};

/// Why a file or directory was refused or could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// A system call on the path failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A symbolic link where ferry opens, creates or removes something below a directory.
    #[error(
        "{} is a symbolic link: ferry never follows a link inside a directory it reads or \
         writes (another user may have planted it); remove the link or choose another directory",
        path.display()
    )]
    Symlink {
        /// The link.
        path: PathBuf,
    },
    /// Not a regular file (a FIFO, a device, a socket, a directory).
    #[error("{} is {kind}, not a regular file", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is (`"a FIFO"`, `"a character device"`, …).
        kind: &'static str,
    },
    /// Not a directory where one was expected.
    #[error("{} is not a directory", path.display())]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// A file over the limit of what the caller reads of it.
    #[error(
        "{} is {}over the limit of {limit} bytes ferry reads of such a file",
        path.display(),
        size.map(|s| format!("{s} bytes, ")).unwrap_or_default()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size, when known before reading (`None`: it grew past the limit while read).
        size: Option<u64>,
        /// The limit.
        limit: u64,
    },
    /// A directory to write into that another user owns.
    #[error(
        "{} belongs to uid {owner}, not to you (uid {me}) or root: its owner could replace or \
         redirect what ferry writes there; choose a directory of your own",
        path.display()
    )]
    ForeignOwner {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        me: u32,
    },
    /// A directory to write into that every user may write and that has no sticky bit.
    #[error(
        "{} can be written by every user and has no sticky bit: another user could plant or \
         replace files in it; choose a directory of your own (or remove the others' write \
         permission: chmod o-w)",
        path.display()
    )]
    WorldWritable {
        /// The directory.
        path: PathBuf,
    },
    /// A name that is not a relative path inside the directory (empty, absolute, `.`, `..`, a
    /// NUL byte).
    #[error("{name:?} is not a path inside {}", dir.display())]
    BadName {
        /// The directory.
        dir: PathBuf,
        /// The name.
        name: String,
    },
}

impl FsError {
    /// Whether this is "no such file or directory".
    pub fn is_not_found(&self) -> bool {
        matches!(self, FsError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// The path the error is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            FsError::Io { path, .. }
            | FsError::Symlink { path }
            | FsError::NotAFile { path, .. }
            | FsError::NotADirectory { path }
            | FsError::TooLarge { path, .. }
            | FsError::ForeignOwner { path, .. }
            | FsError::WorldWritable { path } => path,
            FsError::BadName { dir, .. } => dir,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> FsError {
        let path = path.into();
        move |source| FsError::Io { path, source }
    }
}

impl From<FsError> for io::Error {
    /// Keeps the kind a caller matches on (`NotFound`, `WouldBlock`, …) and the message.
    fn from(e: FsError) -> io::Error {
        let kind = match &e {
            FsError::Io { source, .. } => source.kind(),
            FsError::TooLarge { .. } => io::ErrorKind::FileTooLarge,
            FsError::ForeignOwner { .. } | FsError::WorldWritable { .. } => {
                io::ErrorKind::PermissionDenied
            }
            FsError::NotADirectory { .. } => io::ErrorKind::NotADirectory,
            FsError::BadName { .. } | FsError::NotAFile { .. } => io::ErrorKind::InvalidInput,
            FsError::Symlink { .. } => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, e)
    }
}

/// This process's effective uid.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Whether a directory owned by `uid` with permission bits `mode` may be written by this
/// process: owned by it or by root, and not writable by every user unless sticky (the policy
/// of [`Dir::open_writable`], as a function of its inputs).
///
/// # Errors
/// [`FsError::ForeignOwner`], [`FsError::WorldWritable`], naming `path`.
///
/// # Examples
/// ```
/// use std::path::Path;
/// let me = ferry_fs::euid();
/// let p = Path::new("/d");
/// assert!(ferry_fs::check_writable_dir(p, me, 0o755, me).is_ok());
/// assert!(ferry_fs::check_writable_dir(p, 0, 0o1777, me).is_ok()); // /tmp
/// assert!(ferry_fs::check_writable_dir(p, me, 0o777, me).is_err()); // anyone may plant links
/// assert!(ferry_fs::check_writable_dir(p, me + 1, 0o755, me).is_err() || me + 1 == 0);
/// ```
pub fn check_writable_dir(
    path: &std::path::Path,
    owner: u32,
    mode: u32,
    me: u32,
) -> Result<(), FsError> {
    if owner != me && owner != 0 {
        return Err(FsError::ForeignOwner { path: path.to_path_buf(), owner, me });
    }
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Err(FsError::WorldWritable { path: path.to_path_buf() });
    }
    Ok(())
}

/// What a file type is called in a message.
pub(crate) fn kind_name(t: rustix::fs::FileType) -> &'static str {
    use rustix::fs::FileType as T;
    match t {
        T::RegularFile => "a regular file",
        T::Directory => "a directory",
        T::Symlink => "a symbolic link",
        T::Fifo => "a FIFO",
        T::Socket => "a socket",
        T::CharacterDevice => "a character device",
        T::BlockDevice => "a block device",
        _ => "of an unknown kind",
    }
}

/// Splits `rel` into its components, refusing anything that is not a relative path inside a
/// directory.
pub(crate) fn components<'a>(dir: &std::path::Path, rel: &'a str) -> Result<Vec<&'a str>, FsError> {
    let parts: Vec<&str> = rel.split('/').collect();
    let ok = !rel.is_empty()
        && parts.iter().all(|p| !p.is_empty() && *p != "." && *p != ".." && !p.contains('\0'));
    if !ok {
        return Err(FsError::BadName { dir: dir.to_path_buf(), name: rel.to_string() });
    }
    Ok(parts)
}

#[cfg(test)]
mod tests;
