//! ferry on a shared machine, through the binary: another local user's links, lock files,
//! subdirectories, forged manifests and directories, and files that are FIFOs, devices or
//! 10 GB sparse files where a profile, a workload or a kernel library names a file.
//!
//! Every writing command (`run`, `view`, `scopes`, `trace`, `dump export`, `figures`,
//! `kernels new`) meets each planted thing; afterwards every file outside the directory it
//! writes is byte-identical and nothing was created there, and the command either refused
//! (exit 1, a message naming the thing) or wrote safely (exit 0). Where the test runs as root
//! (CI), a directory of another user is made with `chown` to `nobody` (65534); elsewhere that
//! case prints why it is skipped. Each reading command answers a FIFO, a device and a 10 GB
//! sparse file with an error naming the file, without reading it: its peak RSS (from `wait4`)
//! stays under 256 MB. Hangs are caught by a generous bound (the child is killed and the test
//! fails naming the command), never by timing.
mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{ferry, scratch};

/// What a command may use at most, in KiB (`ru_maxrss`): far below what reading a 10 GB file
/// (or `/dev/zero` until memory runs out) takes.
const MAX_RSS_KIB: i64 = 256 * 1024;
/// A hang guard, not a timing assertion: a command still running after this long is killed
/// and fails the test.
const HANG_GUARD: Duration = Duration::from_secs(300);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `cmd`, returning its output and peak RSS (KiB); kills it and fails past [`HANG_GUARD`].
fn run_measured(mut cmd: Command, what: &str) -> (Output, i64) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning ferry");
    let pid = child.id() as libc::pid_t;
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out_pipe.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err_pipe.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + HANG_GUARD;
    let (status, rss) = loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `pid` is our child, not yet reaped (only this loop waits for it); `status`
        // and `usage` are valid for writes.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break (status, usage.ru_maxrss);
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("`{what}` still ran after {HANG_GUARD:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // The child was reaped by wait4: its status from the raw value.
    let status = std::os::unix::process::ExitStatusExt::from_raw(status);
    std::mem::forget(child);
    let o = Output { status, stdout: out_t.join().unwrap(), stderr: err_t.join().unwrap() };
    (o, rss)
}

fn ferry_measured(args: &[&str]) -> (Output, i64) {
    let mut c = ferry();
    c.args(args);
    run_measured(c, &format!("ferry {}", args.join(" ")))
}

fn ok(o: &Output, what: &str) {
    assert!(o.status.success(), "{what}: {}\n{}", text(&o.stdout), text(&o.stderr));
}

/// A refusal: exit 1, no panic, the message contains every one of `names`.
fn refused(o: &Output, what: &str, names: &[&str]) -> String {
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{what}: expected a refusal\n{}\n{e}", text(&o.stdout));
    assert!(!e.contains("panicked"), "{what}: {e}");
    for n in names {
        assert!(e.contains(n), "{what}: the message does not name {n:?}: {e}");
    }
    e
}

/// Everything under `root` except below `skip`: path → (kind, content), links as links.
fn snapshot(root: &Path, skip: &Path) -> BTreeMap<PathBuf, (String, Vec<u8>)> {
    let mut m = BTreeMap::new();
    fn walk(d: &Path, skip: &Path, m: &mut BTreeMap<PathBuf, (String, Vec<u8>)>) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if p.starts_with(skip) {
                continue;
            }
            let t = e.file_type().unwrap();
            if t.is_symlink() {
                let to = std::fs::read_link(&p).unwrap();
                m.insert(p, ("link".into(), to.into_os_string().into_encoded_bytes()));
            } else if t.is_dir() {
                m.insert(p.clone(), ("dir".into(), Vec::new()));
                walk(&p, skip, m);
            } else if t.is_file() {
                m.insert(p.clone(), ("file".into(), std::fs::read(&p).unwrap()));
            } else {
                m.insert(p, ("other".into(), Vec::new()));
            }
        }
    }
    walk(root, skip, &mut m);
    m
}

/// A scratch area: `out/` (where the command writes), `victim` (a 0600 file outside it) and
/// `elsewhere/precious.txt` (a directory outside it).
struct Area {
    root: PathBuf,
    out: PathBuf,
    victim: PathBuf,
    elsewhere: PathBuf,
}

