use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use super::*;

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("ferry-fs-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A file outside the directory under test, and its content: what a planted link points at.
fn victim(s: &Scratch) -> PathBuf {
    let v = s.0.join("victim");
    fs::write(&v, b"precious").unwrap();
    v
}

fn mkfifo(p: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_bits_truncate(0o600),
        0,
    )
    .unwrap();
}

#[test]
fn a_planted_link_below_the_handle_is_never_followed() {
    let s = Scratch::new("links");
    let v = victim(&s);
    let out = s.0.join("out");
    fs::create_dir(&out).unwrap();
    fs::create_dir(s.0.join("elsewhere")).unwrap();
    fs::write(s.0.join("elsewhere/precious.txt"), b"keep").unwrap();
    symlink(&v, out.join("summary.json")).unwrap();
    symlink(s.0.join("elsewhere"), out.join("args_dump")).unwrap();
    let d = Dir::open_writable(&out, false).unwrap();
    // Reading the link, descending through the linked directory, creating in it, removing
    // through it: each names the link.
    assert!(matches!(d.read("summary.json", 100), Err(FsError::Symlink { .. })));
    match d.read("args_dump/precious.txt", 100) {
        Err(FsError::Symlink { path }) => assert_eq!(path, out.join("args_dump")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(d.create_sub("args_dump"), Err(FsError::Symlink { .. })));
    assert!(matches!(d.remove_file("args_dump/precious.txt"), Err(FsError::Symlink { .. })));
    assert!(matches!(d.create_temp("args_dump/x"), Err(FsError::BadName { .. })));
    assert!(matches!(d.stat("args_dump/precious.txt"), Err(FsError::Symlink { .. })));
    // A new file over the link's name is refused, not opened; a rename replaces the link.
    match d.create_new("summary.json") {
        Err(FsError::Io { source, .. }) => assert_eq!(source.kind(), io::ErrorKind::AlreadyExists),
        other => panic!("{other:?}"),
    }
    let (mut f, tmp) = d.create_temp("summary.json").unwrap();
    f.write_all(b"{}").unwrap();
    d.rename(&tmp, "summary.json").unwrap();
    assert_eq!(fs::read(&v).unwrap(), b"precious");
    assert_eq!(fs::read(s.0.join("elsewhere/precious.txt")).unwrap(), b"keep");
    assert_eq!(fs::read(out.join("summary.json")).unwrap(), b"{}");
    // The stat of a link is the link's.
    assert_eq!(d.stat("args_dump").unwrap().unwrap().kind, Kind::Symlink);
    // Removing a link removes the link, not its target.
    assert!(d.remove_file("args_dump").unwrap());
    assert!(s.0.join("elsewhere/precious.txt").exists());
}

#[test]
fn temp_names_are_unpredictable_and_new() {
    let s = Scratch::new("temps");
    let d = Dir::open_writable(&s.0, false).unwrap();
    let names: Vec<String> = (0..64).map(|_| d.create_temp("deps.json").unwrap().1).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len());
    let pid = std::process::id();
    for n in &names {
        let digits = n.strip_prefix(&format!(".deps.json.tmp.{pid}.")).unwrap();
        assert_eq!(digits.len(), 16, "{n}");
        assert!(digits.bytes().all(|b| b.is_ascii_hexdigit()), "{n}");
    }
    // Consecutive names are not consecutive numbers (a counter would be guessable).
    let vals: Vec<u64> =
        names.iter().map(|n| u64::from_str_radix(&n[n.len() - 16..], 16).unwrap()).collect();
    assert!(vals.windows(2).all(|w| w[1].wrapping_sub(w[0]) > 1 << 20), "{vals:x?}");
}

#[test]
fn the_lock_file_must_be_a_regular_file_of_the_directory() {
    let s = Scratch::new("lock");
    let v = victim(&s);
    let out = s.0.join("out");
    fs::create_dir(&out).unwrap();
    symlink(s.0.join("nologin"), out.join(".ferry.lock")).unwrap();
    let d = Dir::open_writable(&out, false).unwrap();
    assert!(matches!(d.try_lock(".ferry.lock"), Err(FsError::Symlink { .. })));
    assert!(!s.0.join("nologin").exists(), "the link's target was created");
    fs::remove_file(out.join(".ferry.lock")).unwrap();
    mkfifo(&out.join(".ferry.lock"));
    assert!(matches!(d.try_lock(".ferry.lock"), Err(FsError::NotAFile { .. })));
    fs::remove_file(out.join(".ferry.lock")).unwrap();
    let held = d.try_lock(".ferry.lock").unwrap().expect("free");
    assert!(d.try_lock(".ferry.lock").unwrap().is_none(), "a second lock while held");
    drop(held);
    assert!(d.try_lock(".ferry.lock").unwrap().is_some());
    assert_eq!(fs::read(&v).unwrap(), b"precious");
}

