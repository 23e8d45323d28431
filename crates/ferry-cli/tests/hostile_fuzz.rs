//! Fuzz-style test of every analysis entry point on mutated files of a real run.
//!
//! A `--small` vector run with all five subsystems is made once; each case copies its files,
//! mutates one to three of them (truncation at a random point, flipped bytes, a huge or negative
//! number spliced over a number, a zero-length file), re-writes the manifest so size and hash
//! match (the parsers, not the hash check, meet the mutation; some cases keep the stale
//! manifest, drop it or mutate it instead), and runs in-process what `ferry deps`, `report`,
//! `dump` (list, export, replay), `scopes`, `trace` and `view` run, plus the `ferry` binary on a
//! few cases. Each must end in a typed error or valid output: no panic (proptest fails the case),
//! and no single allocation over [`ALLOC_CAP`], measured by this binary's counting allocator.
//! Bounded: [`CASES`] cases, ~10-30 s in a debug build on 2 cores.
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use ferry_profile::{
    self as output, analysis, hash_file, open_run, perfetto, views, Manifest, ManifestEntry, Needs,
    WriteOptions, MANIFEST_FILE,
};
use proptest::prelude::*;

/// The largest single allocation a case may make: 64 times the run's files (~290 KB), well
/// under what a size taken from a file (2^40 elements, 4e9 arguments) would ask for.
const ALLOC_CAP: usize = 24 << 20;
/// Cases per run of the test.
const CASES: u32 = 160;

/// Records the largest single allocation (and reallocation) since the last reset.
struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so `System`'s
// guarantees hold; the only addition is a relaxed `fetch_max` on a counter, which allocates
// nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: a statistic read after the case; nothing is ordered by it.
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: delegated to the caller (GlobalAlloc::alloc's contract).
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // Relaxed: as in `alloc`.
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: delegated to the caller.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: delegated to the caller (`ptr` came from this allocator, i.e. from System).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Relaxed: as in `alloc`.
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: delegated to the caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn ferry() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-fuzz-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The pristine run's files (relative path → bytes), made once.
fn pristine() -> &'static BTreeMap<String, Vec<u8>> {
    static FILES: OnceLock<BTreeMap<String, Vec<u8>>> = OnceLock::new();
    FILES.get_or_init(|| {
        let d = tmpdir("pristine");
        let o = ferry()
            .args(["run", "--example", "vector", "--small", "--aic", "2", "--aiv", "4"])
            .args(["--swimlane", "4", "--pmu", "2", "--dep-gen", "--dump-args", "3"])
            .args(["--scope-stats", "--original-formats", "--out"])
            .arg(&d)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let m = Manifest::verified(&d).unwrap();
        let mut files: BTreeMap<String, Vec<u8>> = m
            .files
            .iter()
            .map(|e| (e.path.clone(), std::fs::read(d.join(&e.path)).unwrap()))
            .collect();
        files.insert(MANIFEST_FILE.into(), std::fs::read(d.join(MANIFEST_FILE)).unwrap());
        std::fs::remove_dir_all(&d).unwrap();
        files
    })
}

/// The files a mutation may hit: the DFX files, the sidecar and the manifest.
const TARGETS: [&str; 8] = [
    "chip_swimlane_records.json",
    "pmu.csv",
    "pmu.dfx.json",
    "deps.json",
    "args_dump/args_dump.json",
    "args_dump/args.bin",
    "scope_stats/scope_stats.jsonl",
    MANIFEST_FILE,
];

/// Numbers that break arithmetic and allocation when taken at face value.
const HOSTILE: [&str; 11] = [
    "18446744073709551615",
    "9223372036854775807",
    "-9223372036854775808",
    "4611686018427387904",
    "1099511627776",
    "4000000000",
    "2147483647",
    "-1",
    "0",
    "1e308",
    "340282366920938463463374607431768211456",
];

#[derive(Clone, Debug)]
enum Mutation {
    /// Keep this fraction (per mille) of the file.
    Truncate(u16),
    /// XOR bytes at these fractions of the file.
    Flip(Vec<(u16, u8)>),
    /// Replace the number found from this fraction on with a hostile one.
    Splice(u16, usize),
    /// An empty file.
    Zero,
}

fn at(len: usize, per_mille: u16) -> usize {
    len * usize::from(per_mille) / 1000
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    match m {
        Mutation::Truncate(p) => bytes.truncate(at(bytes.len(), *p)),
        Mutation::Flip(v) => {
            for &(p, x) in v {
                if !bytes.is_empty() {
                    let i = at(bytes.len(), p).min(bytes.len() - 1);
                    bytes[i] ^= x.max(1);
                }
            }
        }
        Mutation::Splice(p, n) => {
            let from = at(bytes.len(), *p);
            let Some(s) = bytes[from..].iter().position(u8::is_ascii_digit).map(|i| i + from)
            else {
                return;
            };
            let e =
                bytes[s..].iter().position(|b| !b.is_ascii_digit()).map_or(bytes.len(), |i| i + s);
            bytes.splice(s..e, HOSTILE[*n].bytes());
        }
        Mutation::Zero => bytes.clear(),
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => (0u16..1000).prop_map(Mutation::Truncate),
        2 => proptest::collection::vec((0u16..1000, any::<u8>()), 1..4).prop_map(Mutation::Flip),
        4 => (0u16..1000, 0..HOSTILE.len()).prop_map(|(p, n)| Mutation::Splice(p, n)),
        1 => Just(Mutation::Zero),
    ]
}

/// What happens to the manifest after the mutations.
#[derive(Clone, Copy, Debug)]
enum Seal {
    /// Re-hashed: the parsers meet the mutations.
    Reseal,
    /// Left stale: the hash check meets them.
    Stale,
    /// Removed: read unverified.
    Remove,
}