impl Area {
    fn new(tag: &str) -> Area {
        let root = scratch(&format!("hostile-fs-{tag}"));
        let victim = root.join("victim");
        std::fs::write(&victim, b"precious, 0600, the user's").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("precious.txt"), b"keep me").unwrap();
        Area { out: root.join("out"), root, victim, elsewhere }
    }

    /// What lies outside `out`, to compare after a command.
    fn outside(&self) -> BTreeMap<PathBuf, (String, Vec<u8>)> {
        snapshot(&self.root, &self.out)
    }

    /// Fails unless everything outside `out` is as `before`.
    fn unchanged(&self, before: &BTreeMap<PathBuf, (String, Vec<u8>)>, what: &str) {
        let now = self.outside();
        for (p, v) in before {
            assert_eq!(now.get(p), Some(v), "{what}: {} changed or went", p.display());
        }
        for p in now.keys() {
            assert!(before.contains_key(p), "{what}: {} was created outside", p.display());
        }
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Links under every temp name a command could give `names` in `dir` for the next pids (the
/// names ferry used to give: `.<name>.tmp.<pid>.<n>`, and the figures' `<file>.tmp`), each to
/// `target`.
fn plant_temp_links(dir: &Path, names: &[&str], target: &Path) {
    // The next pids the system hands out start after this one's.
    let next = Command::new("true").spawn().unwrap();
    let base = next.id();
    let _ = { next }.wait();
    for name in names {
        let (sub, file) = match name.rsplit_once('/') {
            Some((s, f)) => (dir.join(s), f),
            None => (dir.to_path_buf(), *name),
        };
        std::fs::create_dir_all(&sub).unwrap();
        for pid in base..base + 16 {
            for n in 0..64 {
                let _ = symlink(target, sub.join(format!(".{file}.tmp.{pid}.{n}")));
            }
        }
        let _ = symlink(target, sub.join(format!("{file}.tmp")));
    }
}

const DFX: [&str; 8] =
    ["--swimlane", "1", "--pmu", "1", "--dep-gen", "--dump-args", "3", "--scope-stats"];

fn run_args<'a>(out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["run", "--small", "--example", "vector", "--aic", "2", "--aiv", "4"];
    v.extend(DFX);
    v.extend(extra);
    v.extend(["--out", out]);
    v
}

/// A complete profile with all five subsystems in the original formats, made once per test
/// binary; tests copy it.
fn pristine() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = scratch("hostile-fs-pristine").join("run");
        let (o, _) = ferry_measured(&run_args(d.to_str().unwrap(), &["--original-formats"]));
        ok(&o, "the pristine run");
        d
    })
}

