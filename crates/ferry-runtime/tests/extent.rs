//! Descriptor extents per arch x variant and the launch-slot capacity rule computed from them,
//! checked against what the runner's slots really hold and upload.
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::{
    descriptor_extent, metadata_bytes, DeviceRunner, RunnerConfig, SlotCapacity, Variant,
    ROUTE_PREFIX_BYTES,
};
use ferry_sim::Arch;

#[test]
fn each_slot_holds_what_the_capacity_rule_computes_from_the_extents() {
    let _bound = ferry_watchdog::bound("the simulated chip's run");
    for arch in Arch::ALL {
        for variant in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
            let what = format!("{arch:?} {variant:?}");
            let cfg = RunnerConfig::small(arch);
            let mut r = DeviceRunner::new(cfg).unwrap();
            let v = Example::Vector.build(Size::Small).with_variant(variant);
            let pa = Example::PagedAttention.build(Size::Small).with_variant(variant);
            let e_v = descriptor_extent(&cfg, &v.callable, &v.args).unwrap();
            let e_pa = descriptor_extent(&cfg, &pa.callable, &pa.args).unwrap();
            // The vector example has the bigger host-built graph, paged attention the more
            // tensors and scalars.
            let ((small, e_small), (big, e_big)) = if e_v.extent() < e_pa.extent() {
                ((v, e_v), (pa, e_pa))
            } else {
                ((pa, e_pa), (v, e_v))
            };
            assert_eq!(e_small.route_prefix, ROUTE_PREFIX_BYTES as u64);
            assert_eq!(e_small.metadata, metadata_bytes(arch, variant), "{what}");
            assert_eq!(
                e_small.metadata > 0,
                arch == Arch::A5 && variant == Variant::HostBuiltGraph,
                "{what}: only the a5 host-built graph stages metadata"
            );
            r.register_callable(0, small.callable.clone()).unwrap();
            r.register_callable(1, big.callable.clone()).unwrap();
            let slots = r.config().launch_slots as usize;
            // One run per slot: the suffix each uploads is exactly the computed one.
            for _ in 0..slots {
                let before = r.launch_stats().unwrap().suffix_bytes;
                small.verify(&r.run(0, small.args.clone()).unwrap()).unwrap();
                let up = r.launch_stats().unwrap().suffix_bytes - before;
                assert_eq!(up, e_small.run_suffix, "{what}: suffix bytes of one run");
            }
            let want = SlotCapacity::serving([e_small]);
            assert_eq!(r.slot_capacities(), vec![want; slots], "{what}");
            // Slot 0 serves the bigger graph, then the smaller again: it keeps the larger
            // destination and pinned source (both only grow).
            for (id, ex) in [(1, &big), (0, &small), (0, &small)] {
                ex.verify(&r.run(id, ex.args.clone()).unwrap()).unwrap();
            }
            let both = SlotCapacity::serving([e_small, e_big]);
            let caps = r.slot_capacities();
            assert_eq!(caps[0], both, "{what}: slot 0 served both graphs");
            assert!(caps.iter().all(|c| *c == both || *c == want), "{what}: {caps:?}");
            assert!(e_big.extent() > e_small.extent(), "{what}: the test needs a bigger graph");
            // Total requested pinned capacity: the sum over the slots.
            let pinned: u64 = caps.iter().map(|c| c.pinned).sum();
            assert_eq!(r.device().pinned_stats().live_bytes, pinned, "{what}");
            r.finalize().unwrap();
        }
    }
}
