//! Where simulated devices keep their files: a directory private to the user, and the
//! per-process directories inside it.
//!
//! The device root is `$XDG_RUNTIME_DIR/ferry` when `XDG_RUNTIME_DIR` names a directory (the
//! per-user runtime directory of a login session), else `$TMPDIR/ferry-<uid>` (`/tmp` without
//! `TMPDIR`). It is created mode 0700; an existing one must be a directory (not a symlink) owned
//! by the user, and loses any group or other permission bits. Nothing in it is shared between
//! users, so one user's run never locks another out.
//!
//! A process's devices live in `runner-<pid>-<start>-<n>/` below it, `<start>` being the
//! process's start time (clock ticks since boot, `/proc/<pid>/stat`), so a directory outlives
//! its process only when the process was killed, and a later process with the same pid is not
//! mistaken for its owner: [`sweep_stale`] removes such directories, [`remove_own`] this
//! process's (what a run stopped by a signal does before it exits).
//!
//! # Examples
//! ```
//! let root = ferry_sim::device_root::user_root();
//! ferry_sim::device_root::ensure_private(&root).unwrap();
//! let mine = root.join(ferry_sim::device_root::process_dir_name(0));
//! assert!(ferry_sim::device_root::owner_of(mine.file_name().unwrap().to_str().unwrap())
//!     .is_some_and(|(pid, _)| pid == std::process::id()));
//! ```

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

/// The user's device root (see the [module docs](self)); not created.
pub fn user_root() -> PathBuf {
    root_for(std::env::var_os("XDG_RUNTIME_DIR"), std::env::var_os("TMPDIR"), euid())
}

/// The device root for the environment's `XDG_RUNTIME_DIR` and `TMPDIR` and user `uid`: a
/// variable counts only when it names an absolute path to an existing directory (a relative
/// `TMPDIR` would put the root in the working directory, a missing one would be created),
/// else `/tmp`.
fn root_for(xdg: Option<std::ffi::OsString>, tmp: Option<std::ffi::OsString>, uid: u32) -> PathBuf {
    let usable = |v: Option<std::ffi::OsString>| {
        v.map(PathBuf::from).filter(|d| d.is_absolute() && d.is_dir())
    };
    if let Some(d) = usable(xdg) {
        return d.join("ferry");
    }
    usable(tmp).unwrap_or_else(|| PathBuf::from("/tmp")).join(format!("ferry-{uid}"))
}

fn euid() -> u32 {
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Creates `dir` (and its parents) with mode 0700, or checks an existing one: a directory, not
/// a symlink, owned by this user; group and other permissions are removed.
///
/// # Errors
/// The creation failed, or `dir` is not a directory of this user's
/// ([`io::ErrorKind::PermissionDenied`], naming the owner).
pub fn ensure_private(dir: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
            // `recursive` gives the mode to directories it creates; one created by a racing
            // process is checked below like any existing one.
            ensure_private_existing(dir)
        }
        Err(e) => Err(e),
        Ok(_) => ensure_private_existing(dir),
    }
}

fn ensure_private_existing(dir: &Path) -> io::Result<()> {
    let m = std::fs::symlink_metadata(dir)?;
    if !m.file_type().is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("device root {} is not a directory (a symlink or a file)", dir.display()),
        ));
    }
    if m.uid() != euid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("device root {} belongs to uid {}, not to this user", dir.display(), m.uid()),
        ));
    }
    if m.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Start time of process `pid` (clock ticks since boot), if it exists.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `comm` (field 2) is in parentheses and may hold spaces: count fields after its last `)`.
    // Field 3 is the first after it; the start time is field 22.
    stat.rsplit_once(')')?.1.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// The name of this process's `n`-th device directory: `runner-<pid>-<start>-<n>`.
pub fn process_dir_name(n: u64) -> String {
    let pid = std::process::id();
    format!("runner-{pid}-{}-{n}", start_time(pid).unwrap_or(0))
}

/// The process (pid, start time) a device directory name belongs to: `runner-<pid>-<start>-<n>`,
/// or an older `runner-<pid>-<n>` (start time `None`).
pub fn owner_of(name: &str) -> Option<(u32, Option<u64>)> {
    fn num<T: std::str::FromStr>(s: &str) -> Option<T> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
    }
    let parts: Vec<&str> = name.strip_prefix("runner-")?.split('-').collect();
    match parts[..] {
        [pid, start, n] => {
            num::<u64>(n)?;
            Some((num(pid)?, Some(num(start)?)))
        }
        [pid, n] => {
            num::<u64>(n)?;
            Some((num(pid)?, None))
        }
        _ => None,
    }
}

/// Whether the process that owns a directory named by [`owner_of`] is still running: its pid
/// exists and (when the name has one) has the same start time.
fn is_live(pid: u32, start: Option<u64>) -> bool {
    match (start_time(pid), start) {
        (None, _) => false,
        (Some(now), Some(then)) => now == then,
        (Some(_), None) => true,
    }
}