/// The same profile as the default output writes it: its native profile alone.
fn pristine_native() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = scratch("hostile-fs-pristine-native").join("run");
        let (o, _) = ferry_measured(&run_args(d.to_str().unwrap(), &[]));
        ok(&o, "the pristine native run");
        d
    })
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn planted_temp_name_links_are_never_written_through() {
    let a = Area::new("temps");
    let before = a.outside();
    let names = [
        "summary.json",
        "vector.f32",
        "ferry-manifest.json",
        "chip_swimlane_records.json",
        "pmu.csv",
        "deps.json",
        "trace.perfetto-trace",
        "args_dump/args_dump.json",
        "args_dump/args.bin",
        "scope_stats/scope_stats.jsonl",
    ];
    plant_temp_links(&a.out, &names, &a.victim);
    let (o, _) = ferry_measured(&run_args(s(&a.out), &[]));
    ok(&o, "run beside planted temp links");
    // Written safely: the run's files are whole, the links are still links to the victim.
    ferry_profile::Manifest::verified(&a.out).unwrap();
    for planted in ["summary.json.tmp", "args_dump/args.bin.tmp"] {
        assert!(std::fs::symlink_metadata(a.out.join(planted)).unwrap().is_symlink(), "{planted}");
    }
    // The analysis commands that write into the run's directory, and `-o` beside links.
    plant_temp_links(&a.out, &["swimlane.html", "scope_stats/scope_stats.html"], &a.victim);
    for cmd in [vec!["view", s(&a.out)], vec!["scopes", s(&a.out)], vec!["trace", s(&a.out)]] {
        let (o, _) = ferry_measured(&cmd);
        ok(&o, &cmd.join(" "));
    }
    let side = a.out.join("side");
    std::fs::create_dir(&side).unwrap();
    plant_temp_links(&side, &["page.html", "fig.md"], &a.victim);
    symlink(&a.victim, side.join("page.html")).unwrap();
    let page = side.join("page.html");
    let (o, _) = ferry_measured(&["view", s(&a.out), "-o", s(&page)]);
    ok(&o, "view -o over a planted link");
    assert!(!std::fs::symlink_metadata(&page).unwrap().is_symlink(), "the link was replaced");
    let export = a.out.join("export");
    let (o, _) = ferry_measured(&["dump", "export", s(&a.out), "-o", s(&export)]);
    ok(&o, "dump export");
    // Again, with links planted under every name the export writes.
    let written: Vec<String> = std::fs::read_dir(&export)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    for n in &written {
        std::fs::remove_file(export.join(n)).unwrap();
        symlink(&a.victim, export.join(n)).unwrap();
    }
    let refs: Vec<&str> = written.iter().map(String::as_str).collect();
    plant_temp_links(&export, &refs, &a.victim);
    let (o, _) = ferry_measured(&["dump", "export", s(&a.out), "-o", s(&export)]);
    ok(&o, "dump export over planted links");
    // figures -o: its old fixed temp name `<file>.tmp`, planted.
    let bench = a.out.join("b1.json");
    std::fs::write(&bench, br#"{"areas": {}}"#).unwrap();
    let (o, _) = ferry_measured(&["figures", s(&bench), "-o", s(&side.join("fig.md"))]);
    ok(&o, "figures -o beside fig.md.tmp -> victim");
    a.unchanged(&before, "temp-name links");
}

#[test]
fn a_planted_lock_file_link_is_refused_and_its_target_not_created() {
    let a = Area::new("lock");
    let target = a.root.join("nologin");
    std::fs::create_dir_all(&a.out).unwrap();
    symlink(&target, a.out.join(".ferry.lock")).unwrap();
    let before = a.outside();
    let (o, _) = ferry_measured(&run_args(s(&a.out), &[]));
    refused(&o, "run with .ferry.lock -> nologin", &[".ferry.lock", "symbolic link"]);
    a.unchanged(&before, "run");
    // A profile whose lock was replaced by a link: the analysis commands that record their
    // output in its manifest refuse too.
    let p = a.out.join("p");
    copy_dir(pristine(), &p);
    symlink(&target, p.join(".ferry.lock")).unwrap_or(());
    let _ = std::fs::remove_file(p.join(".ferry.lock"));
    symlink(&target, p.join(".ferry.lock")).unwrap();
    for cmd in [vec!["trace", s(&p)], vec!["view", s(&p)], vec!["scopes", s(&p)]] {
        let (o, _) = ferry_measured(&cmd);
        refused(&o, &cmd.join(" "), &[".ferry.lock", "symbolic link"]);
    }
    assert!(!target.exists(), "the link's target was created");
    a.unchanged(&before, "analysis commands");
}

#[test]
fn symlinked_subdirectories_are_refused_naming_them() {
    let a = Area::new("subdirs");
    std::fs::create_dir_all(&a.out).unwrap();
    symlink(&a.elsewhere, a.out.join("args_dump")).unwrap();
    let before = a.outside();
    for force in [false, true] {
        let extra: &[&str] = if force { &["--force"] } else { &[] };
        let (o, _) = ferry_measured(&run_args(s(&a.out), extra));
        refused(&o, "run with args_dump -> elsewhere", &["args_dump", "symbolic link"]);
    }
    a.unchanged(&before, "run");
    // A complete profile whose scope_stats/ became a link: `ferry scopes` writes nothing there.
    let p = a.out.join("p");
    copy_dir(pristine(), &p);
    let moved = a.root.join("moved-scope-stats");
    std::fs::rename(p.join("scope_stats"), &moved).unwrap();
    symlink(&moved, p.join("scope_stats")).unwrap();
    let before = a.outside();
    let (o, _) = ferry_measured(&["scopes", s(&p)]);
    refused(&o, "scopes through scope_stats -> elsewhere", &["scope_stats", "symbolic link"]);
    let (o, _) = ferry_measured(&run_args(s(&p), &["--force"]));
    refused(&o, "run --force over it", &["scope_stats", "symbolic link"]);
    a.unchanged(&before, "scopes and run --force");
    assert!(!moved.join("scope_stats.html").exists());
}

#[test]
fn a_forged_unfinished_manifest_deletes_nothing_outside() {
    let a = Area::new("forged");
    std::fs::create_dir_all(&a.out).unwrap();
    symlink(&a.elsewhere, a.out.join("args_dump")).unwrap();
    let forged = serde_json::json!({
        "format": 1, "run_id": "x", "command": [], "arch": "a2a3", "complete": false,
        "files": [{ "path": "args_dump/precious.txt" }, { "path": "args_dump/args.bin" }],
    });
    std::fs::write(a.out.join("ferry-manifest.json"), forged.to_string()).unwrap();
    let before = a.outside();
    for force in [false, true] {
        let extra: &[&str] = if force { &["--force"] } else { &[] };
        let (o, _) = ferry_measured(&run_args(s(&a.out), extra));
        refused(&o, "run over a forged manifest", &["args_dump", "symbolic link"]);
    }
    // Without DFX the run plans no args_dump file, but the earlier run's listed files are
    // still removed through the handle: refused, not followed.
    let (o, _) = ferry_measured(&["run", "--small", "--example", "vector", "--out", s(&a.out)]);
    refused(&o, "plain run over a forged manifest", &["args_dump", "symbolic link"]);
    a.unchanged(&before, "forged manifest");
    assert_eq!(std::fs::read(a.elsewhere.join("precious.txt")).unwrap(), b"keep me");
}

#[test]
fn directories_others_may_write_are_refused_by_every_writing_command() {
    let a = Area::new("modes");
    let p = a.root.join("p");
    copy_dir(pristine(), &p);
    let bench = a.root.join("b1.json");
    std::fs::write(&bench, br#"{"areas": {}}"#).unwrap();
    let open = a.out.clone();
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let check = |dir: &Path, why: &str| {
        let before = a.outside();
        let page = dir.join("page.html");
        let cmds: Vec<Vec<&str>> = vec![
            run_args(s(dir), &[]),
            vec!["view", s(&p), "-o", s(&page)],
            vec!["scopes", s(&p), "-o", s(&page)],
            vec!["trace", s(&p), "--out", s(dir)],
            vec!["dump", "export", s(&p), "-o", s(dir)],
            vec!["figures", s(&bench), "-o", s(&page)],
            vec!["kernels", "new", "k", "--dir", s(dir)],
        ];
        for c in &cmds {
            let (o, _) = ferry_measured(c);
            refused(&o, &format!("{} into {why}", c.join(" ")), &[s(dir), why]);
        }
        a.unchanged(&before, why);
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 0, "{why}: something was written");
    };
    check(&open, "can be written by every user");
    // Sticky, as /tmp: written safely.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let (o, _) = ferry_measured(&run_args(s(&open), &[]));
    ok(&o, "run into a sticky world-writable directory");
    std::fs::remove_dir_all(&open).unwrap();
    // A directory of another user.
    if ferry_fs::euid() != 0 {
        eprintln!("skipped: a directory of another user needs root to make (chown)");
        return;
    }
    std::fs::create_dir_all(&open).unwrap();
    std::os::unix::fs::chown(&open, Some(65534), Some(65534)).unwrap();
    check(&open, "belongs to uid 65534");
    // A profile of another user: read, but nothing written into it.
    std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
    let (o, _) = ferry_measured(&["report", s(&p)]);
    ok(&o, "report on another user's profile");
    let (o, _) = ferry_measured(&["trace", s(&p)]);
    refused(&o, "trace into another user's profile", &["belongs to uid 65534"]);
}

/// What a profile file is replaced with.
#[derive(Clone, Copy, Debug)]
enum Bad {
    Fifo,
    DevZero,
    Sparse10G,
}

fn replace(path: &Path, bad: Bad) {
    let _ = std::fs::remove_file(path);
    match bad {
        Bad::Fifo => {
            let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
            // SAFETY: `c` is a valid NUL-terminated path for the call.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        }
        Bad::DevZero => {
            if ferry_fs::euid() == 0 {
                let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
                // 1,5 is /dev/zero's device number.
                let dev = libc::makedev(1, 5);
                // SAFETY: as above.
                assert_eq!(unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, dev) }, 0);
            } else {
                symlink("/dev/zero", path).unwrap();
            }
        }
        Bad::Sparse10G => std::fs::File::create(path).unwrap().set_len(10 << 30).unwrap(),
    }
}

