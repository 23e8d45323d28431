//! Fuzz-style test of the native profile's reader on crafted chunks: a real run's native profile
//! with some chunks' records mutated (bytes flipped, a hostile number over a field, records cut)
//! and sealed again with right checksums, so the recovery rule keeps them and the rebuild meets
//! them, then read for every analysis ([`NativeReader`]) and analysed as the commands do. Each
//! case must end in a typed error or valid output: no panic (proptest fails the case).
use ferry_profile::recorder::{
    read_recording, FsyncPolicy, Packed, RecordStream, Recorder, Recording, RECORD_FILE,
};
use ferry_profile::WriteOptions;
use ferry_profile::{analysis, perfetto, views, NativeDecoder, Needs};
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::dfx::DfxOptions;
use ferry_runtime::host::profile::{claim_run_dir, run_profiled, NativeReader, ProfileTarget};
use ferry_runtime::host::{DeviceRunner, RunnerConfig};
use proptest::prelude::*;
use std::sync::OnceLock;

use ferry_abi::records::{
    AicoreTaskRecord, AicpuTaskRecord, OrchPhaseRecord, PmuRecord, SchedPhaseRecord,
    ScopeStatsRecord,
};

/// Cases per run of the test.
const CASES: u32 = 96;

fn scratch(tag: &str) -> ferry_fs::Dir {
    let d = std::env::temp_dir().join(format!("ferry-native-fuzz-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    ferry_fs::Dir::open_writable(&d, true).unwrap()
}

/// The chunks (stream, lane, seq, payload) of a vector run with all five subsystems, every
/// payload dumped, recorded once.
/// A chunk: its stream, lane, sequence number and payload as stored.
type Chunk = (RecordStream, u32, u32, Vec<u8>);

fn pristine() -> &'static Vec<Chunk> {
    static CHUNKS: OnceLock<Vec<Chunk>> = OnceLock::new();
    CHUNKS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ferry-native-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut runner = DeviceRunner::new(RunnerConfig::small(ferry_sim::Arch::A2a3)).unwrap();
        let run = Example::Vector.build(Size::Small);
        runner.register_callable(0, run.callable.clone()).unwrap();
        let opts = DfxOptions {
            swimlane: 4,
            pmu: 2,
            dep_gen: true,
            dump_args: 2,
            scope_stats: true,
            ..DfxOptions::default()
        };
        let mut rd = claim_run_dir(&dir, runner.config(), &["test".into()], false).unwrap();
        let none = WriteOptions { files: false, traces: false, chrome: false, progress: None };
        let target = ProfileTarget::in_run_dir(&mut rd, None, "vector", none).unwrap();
        let done = run_profiled(&mut runner, &opts, run.args.scratch_bytes, Some(target), |r| {
            let p = r.prepare(0, run.args.clone()).map_err(|e| e.to_string())?;
            let l = r.launch(p).map_err(|e| e.to_string())?;
            Ok::<_, String>((r.finalize_run(l).map_err(|e| e.to_string())?, None))
        })
        .unwrap();
        done.run.unwrap();
        done.profile.unwrap().expect("DFX on");
        runner.finalize().unwrap();
        let h = ferry_fs::Dir::open(&dir).unwrap();
        let r = read_recording(&h, RECORD_FILE, 64 << 20).unwrap();
        let chunks = r.chunks.iter().map(|c| (c.stream, c.lane, c.seq, r.payload(c).to_vec()));
        let chunks = chunks.collect();
        drop(rd);
        let _ = std::fs::remove_dir_all(&dir);
        chunks
    })
}

/// Numbers that break arithmetic and allocation when taken at face value.
const HOSTILE: [u64; 8] =
    [u64::MAX, i64::MAX as u64, 1 << 62, 1 << 40, 4_000_000_000, 65_535, 1, 0];

#[derive(Clone, Debug)]
enum Mutation {
    /// XOR bytes at these fractions (per mille) of the payload.
    Flip(Vec<(u16, u8)>),
    /// Write a hostile number (8 bytes, little-endian) at this fraction of the payload.
    Splice(u16, usize),
    /// Keep this fraction of the payload (whole records of it).
    Cut(u16),
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let at = |len: usize, p: u16| (len * usize::from(p) / 1000).min(len.saturating_sub(1));
    match m {
        Mutation::Flip(v) => {
            for &(p, x) in v {
                if !bytes.is_empty() {
                    let i = at(bytes.len(), p);
                    bytes[i] ^= x.max(1);
                }
            }
        }
        Mutation::Splice(p, n) => {
            let i = at(bytes.len(), *p);
            for (k, b) in HOSTILE[*n].to_le_bytes().into_iter().enumerate() {
                if let Some(x) = bytes.get_mut(i + k) {
                    *x = b;
                }
            }
        }
        Mutation::Cut(p) => bytes.truncate(at(bytes.len() + 1, *p)),
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => proptest::collection::vec((0u16..1000, any::<u8>()), 1..4).prop_map(Mutation::Flip),
        3 => (0u16..1000, 0..HOSTILE.len()).prop_map(|(p, n)| Mutation::Splice(p, n)),
        1 => (0u16..1000).prop_map(Mutation::Cut),
    ]
}