/// Removes the device directories in `root` whose process is gone (killed before it could
/// remove them); returns how many it removed. Names it does not recognise stay.
pub fn sweep_stale(root: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(root) else { return 0 };
    let mut removed = 0;
    for e in rd.flatten() {
        let name = e.file_name();
        let Some((pid, start)) = name.to_str().and_then(owner_of) else { continue };
        if !is_live(pid, start) && std::fs::remove_dir_all(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Set once [`remove_own`] starts: no device directory or file is created from then on.
static HALTED: AtomicBool = AtomicBool::new(false);

/// Held (shared) by every creation of a device directory or file, from its [`halted`] check to
/// its end; [`remove_own`] takes it exclusively after setting [`HALTED`], so it removes only
/// once every creation that found the process running has finished, and none starts after.
static CREATING: RwLock<()> = RwLock::new(());

/// Whether this process has stopped creating device directories and files ([`remove_own`]
/// ran): a device about to create one returns an error instead.
pub fn halted() -> bool {
    // Acquire: pairs with the Release store in `remove_own`.
    HALTED.load(Ordering::Acquire)
}

/// Permission to create device directories and files while it lives: `None` once this process
/// is removing its own ([`remove_own`]). Hold it from the check to the end of the creation (a
/// directory, a file written and renamed), so the removal cannot miss what it makes. Not
/// re-entrant: a thread holding one must not ask for another (the halt may be waiting).
pub fn begin_create() -> Option<CreateGuard> {
    let guard = CREATING.read().unwrap_or_else(|p| p.into_inner());
    if halted() {
        return None;
    }
    Some(CreateGuard { _held: guard })
}

/// A creation of device directories or files in progress ([`begin_create`]).
#[derive(Debug)]
pub struct CreateGuard {
    _held: RwLockReadGuard<'static, ()>,
}

/// Times [`remove_own`] looks again for a directory of this process, 1 ms apart, when one
/// could not be removed (a file system error).
pub const REMOVE_TRIES: u32 = 20;

/// Removes this process's device directories in `root` (best effort): for a process about to
/// exit without running its destructors (stopped by a signal). First stops this process from
/// creating any ([`halted`]) and waits for every creation already past its check
/// ([`begin_create`]) to finish, however long the scheduler keeps it off the CPU; then removes
/// them (retried at most [`REMOVE_TRIES`] times, 1 ms apart, while one resists removal).
pub fn remove_own(root: &Path) {
    // Release: pairs with the Acquire load in `halted`.
    HALTED.store(true, Ordering::Release);
    drop(CREATING.write().unwrap_or_else(|p| p.into_inner()));
    remove_mine(root);
}

/// [`remove_own`]'s removal, retried, without halting (the halt is for the whole process).
fn remove_mine(root: &Path) {
    let me = (std::process::id(), start_time(std::process::id()));
    for _ in 0..REMOVE_TRIES {
        let Ok(rd) = std::fs::read_dir(root) else { return };
        let mut left = false;
        for e in rd.flatten() {
            if let Some((pid, start)) = e.file_name().to_str().and_then(owner_of) {
                if pid == me.0 && (start.is_none() || start == me.1) {
                    left |= std::fs::remove_dir_all(e.path()).is_err() || e.path().exists();
                }
            }
        }
        if !left {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_an_absolute_existing_directory_is_a_root() {
        use super::root_for;
        use std::path::PathBuf;
        let os = |s: &str| Some(std::ffi::OsString::from(s));
        assert_eq!(root_for(None, os("/nonexistent-ferry"), 7), PathBuf::from("/tmp/ferry-7"));
        assert_eq!(root_for(None, os("relative/tmp"), 7), PathBuf::from("/tmp/ferry-7"));
        assert_eq!(root_for(os("relative"), os("/"), 7), PathBuf::from("/ferry-7"));
        assert_eq!(root_for(os("/"), None, 7), PathBuf::from("/ferry"));
        assert_eq!(root_for(None, None, 7), PathBuf::from("/tmp/ferry-7"));
    }

    use super::*;

    #[test]
    fn names_round_trip_and_foreign_names_are_ignored() {
        let mine = process_dir_name(7);
        let (pid, start) = owner_of(&mine).unwrap();
        assert_eq!(pid, std::process::id());
        assert_eq!(start, start_time(pid));
        assert!(start.is_some_and(|s| s > 0), "this process has a start time");
        assert_eq!(owner_of("runner-12-3"), Some((12, None)));
        for bad in ["runner-", "runner-x-1", "runner-1-2-x", "runner-1-2-3-4", "other-1-2-3"] {
            assert_eq!(owner_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn stale_directories_go_live_and_foreign_ones_stay() {
        let root = std::env::temp_dir().join(format!("ferry-root-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        ensure_private(&root).unwrap();
        let me = std::process::id();
        let start = start_time(me).unwrap();
        let live = root.join(process_dir_name(0));
        // Same pid, another start time: a process that had this pid before.
        let reused = root.join(format!("runner-{me}-{}-0", start + 1));
        // A pid above the kernel's maximum: never running.
        let dead = root.join("runner-4000000000-5-0");
        let old_dead = root.join("runner-4000000000-1");
        let foreign = root.join("notes");
        for d in [&live, &reused, &dead, &old_dead, &foreign] {
            std::fs::create_dir_all(d.join("sub")).unwrap();
        }
        assert_eq!(sweep_stale(&root), 3);
        assert!(live.exists() && foreign.exists());
        assert!(!reused.exists() && !dead.exists() && !old_dead.exists());
        remove_mine(&root);
        assert!(!live.exists() && foreign.exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_root_is_private_and_must_be_the_users() {
        let base = std::env::temp_dir().join(format!("ferry-root-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("a/b");
        ensure_private(&root).unwrap();
        let mode = std::fs::metadata(&root).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // Opened up by someone: closed again.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private(&root).unwrap();
        assert_eq!(std::fs::metadata(&root).unwrap().mode() & 0o777, 0o700);
        // A symlink (someone else's directory in disguise) or a file is refused.
        let link = base.join("link");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        let e = ensure_private(&link).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        std::fs::write(base.join("file"), b"").unwrap();
        assert!(ensure_private(&base.join("file")).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_user_root_is_per_user() {
        let r = user_root();
        let name = r.file_name().unwrap().to_str().unwrap().to_string();
        assert!(name == "ferry" || name == format!("ferry-{}", euid()), "{}", r.display());
    }
}