/// The commands that read a profile, with whether each reads `file`.
fn readers(file: &str) -> Vec<(Vec<&'static str>, bool)> {
    let swim = file.contains("swimlane") || file.starts_with("name_map");
    let pmu = file.starts_with("pmu");
    let deps = file == "deps.json";
    let args = file.starts_with("args_dump/args_dump");
    let bin = file.ends_with("args.bin");
    let scopes = file.starts_with("scope_stats/");
    // Every command reads the native profile (and the manifest).
    let manifest = file == "ferry-manifest.json" || file == "profile.ferry";
    // `report`, `trace` and `view` check args.bin's size without reading it.
    let traced = swim || pmu || deps || args || bin || scopes || manifest;
    vec![
        (vec!["report"], true),
        (vec!["deps"], deps || swim || manifest),
        (vec!["dump", "list"], args || bin || manifest),
        (vec!["scopes"], scopes || manifest),
        (vec!["trace"], traced),
        (vec!["view", "-o", "/dev/null/x"], traced),
    ]
}

/// Runs each reader on `dir` and checks the answer: an error naming `file` from each that
/// reads it, never a hang, and peak RSS under [`MAX_RSS_KIB`].
fn check_readers(dir: &Path, file: &str, what: &str) {
    let name = file.rsplit('/').next().unwrap();
    for (cmd, reads) in readers(file) {
        let mut args: Vec<&str> = cmd.clone();
        let at = if cmd[0] == "dump" { 2 } else { 1 };
        args.insert(at, s(dir));
        if cmd[0] == "view" {
            // The page goes to the scratch area, not into the profile.
            args.truncate(2);
            let page = dir.parent().unwrap().join("page.html");
            args.extend(["-o", page.to_str().unwrap()]);
            let (o, rss) = ferry_measured(&args);
            verdict(&o, rss, reads, name, &format!("{what}: {}", args.join(" ")));
            continue;
        }
        let (o, rss) = ferry_measured(&args);
        verdict(&o, rss, reads, name, &format!("{what}: {}", args.join(" ")));
    }
}