#[test]
fn fifos_devices_and_directories_are_refused_before_any_read() {
    let s = Scratch::new("kinds");
    mkfifo(&s.0.join("fifo"));
    fs::create_dir(s.0.join("dir")).unwrap();
    let d = Dir::open(&s.0).unwrap();
    match d.open_file("fifo", 1 << 20) {
        Err(FsError::NotAFile { kind, .. }) => assert_eq!(kind, "a FIFO"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(d.open_file("dir", 1 << 20), Err(FsError::NotAFile { .. })));
    assert!(matches!(open_input(&s.0.join("fifo"), 1 << 20), Err(FsError::NotAFile { .. })));
    match open_input(Path::new("/dev/zero"), 1 << 20) {
        Err(FsError::NotAFile { kind, .. }) => assert_eq!(kind, "a character device"),
        other => panic!("{other:?}"),
    }
    assert!(d.open_file("missing", 1).unwrap_err().is_not_found());
}

#[test]
fn a_file_over_the_limit_is_refused_by_its_size_and_by_the_read() {
    let s = Scratch::new("limit");
    // A 10 GB sparse file: refused from its size, nothing read.
    let big = fs::File::create(s.0.join("big")).unwrap();
    big.set_len(10 << 30).unwrap();
    let d = Dir::open(&s.0).unwrap();
    match d.open_file("big", 1 << 30) {
        Err(FsError::TooLarge { size, limit, .. }) => {
            assert_eq!((size, limit), (Some(10 << 30), 1 << 30))
        }
        other => panic!("{other:?}"),
    }
    // A file that grows after it was opened: the read stops at the limit with an error.
    fs::write(s.0.join("grows"), b"12345").unwrap();
    let mut input = d.open_file("grows", 8).unwrap();
    assert_eq!(input.len(), 5);
    fs::OpenOptions::new()
        .append(true)
        .open(s.0.join("grows"))
        .unwrap()
        .write_all(b"6789")
        .unwrap();
    let mut buf = Vec::new();
    let e = input.read_to_end(&mut buf).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
    assert_eq!(buf, b"12345678");
    // Exactly at the limit is fine.
    assert_eq!(d.read("grows", 9).unwrap(), b"123456789");
    assert!(matches!(d.read("grows", 8), Err(FsError::TooLarge { size: Some(9), .. })));
}

#[test]
fn directories_others_may_write_are_refused_for_writing() {
    let s = Scratch::new("modes");
    let open = s.0.join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    assert!(matches!(Dir::open_writable(&open, false), Err(FsError::WorldWritable { .. })));
    // Sticky, like /tmp: others cannot replace or remove what this user creates there.
    fs::set_permissions(&open, fs::Permissions::from_mode(0o1777)).unwrap();
    let d = Dir::open_writable(&open, false).unwrap();
    // A subdirectory is checked too.
    fs::create_dir(open.join("sub")).unwrap();
    fs::set_permissions(open.join("sub"), fs::Permissions::from_mode(0o757)).unwrap();
    assert!(matches!(d.create_sub("sub"), Err(FsError::WorldWritable { .. })));
    // Reading does not care.
    Dir::open(&open).unwrap().sub("sub").unwrap();
}

#[test]
fn a_directory_of_another_user_is_refused_for_writing() {
    if euid() != 0 {
        eprintln!("skipped: making a directory of another user needs root");
        return;
    }
    let s = Scratch::new("owner");
    let theirs = s.0.join("theirs");
    fs::create_dir(&theirs).unwrap();
    rustix::fs::chown(&theirs, Some(rustix::fs::Uid::from_raw(65534)), None).unwrap();
    match Dir::open_writable(&theirs, false) {
        Err(FsError::ForeignOwner { owner, me, .. }) => assert_eq!((owner, me), (65534, 0)),
        other => panic!("{other:?}"),
    }
    // A subdirectory of another user inside one's own.
    let mine = s.0.join("mine");
    fs::create_dir_all(mine.join("sub")).unwrap();
    rustix::fs::chown(mine.join("sub"), Some(rustix::fs::Uid::from_raw(65534)), None).unwrap();
    let d = Dir::open_writable(&mine, false).unwrap();
    assert!(matches!(d.create_sub("sub"), Err(FsError::ForeignOwner { .. })));
    // The output path itself a link that another user planted.
    symlink(&mine, s.0.join("planted")).unwrap();
    rustix::fs::chownat(
        rustix::fs::CWD,
        s.0.join("planted"),
        Some(rustix::fs::Uid::from_raw(65534)),
        None,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .unwrap();
    assert!(matches!(
        Dir::open_writable(&s.0.join("planted"), false),
        Err(FsError::Symlink { .. })
    ));
    // One's own link is the user's choice.
    symlink(&mine, s.0.join("own")).unwrap();
    Dir::open_writable(&s.0.join("own"), false).unwrap();
}

#[test]
fn names_that_leave_the_directory_are_refused() {
    let s = Scratch::new("names");
    let d = Dir::open_writable(&s.0, false).unwrap();
    for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/", "nul\0"] {
        assert!(matches!(d.read(bad, 10), Err(FsError::BadName { .. })), "{bad:?}");
        assert!(matches!(d.remove_file(bad), Err(FsError::BadName { .. })), "{bad:?}");
    }
}

#[test]
fn entries_list_links_as_links_and_remove_dir_keeps_a_full_one() {
    let s = Scratch::new("entries");
    fs::create_dir_all(s.0.join("a/b")).unwrap();
    fs::write(s.0.join("a/b/f"), b"x").unwrap();
    symlink("/etc", s.0.join("l")).unwrap();
    let d = Dir::open(&s.0).unwrap();
    let mut e = d.entries().unwrap();
    e.sort_by(|x, y| x.name.cmp(&y.name));
    assert_eq!(
        e,
        [
            Entry { name: "a".into(), kind: Kind::Dir },
            Entry { name: "l".into(), kind: Kind::Symlink }
        ]
    );
    assert!(!d.remove_dir("a/b").unwrap(), "a directory holding a file stays");
    assert!(d.remove_file("a/b/f").unwrap());
    assert!(!d.remove_file("a/b/f").unwrap());
    assert!(d.remove_dir("a/b").unwrap());
    assert!(matches!(
        d.remove_dir("l"),
        Err(FsError::NotADirectory { .. } | FsError::Symlink { .. })
    ));
    assert!(Path::new("/etc").exists());
}