/// Writes the files, mutated, into `d` and seals them as `seal` says.
fn lay_out(d: &Path, muts: &[(usize, Mutation)], seal: Seal) {
    let _ = std::fs::remove_dir_all(d);
    let mut files = pristine().clone();
    let mut manifest_mutated = false;
    for (t, m) in muts {
        let name = TARGETS[*t];
        manifest_mutated |= name == MANIFEST_FILE;
        apply(files.get_mut(name).unwrap(), m);
    }
    for (rel, bytes) in &files {
        let p = d.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, bytes).unwrap();
    }
    if manifest_mutated {
        return;
    }
    match seal {
        Seal::Reseal => {
            let mut m = Manifest::verified(d).unwrap();
            for e in &mut m.files {
                let w = hash_file(&d.join(&e.path)).unwrap();
                *e = ManifestEntry {
                    path: e.path.clone(),
                    bytes: Some(w.bytes),
                    xxh3: Some(format!("{:016x}", w.xxh3)),
                };
            }
            m.write(d).unwrap();
        }
        Seal::Stale => {}
        Seal::Remove => std::fs::remove_file(d.join(MANIFEST_FILE)).unwrap(),
    }
}

/// Every analysis entry point, in-process, as the commands call them; returns how many reached
/// their output (the others ended in a typed error).
fn analyse(d: &Path, scratch: &Path) -> usize {
    let mut reached = 0;
    if let Ok(r) = open_run(d, &Needs::DEPS) {
        assert!(!views::deps_text(&r.run).is_empty());
        reached += 1;
    }
    if let Ok(r) = open_run(d, &Needs::REPORT) {
        let rep = analysis::report(&r.run);
        assert!(rep.text(None).starts_with("ferry report"));
        assert!(serde_json::to_string(&rep).unwrap().starts_with('{'));
        assert!(analysis::diff(&rep, &rep).is_zero());
        reached += 1;
    }
    if let Ok(r) = open_run(d, &Needs::DUMP) {
        let dump = r.run.args.as_ref().unwrap();
        let all = views::DumpFilter::default();
        let _ = views::dump_list(dump, &all);
        let only = views::DumpFilter { task: Some(0), ..Default::default() };
        let _ = views::dump_export(dump, &only, &scratch.join("export"));
        let mut tasks: Vec<u64> = dump.args.iter().map(|a| a.task_id).collect();
        tasks.dedup();
        for t in tasks.into_iter().take(3) {
            let _ = ferry_runtime::host::dfx::replay_task(dump, t);
        }
        reached += 1;
    }
    if let Ok(r) = open_run(d, &Needs::SCOPES) {
        let s = r.run.scopes.as_ref().unwrap();
        let _ = views::scope_usage(s);
        assert!(views::scopes_html(s).contains("</html>"));
        reached += 1;
    }
    if let Ok(r) = open_run(d, &Needs::TRACE) {
        let _ = perfetto::plan(&r.run);
        assert!(views::swimlane_html(&r.run).contains("</html>"));
        let opts = WriteOptions { files: false, traces: true, chrome: true, progress: None };
        let _ = output::write_all(&scratch.join("trace"), &r.run, &opts);
        reached += 1;
    }
    reached
}

fn spawned_ok(args: &[&str], d: &Path) {
    // The run directory comes right after the command (`dump`'s: after its subcommand).
    let at = if args[0] == "dump" { 2 } else { 1 };
    let o = ferry().args(&args[..at]).arg(d).args(&args[at..]).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{args:?}: {:?}\n{e}", o.status);
    assert!(!e.contains("panicked"), "{args:?}: {e}");
}

#[test]
fn mutated_files_give_a_typed_error_or_valid_output_within_the_allocation_cap() {
    let _bound = ferry_watchdog::bound("the ferry process");
    let d = tmpdir("case");
    let scratch = tmpdir("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    // The unmutated run reaches every analysis, under the cap.
    lay_out(&d, &[], Seal::Stale);
    LARGEST.store(0, Ordering::Relaxed);
    assert_eq!(analyse(&d, &scratch), 5);
    let base = LARGEST.load(Ordering::Relaxed);
    assert!(base <= ALLOC_CAP, "the pristine run allocates {base} bytes at once");
    let case = std::cell::Cell::new(0u32);
    let reached = std::cell::Cell::new(0usize);
    let cfg = ProptestConfig { cases: CASES, failure_persistence: None, ..Default::default() };
    proptest!(cfg, |(
        muts in proptest::collection::vec((0..TARGETS.len(), mutation()), 1..4),
        seal in prop_oneof![6 => Just(Seal::Reseal), 1 => Just(Seal::Stale), 1 => Just(Seal::Remove)],
    )| {
        lay_out(&d, &muts, seal);
        LARGEST.store(0, Ordering::Relaxed);
        reached.set(reached.get() + analyse(&d, &scratch));
        let largest = LARGEST.load(Ordering::Relaxed);
        prop_assert!(largest <= ALLOC_CAP, "{muts:?}: one allocation of {largest} bytes");
        if case.get() % 20 == 0 {
            for args in [&["report"][..], &["deps"], &["dump", "replay", "--task", "0"]] {
                spawned_ok(args, &d);
            }
        }
        case.set(case.get() + 1);
    });
    let reached = reached.get();
    // The mutations are not all caught before a parser or view runs (the test would then test
    // the hash check only).
    assert!(reached > CASES as usize, "only {reached} analyses reached their output");
    std::fs::remove_dir_all(&d).unwrap();
    std::fs::remove_dir_all(&scratch).unwrap();
}
