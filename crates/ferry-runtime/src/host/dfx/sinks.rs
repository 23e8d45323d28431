//! The ArgsDump collector sink and its arena acknowledgement. (The other subsystems collect into
//! `ferry_profile::collect::LaneRecords`: one bulk copy per buffer while the run is live, the
//! conversion into model rows after it, off the run's CPU.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferry_abi::args_dump::{self, ArgsChainError};
use ferry_dfx::{CollectSink, CollectedBuffer, ReplenishHooks};
use ferry_profile::chunks::{ChunkLog, Span};
use ferry_profile::ArgBin;

use crate::device::dfx::ArgsArena;
use crate::device::wrap;

/// One scheduler thread's dump: its chains as collected (one bulk copy per buffer, each buffer's
/// words kept whole: chains never straddle buffers), where each argument's payload went, and the
/// payload bytes in a `bin` of its own (offsets relative to it until the lanes are joined).
/// Chunked stores: nothing is reallocated or moved while the run is live.
#[derive(Debug, Default)]
pub(super) struct ArgsLane {
    pub(super) words: ChunkLog<u64>,
    /// Each collected buffer's words in `words`, in collection order.
    pub(super) buffers: Vec<Span>,
    /// Each collected buffer's sequence number.
    pub(super) seqs: Vec<u32>,
    /// Each collected buffer's first argument in `payloads`.
    pub(super) first_payload: Vec<usize>,
    /// Per collected buffer, whether its chains were walked for payloads (`payloads` has an
    /// entry for each of its arguments); a buffer that could name no payload was not (its
    /// arguments have none).
    pub(super) walked: Vec<bool>,
    /// One per argument of the walked buffers (of the chains that framed), in chain order.
    /// Where each argument's payload went (`ArgBin::At` offsets are in this lane's `bin`).
    pub(super) payloads: ChunkLog<ArgBin>,
    /// The end (device cursor: offset plus size) of the last payload a walked chain named.
    payload_end: u64,
    pub(super) bin: ChunkLog<u8>,
    /// The first buffer whose words did not frame as chains (its later chains are lost with
    /// their payloads).
    pub(super) bad: Option<ArgsChainError>,
    /// Payload bytes copied so far: `bin`'s length, also where `bin` is not kept.
    bin_bytes: u64,
}

/// Collects ArgsDump records and copies their payloads out of the thread's arena while the run
/// is live (the device reuses the arena once they are acknowledged), counting the payloads
/// consumed per thread for the acknowledgement (once per buffer). Turning records into model
/// rows waits for the end of the run.
impl ArgsLane {
    /// The lane's buffers split by run, as [`ferry_profile::collect::LaneLog::split_runs`]: run
    /// k's buffers with their words, their arguments' payload places and the bytes of those
    /// payloads (each run's `bin` holds only its own, the places rebased onto it). `Err` with the
    /// sequence number of a buffer past the last end.
    pub(super) fn split_runs(&self, ends: &[u32]) -> Result<Vec<ArgsLane>, u32> {
        let mut out: Vec<ArgsLane> = ends.iter().map(|_| ArgsLane::default()).collect();
        let payloads: Vec<ArgBin> = self.payloads.iter().copied().collect();
        let bin: Vec<u8> = self.bin.iter().copied().collect();
        let mut places: Vec<Vec<ArgBin>> = ends.iter().map(|_| Vec::new()).collect();
        for (i, &span) in self.buffers.iter().enumerate() {
            let seq = self.seqs[i];
            let k = ends.iter().position(|&e| seq < e).ok_or(seq)?;
            let o = &mut out[k];
            let words = self.words.get(span);
            // A buffer kept as its count alone (recorded only) stays counted.
            o.buffers.push(if words.len() == span.len() {
                o.words.append_whole(words)
            } else {
                ferry_profile::chunks::Span::counted(span.len())
            });
            o.seqs.push(seq);
            o.first_payload.push(places[k].len());
            o.walked.push(self.walked[i]);
            let end = self.first_payload.get(i + 1).copied().unwrap_or(payloads.len());
            places[k].extend_from_slice(&payloads[self.first_payload[i]..end]);
        }
        for (o, places) in out.iter_mut().zip(places) {
            for p in places {
                o.payloads.push(match p {
                    ArgBin::At { offset, size } => {
                        let at = o.bin.len() as u64;
                        let (from, to) = (offset as usize, (offset + size) as usize);
                        o.bin.extend_from_slice(bin.get(from..to).unwrap_or_default());
                        ArgBin::At { offset: at, size }
                    }
                    other => other,
                });
            }
            o.bad = self.bad;
        }
        Ok(out)
    }
}

