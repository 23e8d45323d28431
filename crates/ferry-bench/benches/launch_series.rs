//! Criterion bench of the launch bench's runtime series: back-to-back verified runs of the
//! vector example (host-built graph, a2a3), one launch slot against two. `ferry bench launch
//! --json` reports the same series as medians of interleaved rounds, with the descriptor
//! counters.
// criterion_group! expands to an undocumented `pub fn`.
#![allow(missing_docs)]
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferry_bench::launch_series::{series_runner, LaunchSeriesConfig};

fn runtime_series(c: &mut Criterion) {
    let cfg = LaunchSeriesConfig::default();
    let mut g = c.benchmark_group("vector_back_to_back_runs");
    g.throughput(Throughput::Elements(1));
    g.sample_size(10);
    for (slots, name) in [(1, "serial_1_slot"), (cfg.pipelined_slots, "pipelined")] {
        let mut series = series_runner(&cfg, slots).unwrap();
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let runs = u32::try_from(iters).unwrap_or(u32::MAX);
                series(runs).expect("a run of the series failed")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, runtime_series);
criterion_main!(benches);
