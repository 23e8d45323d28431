//! Criterion benches of the task runtime: a storm run end to end (prepare → launch → finalize)
//! per variant, and the direct kernel call it is compared with. `ferry bench runtime --json`
//! reports the same figures for the 50,000-task storm.
// criterion_group! expands to an undocumented `pub fn`.
#![allow(missing_docs)]
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferry_runtime::device::image::F32Slice;
use ferry_runtime::device::kernels::{execute, KernelCall, K_ADD_SCALAR};
use ferry_runtime::examples::storm;
use ferry_runtime::host::{DeviceRunner, RunnerConfig, Variant};
use ferry_sim::Arch;

const TASKS: u64 = 2_000;

fn storm_runs(c: &mut Criterion) {
    let ex = storm(TASKS);
    let mut g = c.benchmark_group("storm_2000_tasks");
    g.throughput(Throughput::Elements(TASKS));
    g.sample_size(10);
    // One runner (device) per runtime: the default vendor device binds one Path A runtime per
    // process and device.
    for (v, name) in [
        (Variant::DeviceOrchestrated, "device_orchestrated"),
        (Variant::HostBuiltGraph, "host_built_graph"),
    ] {
        let mut r = DeviceRunner::new(RunnerConfig::default_for(Arch::A2a3)).unwrap();
        r.register_callable(0, ex.callable.clone().with_variant(v)).unwrap();
        g.bench_function(name, |b| b.iter(|| r.run(0, ex.args.clone()).unwrap()));
    }
    g.finish();
}

fn direct_kernel_call(c: &mut Criterion) {
    let r = DeviceRunner::new(RunnerConfig::small(Arch::A2a3)).unwrap();
    let buf = r.device().malloc(64).unwrap();
    r.device().copy_htod(&[0u8; 64], buf).unwrap();
    let scalars = [u64::from(1.0f32.to_bits())];
    c.bench_function("direct_add_scalar_16_elements", |b| {
        b.iter(|| {
            let t = F32Slice::new(r.ops(), buf.0, 64).unwrap();
            let call = KernelCall {
                kernel: K_ADD_SCALAR,
                tensors: &[t],
                scalars: &scalars,
                block_idx: 0,
                block_dim: 1,
            };
            execute(&call).unwrap();
        })
    });
}

criterion_group!(benches, storm_runs, direct_kernel_call);
criterion_main!(benches);
