//! Criterion benches of the DFX transport: writer hot path, buffer switch, drain throughput
//! (polling and with the doorbell hint) next to a streaming memcpy of the same working set, stall
//! per lane with a shrunk pool, and ArgsDump's chains (a storm task's arguments encoded and read
//! back) next to the fixed 128-byte records they replace.
//!
//! The same measurements are available as one report through `ferry_bench::dfx::transport::run`
//! (the `transport` of what `ferry bench dfx --json` prints).

use std::time::Duration;

use criterion::{criterion_main, Criterion, Throughput};
use ferry_abi::arch::Arch;
use ferry_bench::dfx::transport as bench;

fn writer(c: &mut Criterion) {
    let mut g = c.benchmark_group("writer");
    g.throughput(Throughput::Elements(1));
    for arch in Arch::ALL {
        g.bench_function(format!("record_hot_path/{}", arch.name()), |b| {
            b.iter_custom(|iters| bench::hot_path(arch, iters))
        });
        g.bench_function(format!("buffer_switch/{}", arch.name()), |b| {
            b.iter_custom(|iters| bench::switches(arch, iters))
        });
    }
    g.finish();
}

fn drain(c: &mut Criterion) {
    const BYTES: u64 = 32 << 20;
    // 8 buffers of 32 Ki records of 32 bytes: the working set of both measurements.
    const POOL: u32 = 8;
    const RPB: u32 = 32 * 1024;
    let mut g = c.benchmark_group("drain");
    g.throughput(Throughput::Bytes(BYTES));
    g.sample_size(10);
    for arch in Arch::ALL {
        for bell in [false, true] {
            let name = format!(
                "writer_to_collector/{}/{}",
                arch.name(),
                if bell { "doorbell" } else { "poll" }
            );
            g.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    (0..iters).map(|_| bench::drain(arch, BYTES, POOL, RPB, bell).0).sum()
                })
            });
        }
    }
    g.bench_function("memcpy_same_working_set", |b| {
        let ws = (POOL * RPB) as usize * 32;
        b.iter_custom(|iters| {
            (0..iters).map(|_| bench::memcpy(BYTES, ws, ws / POOL as usize)).sum()
        })
    });
    g.finish();
}

fn stall(c: &mut Criterion) {
    let mut g = c.benchmark_group("stall");
    g.sample_size(10);
    for arch in Arch::ALL {
        // Reports the run time of four one-buffer lanes behind a 50 µs/buffer collector; the
        // per-lane stall split is in `bench::run`'s report.
        g.bench_function(format!("shrunk_pool_4_lanes/{}", arch.name()), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let s = bench::stall(arch, 4, 20, Duration::from_micros(50));
                        Duration::from_nanos(s.iter().map(|l| l.stall_ns).max().unwrap_or(0))
                    })
                    .sum()
            })
        });
    }
    g.finish();
}

/// A storm task's three arguments: the input tensor and the scalar before dispatch, the output
/// after completion.
fn storm_args(task: u64) -> [ferry_abi::records::ArgsDumpRecord; 3] {
    use ferry_abi::records::{self as abi, ArgsDumpRecord};
    let input = ArgsDumpRecord {
        task_id: task,
        role: abi::ARG_ROLE_INPUT,
        stage: abi::ARG_STAGE_BEFORE_DISPATCH,
        ndims: 1,
        dtype: abi::DType::Float32 as u8,
        is_contiguous: 1,
        payload_offset: 128 * task,
        payload_size: 64,
        func_ids: [4, 0, 0],
        func_count: 1,
        shapes: [16, 0, 0, 0, 0],
        strides: [1, 0, 0, 0, 0],
        ..Default::default()
    };
    let scalar = ArgsDumpRecord {
        kind: abi::ARG_KIND_SCALAR,
        role: abi::ARG_ROLE_SCALAR,
        arg_index: 1,
        ndims: 0,
        payload_offset: 0,
        payload_size: 0,
        shapes: [0; 5],
        strides: [0; 5],
        scalar_value: 3,
        ..input
    };
    let output = ArgsDumpRecord {
        role: abi::ARG_ROLE_OUTPUT,
        stage: abi::ARG_STAGE_AFTER_COMPLETION,
        arg_index: 2,
        payload_offset: 128 * task + 64,
        ..input
    };
    [input, scalar, output]
}