/// Seals `payload` (as the stream stores it, perhaps mutated) as one chunk again: decoded into
/// the stream's records, then appended (so the chunk is whole and its checksum right).
fn reseal(rec: &Recorder, stream: RecordStream, lane: u32, seq: u32, payload: &[u8]) {
    fn typed<R: Packed>(rec: &Recorder, s: RecordStream, lane: u32, seq: u32, p: &[u8]) {
        let n = p
            .len()
            .checked_div(R::BYTES)
            .unwrap_or_else(|| p.iter().filter(|&&b| b < 0x80).count());
        let usable = if R::BYTES == 0 {
            p.iter().rposition(|&b| b < 0x80).map_or(0, |i| i + 1)
        } else {
            n * R::BYTES
        };
        rec.append(s, lane, seq, &R::unpack_all(&p[..usable], n));
    }
    match stream {
        RecordStream::Aicore => typed::<AicoreTaskRecord>(rec, stream, lane, seq, payload),
        RecordStream::Aicpu => typed::<AicpuTaskRecord>(rec, stream, lane, seq, payload),
        RecordStream::Sched => typed::<SchedPhaseRecord>(rec, stream, lane, seq, payload),
        RecordStream::Orch => typed::<OrchPhaseRecord>(rec, stream, lane, seq, payload),
        RecordStream::Pmu => typed::<PmuRecord>(rec, stream, lane, seq, payload),
        RecordStream::Scope => typed::<ScopeStatsRecord>(rec, stream, lane, seq, payload),
        RecordStream::DepGen | RecordStream::Args => typed::<u64>(rec, stream, lane, seq, payload),
        RecordStream::Meta | RecordStream::ArgsBin => rec.append_bytes(stream, lane, seq, payload),
    }
}

/// The pristine chunks with `muts` applied (each to the chunk at its index, modulo), sealed into
/// a file in `dir`, read back by the recovery rule.
fn crafted(dir: &ferry_fs::Dir, muts: &[(usize, Mutation)]) -> Recording {
    let mut chunks = pristine().clone();
    for (k, m) in muts {
        let i = k % chunks.len();
        apply(&mut chunks[i].3, m);
    }
    let _ = dir.remove_file(RECORD_FILE);
    let rec = Recorder::create(dir, RECORD_FILE, FsyncPolicy::Never).unwrap();
    for (stream, lane, seq, payload) in &chunks {
        reseal(&rec, *stream, *lane, *seq, payload);
    }
    rec.finish().unwrap();
    read_recording(dir, RECORD_FILE, 64 << 20).unwrap()
}

/// Every analysis's read of `rec`, and what the commands compute from it; returns how many
/// reached their output.
fn analyse(rec: &Recording) -> usize {
    let mut reached = 0;
    for needs in [Needs::DEPS, Needs::REPORT, Needs::DUMP, Needs::SCOPES, Needs::TRACE] {
        let Ok(s) = NativeReader.decode(rec, &needs) else { continue };
        for m in &s.models {
            let rep = analysis::report(m);
            assert!(rep.text(None).starts_with("ferry report"));
            let _ = views::deps_text(m);
            let _ = perfetto::plan(m);
            assert!(views::swimlane_html(m).contains("</html>"));
            if let Some(d) = &m.args {
                let _ = views::dump_list(d, &views::DumpFilter::default());
            }
            if let Some(sc) = &m.scopes {
                let _ = views::scope_usage(sc);
            }
        }
        reached += 1;
    }
    reached
}

#[test]
fn crafted_chunks_give_a_typed_error_or_valid_output() {
    let _bound = ferry_watchdog::bound("the native profile's fuzz cases");
    let dir = scratch("case");
    // The unmutated profile reaches every analysis.
    assert_eq!(analyse(&crafted(&dir, &[])), 5);
    let n = pristine().len();
    let reached = std::cell::Cell::new(0usize);
    let cfg = ProptestConfig { cases: CASES, failure_persistence: None, ..Default::default() };
    proptest!(cfg, |(muts in proptest::collection::vec((0..n, mutation()), 1..4))| {
        reached.set(reached.get() + analyse(&crafted(&dir, &muts)));
    });
    // Some crafted profiles are still read: the mutations reach the analyses.
    assert!(reached.get() > 0, "no case reached an analysis");
    let _ = std::fs::remove_dir_all(dir.path());
}
