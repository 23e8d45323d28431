//! Host time of one run's `prepare + publish + launch` with a changed and an unchanged
//! launch-route prefix (retirement is outside the timed region). `ferry bench launch --json`
//! reports the same figures plus the bytes each series copies.
// criterion_group! expands to an undocumented `pub fn`.
#![allow(missing_docs)]
use criterion::{criterion_group, criterion_main, Criterion};
use ferry_bench::launch::{LaunchBench, LaunchBenchConfig};
use std::time::Duration;

fn launch(c: &mut Criterion) {
    let mut g = c.benchmark_group("prepare_publish_launch");
    for (name, change) in [("changed_prefix", true), ("unchanged_prefix", false)] {
        let mut b = LaunchBench::new(&LaunchBenchConfig::default()).expect("bench setup");
        g.bench_function(name, |bencher| {
            bencher.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += b.one(change).expect("one launch transaction");
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group!(benches, launch);
criterion_main!(benches);
