use std::path::PathBuf;
use std::sync::Arc;

use ferry_abi::records::{
    AicoreTaskRecord, AicpuTaskRecord, OrchPhaseRecord, PmuRecord, SchedPhaseRecord,
    ScopeStatsRecord,
};
use ferry_fs::{Dir, FsError};

use super::*;
use crate::collect::LaneRecords;

fn tmpdir(tag: &str) -> (PathBuf, Dir) {
    let d = std::env::temp_dir().join(format!("ferry-recorder-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let h = Dir::open_writable(&d, false).unwrap();
    (d, h)
}

fn aicore(i: u64) -> AicoreTaskRecord {
    AicoreTaskRecord {
        start_time: 1000 + i,
        end_time: 2000 + i,
        task_token_raw: (1 << 32) | i,
        reg_task_id: i as u32,
        receive_to_start_cycles: 3,
    }
}

fn pmu(i: u64) -> PmuRecord {
    let mut r = PmuRecord {
        task_id: i,
        func_id: 7,
        core_type: -1,
        pmu_total_cycles: 99 + i,
        ..PmuRecord::default()
    };
    for (k, c) in r.counters.iter_mut().enumerate() {
        *c = k as u32 * 3 + i as u32;
    }
    r
}

/// Every record type packs to its stream's size and unpacks to itself (padding zero).
#[test]
fn packed_records_round_trip() {
    fn rt<R: Packed + PartialEq + std::fmt::Debug>(r: R, stream: RecordStream) {
        let mut b = Vec::new();
        r.pack(&mut b);
        assert_eq!(b.len(), R::BYTES);
        assert_eq!(b.len(), stream.record_bytes());
        assert_eq!(R::unpack(&b), r, "{stream:?}");
        // What the writer thread makes of the image a collector copies: the same bytes.
        let mut via = Vec::new();
        R::pack_images(R::images(std::slice::from_ref(&r)), &mut via);
        assert_eq!(via, b, "{stream:?}");
    }
    rt(aicore(5), RecordStream::Aicore);
    rt(
        AicpuTaskRecord { dispatch_time: 4, finish_time: 9, reg_task_id: 2, _pad: [0; 3] },
        RecordStream::Aicpu,
    );
    rt(
        SchedPhaseRecord {
            start: 1,
            end: 2,
            loop_iter: 3,
            kind: 4,
            tasks_processed: 5,
            phase_data: [6, 7],
            shared_depth_at_start: [8, -9, 10],
            shared_depth_at_end: [11, 12, -13],
            ..SchedPhaseRecord::default()
        },
        RecordStream::Sched,
    );
    rt(
        OrchPhaseRecord { start: 1, end: 5, task_id: 77, submit_idx: 3, ..Default::default() },
        RecordStream::Orch,
    );
    rt(pmu(3), RecordStream::Pmu);
    let mut s = ScopeStatsRecord {
        heap_start: 1,
        heap_end: 2,
        site_line: 3,
        task_start: 4,
        task_end: 5,
        dep_pool_start: 6,
        dep_pool_end: 7,
        tensormap_used: 8,
        depth: 9,
        ring_id: -1,
        phase: 1,
        ..ScopeStatsRecord::default()
    };
    s.site_file_basename[..4].copy_from_slice(b"w:15");
    rt(s, RecordStream::Scope);
}

/// A chain word is a LEB128 varint: 1 byte below 128, 10 for the widest, each back to itself;
/// a chunk of words reads back whole, and a payload that is not exactly its words is refused.
#[test]
fn words_are_varints() {
    assert_eq!(RecordStream::DepGen.record_bytes(), 0);
    assert_eq!(RecordStream::Args.record_bytes(), 0);
    let words = [0u64, 1, 127, 128, 300, 0xdead_beef, 1 << 56, u64::MAX];
    let lens = [1, 1, 1, 2, 2, 5, 9, 10];
    let mut all = Vec::new();
    for (w, len) in words.iter().zip(lens) {
        let mut b = Vec::new();
        w.pack(&mut b);
        assert_eq!(b.len(), len, "{w:#x}");
        assert_eq!(u64::unpack(&b), *w);
        all.extend_from_slice(&b);
    }
    assert!(varints_ok(&all, words.len()));
    assert_eq!(u64::unpack_all(&all, words.len()), words);
    let mut packed = vec![7u8];
    u64::pack_all(&words, &mut packed);
    assert_eq!((packed[0], &packed[1..]), (7, &all[..]), "appended, word by word");
    let mut via = Vec::new();
    u64::pack_images(u64::images(&words), &mut via);
    assert_eq!(via, all, "from the words' images");
    assert!(!varints_ok(&all, words.len() - 1), "a word more than the header says");
    assert!(!varints_ok(&all[..all.len() - 1], words.len()), "a word cut short");
    assert!(!varints_ok(&[0xff; 11], 1), "longer than 10 bytes");
    let mut wide = vec![0xff; 9];
    wide.push(0x02);
    assert!(!varints_ok(&wide, 1), "past 64 bits");
    // Through the recorder: the chunk's payload is the varints, its records the words.
    let (d, h) = tmpdir("varint");
    let rec = Recorder::create(&h, RECORD_FILE, FsyncPolicy::Never).unwrap();
    rec.append(RecordStream::Args, 1, 3, &words);
    rec.finish().unwrap();
    let r = read_recording(&h, RECORD_FILE, 1 << 20).unwrap();
    let c = r.chunks[0];
    assert_eq!((c.records, c.bytes as usize, r.torn_bytes), (8, all.len(), 0));
    assert_eq!(r.payload(&c), &all[..]);
    assert_eq!(r.chunk_records::<u64>(&c), words);
    std::fs::remove_dir_all(&d).unwrap();
}

/// A recording of several streams and lanes reads back whole, in order, with the size and
/// hash the manifest gets.
#[test]
fn recording_reads_back_every_record() {
    let (d, h) = tmpdir("rt");
    let rec = Recorder::create(&h, RECORD_FILE, FsyncPolicy::Every(2)).unwrap();
    let a: Vec<_> = (0..100).map(aicore).collect();
    rec.append(RecordStream::Aicore, 0, 0, &a[..60]);
    rec.append(RecordStream::Aicore, 3, 0, &a[60..]);
    rec.append(RecordStream::Pmu, 1, 4, &[pmu(1), pmu(2)]);
    rec.append::<u64>(RecordStream::DepGen, 0, 0, &[]);
    rec.append(RecordStream::DepGen, 0, 1, &[1u64, 2, 3]);
    let sealed = rec.sealed();
    assert_eq!((sealed.chunks, sealed.records, sealed.syncs), (4, 105, 2));
    let w = rec.finish().unwrap();
    assert_eq!(w, crate::hash_file(&d.join(RECORD_FILE)).unwrap());
    assert_eq!(w.bytes, sealed.bytes);
    let r = read_recording(&h, RECORD_FILE, 1 << 20).unwrap();
    assert_eq!((r.chunks.len(), r.torn_bytes, r.bytes), (4, 0, w.bytes));
    let back: Vec<(u32, u32, AicoreTaskRecord)> = r.records(RecordStream::Aicore).collect();
    assert_eq!(back.len(), 100);
    assert!(back[..60].iter().all(|b| (b.0, b.1) == (0, 0)));
    assert_eq!(back.iter().map(|b| b.2).collect::<Vec<_>>(), a);
    assert_eq!(
        r.records::<PmuRecord>(RecordStream::Pmu).map(|b| b.2).collect::<Vec<_>>(),
        [pmu(1), pmu(2)]
    );
    assert_eq!(r.count(RecordStream::DepGen), 3);
    assert_eq!(r.per_lane(RecordStream::Aicore), [(0, 60), (3, 40)].into());
    assert_eq!(r.total(), 105);
    std::fs::remove_dir_all(&d).unwrap();
}

/// Bytes (a session's end, ArgsDump payloads) are sealed as chunks of bytes, split at the chunk
/// limit, and count as chunks and bytes but never as records.
#[test]
fn bytes_are_sealed_as_chunks_not_records() {
    let (d, h) = tmpdir("bytes");
    let rec = Recorder::create(&h, RECORD_FILE, FsyncPolicy::Never).unwrap();
    rec.append(RecordStream::DepGen, 0, 0, &[7u64]);
    rec.append_bytes(RecordStream::ArgsBin, 2, 5, &[]);
    let big: Vec<u8> = (0..MAX_CHUNK_PAYLOAD as usize + 3).map(|i| i as u8).collect();
    rec.append_bytes(RecordStream::ArgsBin, 2, 5, &big);
    rec.append_bytes(RecordStream::Meta, 1, 0, b"{}");
    let sealed = rec.sealed();
    assert_eq!((sealed.chunks, sealed.records), (4, 1));
    rec.finish().unwrap();
    let r = read_recording(&h, RECORD_FILE, 64 << 20).unwrap();
    assert_eq!((r.chunks.len(), r.torn_bytes, r.total()), (4, 0, 1));
    let bin: Vec<u8> = r
        .chunks
        .iter()
        .filter(|c| c.stream == RecordStream::ArgsBin)
        .inspect(|c| assert_eq!((c.lane, c.seq), (2, 5)))
        .flat_map(|c| r.payload(c).to_vec())
        .collect();
    assert_eq!(bin, big);
    assert_eq!(r.count(RecordStream::ArgsBin), big.len() as u64);
    let meta = r.chunks.iter().find(|c| c.stream == RecordStream::Meta).unwrap();
    assert_eq!(r.payload(meta), b"{}");
    std::fs::remove_dir_all(&d).unwrap();
}

fn three_chunks() -> Vec<u8> {
    let mut file = Vec::new();
    file.extend_from_slice(FILE_MAGIC);
    file.extend_from_slice(&RECORD_FORMAT.to_le_bytes());
    file.extend_from_slice(&0u32.to_le_bytes());
    let mut buf = Vec::new();
    for k in 0..3u64 {
        let recs: Vec<_> = (k * 10..k * 10 + 10).map(aicore).collect();
        encode_chunk(&mut buf, RecordStream::Aicore, k as u32, 0, &recs);
        file.extend_from_slice(&buf);
    }
    file
}

const CHUNK: usize = CHUNK_HEADER_BYTES + 10 * 32;

/// The recovery rule: a file cut anywhere in its last chunk recovers the two chunks before it
/// and counts the rest as the torn tail.
#[test]
fn a_torn_tail_is_ignored_wherever_it_is_cut() {
    let file = three_chunks();
    let two = FILE_HEADER_BYTES + 2 * CHUNK;
    assert_eq!(file.len(), two + CHUNK);
    for cut in two..file.len() {
        let r = read_recording_bytes("t".into(), file[..cut].to_vec()).unwrap();
        assert_eq!(r.chunks.len(), 2, "cut at {cut}");
        assert_eq!(r.torn_bytes, (cut - two) as u64);
        assert_eq!(r.count(RecordStream::Aicore), 20);
    }
    let whole = read_recording_bytes("t".into(), file).unwrap();
    assert_eq!((whole.chunks.len(), whole.torn_bytes), (3, 0));
}

/// A chunk whose checksum, magic, stream or sizes are wrong ends the recovery there: it and
/// everything after it are the tail, never read as records.
#[test]
fn a_bad_chunk_ends_the_sealed_prefix() {
    let first = FILE_HEADER_BYTES;
    let second = first + CHUNK;
    let cases: [(usize, &[u8]); 6] = [
        (second + CHUNK_HEADER_BYTES + 5, &[0xff]), // payload byte: checksum
        (second, b"XRCK"),                          // magic
        (second + 8, &[99, 0]),                     // unknown stream
        (second + 10, &[20, 0]),                    // record size of another stream
        (second + 20, &[11, 0, 0, 0]),              // records × size ≠ payload
        (second + 4, &[0xff, 0xff, 0xff, 0xff]),    // payload over the chunk limit
    ];
    for (at, bytes) in cases {
        let mut f = three_chunks();
        f[at..at + bytes.len()].copy_from_slice(bytes);
        let len = f.len();
        let r = read_recording_bytes("t".into(), f).unwrap();
        assert_eq!(r.chunks.len(), 1, "corrupt at {at}");
        assert_eq!(r.torn_bytes, (len - second) as u64);
    }
}

/// A file that is not a native profile, or of another format, is a typed error.
#[test]
fn not_a_recording_is_an_error() {
    let e = read_recording_bytes("x".into(), b"{\"json\": true, \"not\": 1}".to_vec());
    assert!(matches!(e, Err(RecordingError::NotARecording(_))), "{e:?}");
    // Format 1 (before ArgsDump payloads were recorded) and any later one are refused.
    for found in [1, RECORD_FORMAT + 1] {
        let mut f = three_chunks();
        f[8..12].copy_from_slice(&found.to_le_bytes());
        let e = read_recording_bytes("x".into(), f);
        assert!(matches!(e, Err(RecordingError::Format { found: x, .. }) if x == found), "{e:?}");
    }
    // Shorter than the header (killed while creating it): nothing sealed, all torn.
    let r = read_recording_bytes("x".into(), b"FERRY".to_vec()).unwrap();
    assert_eq!((r.chunks.len(), r.torn_bytes), (0, 5));
}

/// The recorder never writes through a link, nor opens an existing file; the reader never
/// follows a link and reads no further than its limit.
#[test]
fn links_and_existing_files_are_refused() {
    let (d, h) = tmpdir("links");
    let target = d.join("elsewhere");
    std::fs::write(&target, b"keep").unwrap();
    std::os::unix::fs::symlink(&target, d.join(RECORD_FILE)).unwrap();
    let e = Recorder::create(&h, RECORD_FILE, FsyncPolicy::Never).unwrap_err();
    assert!(matches!(e, RecorderError::Create(_)), "{e:?}");
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    let e = read_recording(&h, RECORD_FILE, 1 << 20).unwrap_err();
    assert!(matches!(e, RecordingError::Read(FsError::Symlink { .. })), "{e:?}");
    std::fs::remove_file(d.join(RECORD_FILE)).unwrap();
    std::fs::write(d.join(RECORD_FILE), three_chunks()).unwrap();
    assert!(Recorder::create(&h, RECORD_FILE, FsyncPolicy::Never).is_err());
    let e = read_recording(&h, RECORD_FILE, 64).unwrap_err();
    assert!(matches!(e, RecordingError::Read(FsError::TooLarge { .. })), "{e:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// A collecting sink made with `LaneRecords::recorded` seals each buffer it keeps.
#[test]
fn a_recorded_sink_seals_each_buffer() {
    use ferry_dfx::{CollectSink, CollectedBuffer};
    let (d, h) = tmpdir("sink");
    let rec = Arc::new(Recorder::create(&h, RECORD_FILE, FsyncPolicy::Never).unwrap());
    let mut sink = LaneRecords::<AicoreTaskRecord>::recorded(rec.clone(), RecordStream::Aicore);
    let recs: Vec<_> = (0..7).map(aicore).collect();
    for (seq, part) in recs.chunks(3).enumerate() {
        let b = CollectedBuffer {
            lane: 2,
            kind: 0,
            seq: seq as u32,
            queue: 0,
            shard: 0,
            records: part,
        };
        sink.on_buffer_collected(&b);
    }
    assert_eq!(sink.len(), 7);
    rec.finish().unwrap();
    let r = read_recording(&h, RECORD_FILE, 1 << 20).unwrap();
    let seqs: Vec<u32> = r.chunks.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, [0, 1, 2]);
    assert_eq!(
        r.records(RecordStream::Aicore)
            .map(|b: (u32, u32, AicoreTaskRecord)| b.2)
            .collect::<Vec<_>>(),
        recs
    );
    std::fs::remove_dir_all(&d).unwrap();
}