fn verdict(o: &Output, rss: i64, reads: bool, name: &str, what: &str) {
    assert!(rss < MAX_RSS_KIB, "{what}: peak RSS {rss} KiB");
    let e = text(&o.stderr);
    assert!(!e.contains("panicked"), "{what}: {e}");
    if reads {
        assert_eq!(o.status.code(), Some(1), "{what}: {e}");
        assert!(e.contains(name), "{what}: the error does not name {name}: {e}");
    } else {
        assert!(matches!(o.status.code(), Some(0 | 1)), "{what}: {e}");
    }
}

#[test]
fn fifos_devices_and_huge_files_in_a_profile_are_refused_unread() {
    let files = [
        "chip_swimlane_records.json",
        "name_map_vector.json",
        "pmu.csv",
        "pmu.dfx.json",
        "deps.json",
        "args_dump/args_dump.json",
        "args_dump/args.bin",
        "scope_stats/scope_stats.jsonl",
        "ferry-manifest.json",
    ];
    let root = scratch("hostile-fs-reads");
    for (k, file) in files.iter().enumerate() {
        for bad in [Bad::Fifo, Bad::DevZero, Bad::Sparse10G] {
            for manifest in [true, false] {
                if *file == "ferry-manifest.json" && !manifest {
                    continue;
                }
                let d = root.join(format!("p{k}-{bad:?}-{manifest}"));
                copy_dir(pristine(), &d);
                if !manifest {
                    std::fs::remove_file(d.join("ferry-manifest.json")).unwrap();
                }
                replace(&d.join(file), bad);
                check_readers(&d, file, &format!("{file} as {bad:?} (manifest: {manifest})"));
                std::fs::remove_dir_all(&d).unwrap();
            }
        }
    }
    // The default output: the native profile, and its manifest.
    for file in ["profile.ferry", "ferry-manifest.json"] {
        for bad in [Bad::Fifo, Bad::DevZero, Bad::Sparse10G] {
            for manifest in [true, false] {
                if file == "ferry-manifest.json" && !manifest {
                    continue;
                }
                let d = root.join(format!("native-{file}-{bad:?}-{manifest}"));
                copy_dir(pristine_native(), &d);
                if !manifest {
                    std::fs::remove_file(d.join("ferry-manifest.json")).unwrap();
                }
                replace(&d.join(file), bad);
                let what = format!("native: {file} as {bad:?} (manifest: {manifest})");
                check_readers(&d, file, &what);
                std::fs::remove_dir_all(&d).unwrap();
            }
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_sessions_runs_json_is_verified_and_bounded() {
    let root = scratch("hostile-fs-session");
    let d = root.join("s");
    let (o, _) = ferry_measured(&[
        "run",
        "--small",
        "--example",
        "vector",
        "--swimlane",
        "1",
        "--repeat",
        "2",
        "--original-formats",
        "--out",
        s(&d),
    ]);
    ok(&o, "a session");
    let (o, _) = ferry_measured(&["report", s(&d)]);
    ok(&o, "report of a session");
    // An edited count is refused, not shown.
    let runs = std::fs::read_to_string(d.join("runs.json")).unwrap();
    let edited = runs.replacen("\"collected\": ", "\"collected\": 9", 1);
    assert_ne!(runs, edited);
    std::fs::write(d.join("runs.json"), &edited).unwrap();
    let (o, _) = ferry_measured(&["report", s(&d)]);
    refused(&o, "report of an edited runs.json", &["runs.json", "changed"]);
    std::fs::write(d.join("runs.json"), &runs).unwrap();
    for bad in [Bad::Fifo, Bad::DevZero, Bad::Sparse10G] {
        replace(&d.join("runs.json"), bad);
        let (o, rss) = ferry_measured(&["report", s(&d)]);
        verdict(&o, rss, true, "runs.json", &format!("runs.json as {bad:?}"));
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn fifos_devices_and_huge_files_as_workloads_and_kernel_libraries_are_refused_unread() {
    let root = scratch("hostile-fs-inputs");
    for bad in [Bad::Fifo, Bad::DevZero, Bad::Sparse10G] {
        let f = root.join(format!("input-{bad:?}"));
        replace(&f, bad);
        let cmds: Vec<Vec<&str>> = vec![
            vec!["workload", "check", s(&f)],
            vec!["run", "--small", "--workload", s(&f)],
            vec!["run", "--small", "--example", "vector", "--kernels", s(&f)],
            vec!["figures", s(&f)],
        ];
        for c in cmds {
            let (o, rss) = ferry_measured(&c);
            verdict(&o, rss, true, f.file_name().unwrap().to_str().unwrap(), &c.join(" "));
        }
        let _ = std::fs::remove_file(&f);
    }
    // A workload whose init file is one of them.
    for bad in [Bad::Fifo, Bad::DevZero, Bad::Sparse10G] {
        let init = root.join(format!("init-{bad:?}.bin"));
        replace(&init, bad);
        let w = root.join(format!("w-{bad:?}.toml"));
        let body = format!(
            "[workload]\nname = \"w\"\noutputs = [\"y\"]\n\
             [[tensor]]\nname = \"x\"\nshape = [4]\ninit = {{ file = \"{}\" }}\n\
             [[tensor]]\nname = \"y\"\nshape = [4]\n\
             [[graph]]\nkernel = \"copy\"\nargs = [{{ tensor = \"x\", role = \"input\" }}, \
             {{ tensor = \"y\", role = \"output\" }}]\n",
            init.file_name().unwrap().to_str().unwrap()
        );
        std::fs::write(&w, body).unwrap();
        let (o, rss) = ferry_measured(&["workload", "check", s(&w)]);
        verdict(&o, rss, true, init.file_name().unwrap().to_str().unwrap(), "init file");
    }
    let _ = std::fs::remove_dir_all(&root);
}
