//! Launch staging as the runtime uses it (issue 12): the descriptor split (per-run values travel
//! in the per-run suffix, outside the cached launch-route prefix), measured with the launch
//! transaction's own counters.
use ferry_launch::transaction::StagingStats;
use ferry_runtime::examples::{Example, Size};
use ferry_runtime::host::{DeviceRunner, RunnerConfig, Variant, ROUTE_PREFIX_BYTES};
use ferry_sim::Arch;

fn delta(a: StagingStats, b: StagingStats) -> StagingStats {
    StagingStats {
        publishes: b.publishes - a.publishes,
        bytes_copied: b.bytes_copied - a.bytes_copied,
        descriptor_copies: b.descriptor_copies - a.descriptor_copies,
        metadata_copies: b.metadata_copies - a.metadata_copies,
        unchanged_prefixes: b.unchanged_prefixes - a.unchanged_prefixes,
        forks: b.forks - a.forks,
        growths: b.growths - a.growths,
        suffix_uploads: b.suffix_uploads - a.suffix_uploads,
        suffix_bytes: b.suffix_bytes - a.suffix_bytes,
    }
}

/// An identical graph launched again copies no descriptor byte and (without a caller
/// dependency, and with no launch metadata) queues no entry fork; a changed graph copies
/// exactly its prefix. Every run still verifies: the per-run suffix (new epoch, new tensor
/// addresses, fresh handshakes and result) reached the device without a stream copy.
#[test]
fn repeated_identical_run_publishes_nothing_and_changed_run_copies_its_prefix() {
    for arch in Arch::ALL {
        for variant in [Variant::DeviceOrchestrated, Variant::HostBuiltGraph] {
            let what = format!("{arch:?} {variant:?}");
            let mut r = DeviceRunner::new(RunnerConfig::small(arch)).unwrap();
            let ex = Example::Vector.build(Size::Small).with_variant(variant);
            // Two callables with the same graph: their headers differ (callable id), so a run of
            // one after the other is a changed prefix.
            r.register_callable(0, ex.callable.clone()).unwrap();
            r.register_callable(1, ex.callable.clone()).unwrap();
            // The a5 host-built graph stages its resident scheduler state as launch metadata on
            // every run (seed 004): those copies, and the fork after them, are not the
            // descriptor's.
            let a5_hbg = arch == Arch::A5 && variant == Variant::HostBuiltGraph;
            let run = |r: &mut DeviceRunner, id: u32| {
                let before = r.launch_stats().unwrap();
                let out = r.run(id, ex.args.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
                ex.verify(&out).unwrap_or_else(|e| panic!("{what}: {e}"));
                delta(before, r.launch_stats().unwrap())
            };
            // Cold: every slot publishes its first descriptor.
            let mut metadata = 0;
            for _ in 0..1 {
                let d = run(&mut r, 0);
                assert_eq!(d.descriptor_copies, 1, "{what}: a cold slot copies its prefix");
            }
            for k in 0..3 {
                let d = run(&mut r, 0);
                metadata = d.bytes_copied;
                assert_eq!(d.descriptor_copies, 0, "{what} repeat {k}: {d:?}");
                assert_eq!(d.unchanged_prefixes, 1, "{what} repeat {k}: {d:?}");
                assert_eq!(d.publishes, 1, "{what} repeat {k}: {d:?}");
                assert_eq!(d.suffix_uploads, 1, "{what} repeat {k}: the suffix goes every run");
                if a5_hbg {
                    assert_eq!(d.metadata_copies, 1, "{what} repeat {k}: {d:?}");
                    assert!(metadata > 0, "{what} repeat {k}: {d:?}");
                    assert_eq!(d.forks, 1, "{what} repeat {k}: the fork follows the metadata");
                } else {
                    assert_eq!((metadata, d.forks), (0, 0), "{what} repeat {k}: {d:?}");
                }
            }
            // A changed graph: exactly the prefix (plus the metadata where there is some).
            let d = run(&mut r, 1);
            assert_eq!(d.descriptor_copies, 1, "{what}: {d:?}");
            assert_eq!(d.bytes_copied, ROUTE_PREFIX_BYTES as u64 + metadata, "{what}: {d:?}");
            assert_eq!(d.forks, 1, "{what}: a copied prefix is forked after");
        }
    }
}