fn args_chain(c: &mut Criterion) {
    use ferry_abi::args_dump::{self, ArgsChainHead};
    use std::hint::black_box;
    const TASKS: u64 = 4096;
    let mut g = c.benchmark_group("args_chain");
    g.throughput(Throughput::Elements(TASKS));
    // Baseline: the original's device records, three 128-byte records per task into a buffer.
    let mut records = Vec::with_capacity(3 * TASKS as usize);
    g.bench_function("records_128b/write", |b| {
        b.iter(|| {
            records.clear();
            for t in 0..TASKS {
                records.extend_from_slice(&storm_args(black_box(t)));
            }
            black_box(records.len())
        })
    });
    // Chains: two per task (one per stage), 16 words in all.
    let mut words = vec![0u64; 32 * TASKS as usize];
    let encode = |words: &mut [u64]| {
        let mut at = 0;
        for t in 0..TASKS {
            let [input, scalar, output] = storm_args(black_box(t));
            for stage in [&[input, scalar][..], &[output][..]] {
                let out = &mut words[at..];
                let mut n = args_dump::start(out, &ArgsChainHead::of(&stage[0])).unwrap();
                for r in stage {
                    n = args_dump::push(out, n, r).unwrap();
                }
                at += n;
            }
        }
        at
    };
    g.bench_function("chains/write", |b| b.iter(|| black_box(encode(&mut words))));
    // The same chains as the device writes them: typed arguments straight from the task, no
    // 128-byte record first; one argument at a time (`args_dump::push_arg`, the general path)
    // or the whole chain in one pass (`put_arg`, then `header`: a stage without payloads).
    let typed = |words: &mut [u64], one_pass: bool| {
        use args_dump::{ArgBody, ChainArg};
        use ferry_abi::records as abi;
        let mut at = 0;
        for t in 0..TASKS {
            let t = black_box(t);
            let head =
                |stage| ArgsChainHead { task_id: t, stage, func_count: 1, func_ids: [3, 0, 0] };
            let tensor = |role, arg_index, payload_offset| ChainArg {
                role,
                dtype: 2,
                flags: 0,
                arg_index,
                truncated: false,
                contiguous: true,
                body: ArgBody::Tensor {
                    payload_offset,
                    payload_size: 64,
                    dims: &[(16, 1)],
                    start_offset: 0,
                },
            };
            let scalar = ChainArg {
                body: ArgBody::Scalar(t),
                role: abi::ARG_ROLE_SCALAR,
                ..tensor(0, 1, 0)
            };
            let before = [tensor(abi::ARG_ROLE_INPUT, 0, 128 * t), scalar];
            let after = [tensor(abi::ARG_ROLE_OUTPUT, 2, 128 * t + 64)];
            for (stage, args) in [
                (abi::ARG_STAGE_BEFORE_DISPATCH, &before[..]),
                (abi::ARG_STAGE_AFTER_COMPLETION, &after[..]),
            ] {
                let out = &mut words[at..];
                let n = if one_pass {
                    let mut n = args_dump::ARGS_CHAIN_HEADER_WORDS;
                    for a in args {
                        n += args_dump::put_arg(&mut out[n..], a).unwrap();
                    }
                    let h = args_dump::header(&head(stage), args.len()).unwrap();
                    out[..h.len()].copy_from_slice(&h);
                    n
                } else {
                    let mut n = args_dump::start(out, &head(stage)).unwrap();
                    for a in args {
                        n = args_dump::push_arg(out, n, a).unwrap();
                    }
                    n
                };
                at += n;
            }
        }
        at
    };
    let mut one_pass = vec![0u64; words.len()];
    let n = typed(&mut one_pass, true);
    assert_eq!(typed(&mut words, false), n);
    assert_eq!(one_pass[..n], words[..n], "both encoders write the same chains");
    g.bench_function("chains/write_typed", |b| b.iter(|| black_box(typed(&mut words, false))));
    g.bench_function("chains/write_one_pass", |b| b.iter(|| black_box(typed(&mut one_pass, true))));
    let used = encode(&mut words);
    g.bench_function("chains/read_back", |b| {
        b.iter(|| {
            let mut n = 0u64;
            for c in args_dump::chains(&words[..used]) {
                for r in c.unwrap().records() {
                    n += r.payload_size;
                }
            }
            black_box(n)
        })
    });
    // The model step after the run: every argument expanded into a row up front (as before
    // `ChainArgs`), against the chains kept with an index and each argument decoded when read;
    // both then read every argument once.
    use ferry_profile::chunks::ChunkLog;
    use ferry_profile::{ArgBin, ChainArgs, DumpedArg};
    g.bench_function("model/rows_then_read", |b| {
        b.iter(|| {
            let mut rows: Vec<DumpedArg> = Vec::with_capacity(3 * TASKS as usize);
            for c in args_dump::chains(&words[..used]) {
                for r in c.unwrap().records() {
                    rows.push(DumpedArg::from_record(&r).unwrap());
                }
            }
            black_box(rows.iter().map(|a| a.numel).sum::<u64>())
        })
    });
    g.bench_function("model/chain_args_then_read", |b| {
        b.iter(|| {
            let mut log = ChunkLog::new();
            let span = log.append_whole(&words[..used]);
            let mut kept = ChainArgs::default();
            kept.push_lane(log, vec![span], |_| ArgBin::None).unwrap();
            black_box((0..kept.len()).filter_map(|i| kept.get(i)).map(|a| a.numel).sum::<u64>())
        })
    });
    g.finish();
}

mod group {
    use super::{args_chain, drain, stall, writer};
    criterion::criterion_group!(benches, writer, drain, stall, args_chain);
}
criterion_main!(group::benches);
