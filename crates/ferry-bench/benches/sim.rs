//! Criterion benches of the simulated chip: handshake dispatch round trip, null-stream copies and
//! a device clock read on each host counter. `ferry bench sim --json` reports the idle CPU cost
//! next to these.
// criterion_group! expands to an undocumented `pub fn`.
#![allow(missing_docs)]
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferry_sim::cores::{Chip, CoreConfig};
use ferry_sim::{Arch, PlatformBuilder};
use std::sync::Arc;
use std::time::Instant;

fn handshake(c: &mut Criterion) {
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(64 << 20).build().unwrap();
    let chip =
        Chip::new(p.device(0).unwrap().clone(), CoreConfig { aicpu_threads: 1, aic: 1, aiv: 0 })
            .unwrap();
    let done = chip.launch_aicore(1, Arc::new(ferry_bench::sim::echo_core)).unwrap();
    let w = chip.window(0).clone();
    let mut id = 0u32;
    c.bench_function("handshake_round_trip", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                id += 1;
                w.aicpu_write(0xA0, id);
                w.aicpu_wait(0x4C8, |v| v == (1 << 31) | id, None);
            }
            t.elapsed()
        })
    });
    w.aicpu_write(0xA0, 0x7FFF_FFF0);
    done.wait().unwrap();
}

fn copies(c: &mut Criterion) {
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(64 << 20).build().unwrap();
    let d = p.device(0).unwrap();
    let buf = d.malloc(1 << 20).unwrap();
    let host = vec![1u8; 1 << 20];
    let mut g = c.benchmark_group("null_stream_copy");
    g.throughput(Throughput::Bytes(host.len() as u64));
    g.bench_function("htod_1MiB", |b| b.iter(|| d.copy_htod(&host, buf).unwrap()));
    g.finish();
}

/// One device clock read: the TSC (plain and ordered, where the host kernel keeps time with it)
/// against `CLOCK_MONOTONIC`, the baseline, on the same a5 clock.
fn clock(c: &mut Criterion) {
    use ferry_sim::clock::{DeviceClock, RealSource};
    let arch = ferry_abi::arch::A5;
    let mut g = c.benchmark_group("device_clock_read");
    let mono = DeviceClock::real_from(&arch, RealSource::Monotonic);
    g.bench_function("monotonic", |b| b.iter(|| std::hint::black_box(mono.now_cycles())));
    let auto = DeviceClock::real_from(&arch, RealSource::Auto);
    if auto.source_name() == "tsc" {
        g.bench_function("tsc", |b| b.iter(|| std::hint::black_box(auto.now_cycles())));
        g.bench_function("tsc_ordered", |b| {
            b.iter(|| std::hint::black_box(auto.now_cycles_ordered()))
        });
    }
    g.finish();
}

criterion_group!(benches, handshake, copies, clock);
criterion_main!(benches);