pub(super) struct ArgsSink {
    /// The native profile each buffer's chain words are also sealed into, when recording.
    pub(super) rec: Option<Arc<ferry_profile::recorder::Recorder>>,
    /// Whether the words and payload bytes are kept (else only in the native profile: each
    /// buffer's word count and where its payloads went are kept).
    pub(super) keep: bool,
    /// The payload bytes one buffer's chains had copied, sealed into the native profile after
    /// the buffer's walk (reused; only filled while recording).
    rec_bin: Vec<u8>,
    arenas: Vec<Arc<ArgsArena>>,
    consumed: Arc<Vec<AtomicU64>>,
    pub(super) lanes: Vec<ArgsLane>,
    /// Test probe: at each payload copy, the thread's consumed count and its bin's length just
    /// before the copy. A buffer's copies and its count happen in one call, so only a look from
    /// inside the call tells which came first.
    #[cfg(test)]
    at_copy: Vec<(u64, usize)>,
}

impl ArgsSink {
    pub(super) fn new(arenas: Vec<Arc<ArgsArena>>, consumed: Arc<Vec<AtomicU64>>) -> Self {
        let lanes = (0..arenas.len()).map(|_| ArgsLane::default()).collect();
        ArgsSink {
            rec: None,
            keep: true,
            rec_bin: Vec::new(),
            arenas,
            consumed,
            lanes,
            #[cfg(test)]
            at_copy: Vec::new(),
        }
    }

    /// Joins the shards' sinks (lanes are disjoint between shards).
    pub(super) fn merge(shards: Vec<ArgsSink>) -> Vec<ArgsLane> {
        let mut out: Vec<ArgsLane> = Vec::new();
        for s in shards {
            for (i, l) in s.lanes.into_iter().enumerate() {
                if out.len() <= i {
                    out.resize_with(i + 1, ArgsLane::default);
                }
                if !l.buffers.is_empty() {
                    out[i] = l;
                }
            }
        }
        out
    }
}

impl CollectSink<u64> for ArgsSink {
    fn on_buffer_collected(&mut self, b: &CollectedBuffer<'_, u64>) {
        let t = b.lane as usize;
        if let Some(rec) = &self.rec {
            rec.append(ferry_profile::recorder::RecordStream::Args, b.lane, b.seq, b.records);
        }
        let (Some(out), arena) = (self.lanes.get_mut(t), self.arenas.get(t)) else { return };
        let span = if self.keep {
            out.words.append_whole(b.records)
        } else {
            ferry_profile::chunks::Span::counted(b.records.len())
        };
        out.buffers.push(span);
        out.seqs.push(b.seq);
        out.first_payload.push(out.payloads.len());
        let mut copied = 0u64;
        // Relaxed: the device cursor as an overwrite high-water mark, read once per
        // buffer (the device stores it after every payload; a read per payload would pull its
        // line away from the writing thread each time). A stale value is only smaller, i.e.
        // less conservative by bytes the device had not yet written when it was read.
        let hw = arena.map_or(0, |a| a.write_offset().load(Ordering::Relaxed));
        // A thread copies its payloads in the order its chains name them, each before its chain
        // is written, so a chain of this buffer with a payload ends it past every payload the
        // walked chains named: if the cursor has not moved past those (read after the buffer's
        // publication, it covers every payload this buffer's chains name), none does and the
        // walk is skipped. The storm at level 3 never copies a payload: its chains are framed
        // only after the run, off the run's CPU (`ferry bench dfx`: the engine's CPU per run
        // with ArgsDump alone 4.0-5.1 -> 2.4-2.5 ms, with all five 6.0-7.0 -> 4.3-4.9 ms).
        let walk = hw != out.payload_end;
        out.walked.push(walk);
        if !walk {
            return;
        }
        for chain in args_dump::chains(b.records) {
            let chain = match chain {
                Ok(c) => c,
                Err(e) => {
                    out.bad.get_or_insert(e);
                    break;
                }
            };
            // Only the payloads' offsets and sizes: the arguments are decoded after the run.
            for payload in chain.payloads() {
                let (offset, bytes) = payload.unwrap_or_default();
                let has_payload = bytes > 0;
                if has_payload {
                    out.payload_end = out.payload_end.max(offset.saturating_add(bytes));
                }
                let mut p = ArgBin::None;
                if let (true, Some(a)) = (has_payload, arena) {
                    let size = a.size();
                    if offset < hw.saturating_sub(size) || bytes > size {
                        p = ArgBin::Overwritten;
                    } else {
                        let at = out.bin_bytes as usize;
                        #[cfg(test)]
                        self.at_copy.push((
                            // Relaxed: the probe's own look; this thread is the count's writer.
                            self.consumed.get(t).map_or(0, |c| c.load(Ordering::Relaxed)),
                            at,
                        ));
                        let (bin, rec_bin) = (&mut out.bin, &mut self.rec_bin);
                        let (recording, keep) = (self.rec.is_some(), self.keep);
                        let mut copied = 0u64;
                        // SAFETY: the chain was published after the device wrote its payload, and
                        // the device overwrites a lap only after this thread's payloads are all
                        // acknowledged, which the count below (after the copies) precedes.
                        unsafe {
                            a.read_into(wrap(offset, size), bytes, |s| {
                                if keep {
                                    bin.extend_from_slice(s);
                                }
                                if recording {
                                    rec_bin.extend_from_slice(s);
                                }
                                copied += s.len() as u64;
                            })
                        };
                        out.bin_bytes += copied;
                        p = ArgBin::At { offset: at as u64, size: copied };
                    }
                }
                out.payloads.push(p);
                copied += u64::from(has_payload);
            }
        }
        if let (Some(rec), false) = (&self.rec, self.rec_bin.is_empty()) {
            // The bytes this buffer's payloads added to the lane's bin, in the same order: the
            // native profile's `args_bin` chunks of a lane are its bin.
            let stream = ferry_profile::recorder::RecordStream::ArgsBin;
            rec.append_bytes(stream, b.lane, b.seq, &self.rec_bin);
            self.rec_bin.clear();
        }
        if let (true, Some(c)) = (copied > 0, self.consumed.get(t)) {
            // Release: orders the payload copies above before the count; pairs with the ack
            // hook's Acquire load, which then publishes it to the device.
            c.fetch_add(copied, Ordering::Release);
        }
    }
}

