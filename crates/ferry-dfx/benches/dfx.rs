//! Criterion benches of the DFX transport: writer hot path, buffer switch, drain throughput
//! (polling and with the doorbell hint) next to a streaming memcpy of the same working set, and
//! stall per lane with a shrunk pool.
//!
//! The same measurements are available as one report through `ferry_dfx::bench::run` (what
//! `ferry bench dfx --json` prints).

use std::time::Duration;

use criterion::{criterion_main, Criterion, Throughput};
use ferry_abi::arch::Arch;
use ferry_dfx::bench;

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

mod group {
    use super::{drain, stall, writer};
    criterion::criterion_group!(benches, writer, drain, stall);
}
criterion_main!(group::benches);
