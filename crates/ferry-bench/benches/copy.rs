//! Criterion benches of the copy path: gather throughput for 4 KiB, 64 KiB and 256 KiB
//! fragments against one contiguous copy of the same bytes (and against one null-stream copy
//! per fragment), and planning cost per item. Sizes are [`CopyBenchConfig::default`]'s scaled-down
//! shapes; `ferry bench copy --full` runs the 8192 fragments of each size.
// criterion_group! expands to an undocumented `pub fn`.
#![allow(missing_docs)]
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ferry_bench::copy::{CopyBenchConfig, GatherFixture, Path};
use ferry_copy::planner::plan_items;
use ferry_copy::{Loc, TransferItem, TransferRef};
use std::time::Duration;

fn gather(c: &mut Criterion) {
    let mut g = c.benchmark_group("gather_h2d");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for (frag, count) in CopyBenchConfig::default().shapes {
        let mut f = GatherFixture::new(frag, count).expect("fixture");
        g.throughput(Throughput::Bytes(frag * count));
        let label = format!("{}x{}KiB", count, frag >> 10);
        for (name, path) in [
            ("engine", Path::Engine),
            ("per_fragment", Path::PerFragment),
            ("contiguous", Path::Contiguous),
        ] {
            g.bench_function(BenchmarkId::new(name, &label), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| f.run(path).expect("transfer")).sum())
            });
        }
        f.verify().expect("bytes");
    }
    g.finish();
}

fn plan(c: &mut Criterion) {
    let n = 8192u64;
    let src = TransferRef { addr: 0x1000_0000, size: n * 4096, loc: Loc::Cpu, device: None };
    let dst = TransferRef { addr: 0x9000_0000, size: n * 4096, loc: Loc::Device, device: Some(0) };
    let items: Vec<_> = (0..n)
        .map(|i| TransferItem {
            src,
            src_offset: ((i * 7) % n) * 4096,
            dst,
            dst_offset: i * 4096,
            size: 4096,
            tag: i,
        })
        .collect();
    let mut g = c.benchmark_group("plan");
    g.throughput(Throughput::Elements(n));
    g.bench_function("8192_scattered_items", |b| b.iter(|| plan_items(&items, |_, _| true)));
    g.finish();
}

criterion_group!(benches, gather, plan);
criterion_main!(benches);