/// `publish_arena_acks`: tells each scheduler thread how many of its payloads the host copied.
pub(super) struct ArgsAcks {
    pub(super) arenas: Vec<Arc<ArgsArena>>,
    pub(super) consumed: Arc<Vec<AtomicU64>>,
}

impl ReplenishHooks for ArgsAcks {
    fn publish_arena_acks(&mut self) {
        for (a, c) in self.arenas.iter().zip(self.consumed.iter()) {
            // Acquire: pairs with the collector's Release increment, so the copies it counted
            // happen before the acknowledgement below (and the device's next lap of writes).
            let n = c.load(Ordering::Acquire);
            // Relaxed: this thread is the counter's only writer. An unchanged count is not
            // stored again: each store takes the line from a device thread at its arena gate.
            if a.completed().load(Ordering::Relaxed) != n {
                // Release: pairs with the device's Acquire load in the arena gate
                // (`copy_payload`).
                a.completed().store(n, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lane of four collected buffers (sequence 0 to 3), the second not walked, with payloads
    /// copied, overwritten and absent.
    fn lane() -> ArgsLane {
        let mut l = ArgsLane::default();
        let buffers: [&[u64]; 4] = [&[10], &[11, 12], &[13], &[14]];
        let payloads: [&[ArgBin]; 4] = [
            &[ArgBin::At { offset: 0, size: 3 }, ArgBin::None],
            &[],
            &[ArgBin::At { offset: 3, size: 2 }],
            &[ArgBin::Overwritten, ArgBin::At { offset: 5, size: 1 }],
        ];
        for (seq, (words, places)) in buffers.iter().zip(payloads).enumerate() {
            l.buffers.push(l.words.append_whole(words));
            l.seqs.push(seq as u32);
            l.first_payload.push(l.payloads.len());
            l.walked.push(seq != 1);
            for &p in places {
                l.payloads.push(p);
            }
        }
        l.bin.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
        l
    }

    fn words(l: &ArgsLane) -> Vec<Vec<u64>> {
        l.buffers.iter().map(|&s| l.words.get(s).to_vec()).collect()
    }

    /// Each run gets exactly its own buffers (by sequence number against the run ends), their
    /// payload places rebased onto a `bin` holding only that run's payload bytes.
    #[test]
    fn split_runs_gives_each_run_its_buffers_and_its_own_payload_bytes() {
        let runs = lane().split_runs(&[2, 4]).unwrap();
        assert_eq!(runs.len(), 2);
        let (a, b) = (&runs[0], &runs[1]);
        assert_eq!(words(a), vec![vec![10], vec![11, 12]]);
        assert_eq!((a.seqs.clone(), a.first_payload.clone()), (vec![0, 1], vec![0, 2]));
        assert_eq!(a.walked, vec![true, false]);
        assert_eq!(a.payloads.to_vec(), vec![ArgBin::At { offset: 0, size: 3 }, ArgBin::None]);
        assert_eq!(a.bin.to_vec(), vec![1, 2, 3]);
        assert_eq!(words(b), vec![vec![13], vec![14]]);
        assert_eq!((b.seqs.clone(), b.first_payload.clone()), (vec![2, 3], vec![0, 1]));
        assert_eq!(b.walked, vec![true, true]);
        assert_eq!(
            b.payloads.to_vec(),
            vec![
                ArgBin::At { offset: 0, size: 2 },
                ArgBin::Overwritten,
                ArgBin::At { offset: 2, size: 1 }
            ]
        );
        assert_eq!(b.bin.to_vec(), vec![4, 5, 6]);
    }

    /// An arena of `size` payload bytes in memory the test owns, whose payload byte at physical
    /// offset `p` reads `p as u8`.
    fn patterned_arena(size: u64) -> Arc<ArgsArena> {
        let total = ArgsArena::HEADER_BYTES + size;
        let words: Box<[AtomicU64]> = (0..total / 8)
            .map(|i| {
                let at = (i * 8).wrapping_sub(ArgsArena::HEADER_BYTES);
                let bytes: [u8; 8] = std::array::from_fn(|b| (at + b as u64) as u8);
                AtomicU64::new(if i * 8 < ArgsArena::HEADER_BYTES {
                    0
                } else {
                    u64::from_le_bytes(bytes)
                })
            })
            .collect();
        let base = std::ptr::NonNull::from(&words[0]).cast::<u8>();
        // SAFETY: `words` is 8-aligned, `total` bytes long, owned by the arena from here on, and
        // only read through it.
        Arc::new(unsafe { ArgsArena::from_raw_parts(base, total, Arc::new(words)) })
    }

    /// One chain of tensor arguments naming the payloads `(offset, bytes)` (0 bytes: none).
    fn chain(payloads: &[(u64, u64)]) -> Vec<u64> {
        use ferry_abi::args_dump::{ArgBody, ArgsChainHead, ChainArg};
        let mut out = vec![0u64; 64];
        let head = ArgsChainHead { task_id: 7, stage: 0, func_count: 1, func_ids: [3, 0, 0] };
        let mut len = args_dump::start(&mut out, &head).unwrap();
        for (i, &(payload_offset, payload_size)) in payloads.iter().enumerate() {
            let a = ChainArg {
                role: 0,
                dtype: 0,
                flags: 0,
                arg_index: i as u16,
                truncated: false,
                contiguous: true,
                body: ArgBody::Tensor {
                    payload_offset,
                    payload_size,
                    dims: &[(4, 1)],
                    start_offset: 0,
                },
            };
            len = args_dump::push_arg(&mut out, len, &a).unwrap();
        }
        out.truncate(len);
        out
    }

    /// The collector copies a payload the device's cursor has not lapped, up to the arena's
    /// whole size; one the cursor lapped (its offset a full arena behind the cursor) or larger
    /// than the arena is overwritten; an argument without a payload has none. Every payload
    /// counts once for the acknowledgement, copied or overwritten.
    #[test]
    fn a_payload_is_copied_unless_lapped_or_larger_than_the_arena() {
        let arena = patterned_arena(256);
        let consumed = Arc::new(vec![AtomicU64::new(0)]);
        let mut sink = ArgsSink::new(vec![arena.clone()], consumed.clone());
        // The cursor has written 1024 bytes: offsets below 768 were overwritten by its last lap.
        arena.write_offset().store(1024, Ordering::Relaxed);
        let words = chain(&[(800, 16), (100, 16), (768, 256), (768, 260), (0, 0)]);
        let b = CollectedBuffer { lane: 0, kind: 0, seq: 0, queue: 0, shard: 0, records: &words };
        sink.on_buffer_collected(&b);
        let lane = &sink.lanes[0];
        assert_eq!(
            lane.payloads.to_vec(),
            vec![
                ArgBin::At { offset: 0, size: 16 },
                ArgBin::Overwritten,
                ArgBin::At { offset: 16, size: 256 },
                ArgBin::Overwritten,
                ArgBin::None,
            ]
        );
        let expected: Vec<u8> = (32..48).chain(0..=255).collect();
        assert_eq!(lane.bin.to_vec(), expected, "offset 800 is physical 32; 768 is 0");
        assert_eq!(consumed[0].load(Ordering::Relaxed), 4);
        assert_eq!(lane.walked, vec![true]);
    }

    /// A payload counts as consumed, for the acknowledgement, only once its bytes are in the
    /// thread's bin: while a buffer's payloads are copied the count stands at the payloads of the
    /// buffers before it, and it rises by the buffer's payloads after the last copy. The
    /// acknowledgement then publishes exactly that count, never more than the bin holds.
    #[test]
    fn a_payload_counts_consumed_only_once_its_bytes_are_in_the_bin() {
        let arena = patterned_arena(256);
        let consumed = Arc::new(vec![AtomicU64::new(0)]);
        let mut sink = ArgsSink::new(vec![arena.clone()], consumed.clone());
        let mut acks = ArgsAcks { arenas: vec![arena.clone()], consumed: consumed.clone() };
        let collect = |s: &mut ArgsSink, seq: u32, words: &[u64]| {
            let b = CollectedBuffer { lane: 0, kind: 0, seq, queue: 0, shard: 0, records: words };
            s.on_buffer_collected(&b);
        };
        // Buffer 0: two payloads of 32 bytes (cursor 64).
        arena.write_offset().store(64, Ordering::Relaxed);
        collect(&mut sink, 0, &chain(&[(0, 32), (32, 32)]));
        assert_eq!(sink.at_copy, [(0, 0), (0, 32)], "counted before its copy");
        assert_eq!((consumed[0].load(Ordering::Relaxed), sink.lanes[0].bin.len()), (2, 64));
        acks.publish_arena_acks();
        assert_eq!(arena.completed().load(Ordering::Relaxed), 2);
        // Buffer 1: one more (cursor 96).
        arena.write_offset().store(96, Ordering::Relaxed);
        collect(&mut sink, 1, &chain(&[(64, 32)]));
        assert_eq!(sink.at_copy[2..], [(2, 64)], "counted before its copy");
        assert_eq!((consumed[0].load(Ordering::Relaxed), sink.lanes[0].bin.len()), (3, 96));
        acks.publish_arena_acks();
        assert_eq!(arena.completed().load(Ordering::Relaxed), 3);
    }

    /// Each thread's acknowledgement is its own: thread 0's payloads are acknowledged to thread
    /// 0's arena while thread 1 has consumed nothing, and thread 1's later payload moves thread
    /// 1's acknowledgement alone.
    #[test]
    fn each_threads_acknowledgement_is_its_own() {
        let arenas = vec![patterned_arena(256), patterned_arena(256)];
        let consumed = Arc::new(vec![AtomicU64::new(0), AtomicU64::new(0)]);
        let mut sink = ArgsSink::new(arenas.clone(), consumed.clone());
        let mut acks = ArgsAcks { arenas: arenas.clone(), consumed };
        let collect = |s: &mut ArgsSink, lane: u32, words: &[u64]| {
            let b =
                CollectedBuffer { lane, kind: 0, seq: 0, queue: lane, shard: 0, records: words };
            s.on_buffer_collected(&b);
        };
        let completed = || -> Vec<u64> {
            arenas.iter().map(|a| a.completed().load(Ordering::Relaxed)).collect()
        };
        acks.publish_arena_acks();
        assert_eq!(completed(), vec![0, 0]);
        arenas[0].write_offset().store(64, Ordering::Relaxed);
        collect(&mut sink, 0, &chain(&[(0, 32), (32, 32)]));
        acks.publish_arena_acks();
        assert_eq!(completed(), vec![2, 0], "thread 0's two, whatever thread 1 consumed");
        arenas[1].write_offset().store(32, Ordering::Relaxed);
        collect(&mut sink, 1, &chain(&[(0, 32)]));
        acks.publish_arena_acks();
        assert_eq!(completed(), vec![2, 1], "thread 1's one, thread 0's unchanged");
    }

    /// A buffer numbered at or past the last run's end is refused with its sequence number; a
    /// run with no buffer comes out empty.
    #[test]
    fn split_runs_refuses_a_buffer_past_the_last_end_and_keeps_empty_runs() {
        assert_eq!(lane().split_runs(&[2, 3]).err(), Some(3));
        let runs = lane().split_runs(&[0, 4]).unwrap();
        assert!(runs[0].buffers.is_empty() && runs[0].bin.is_empty());
        assert_eq!(runs[1].seqs, vec![0, 1, 2, 3]);
        assert_eq!(runs[1].bin.to_vec(), vec![1, 2, 3, 4, 5, 6]);
    }
}
