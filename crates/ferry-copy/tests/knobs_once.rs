//! The copy path's knobs are read once, when the engine is configured (docs/design/copy-pool.md):
//! an environment changed afterwards changes nothing. One test in its own binary, because it
//! sets a variable of the process environment; it sets it before any other thread exists.
mod common;
use common::*;
use ferry_copy::env::{CopyKnobs, GATHER_KERNEL_VAR, PREWARM_STREAMS_VAR};
use ferry_copy::{transfer_detailed, GatherSkip, HbmConfig, HbmCopyEngine, TransferRef};
use std::sync::Arc;

#[test]
fn knobs_read_at_start_hold_whatever_the_environment_says_later() {
    // Read once, as a server reads them at start: neither variable is set, so the defaults.
    assert!(
        std::env::var_os(GATHER_KERNEL_VAR).is_none()
            && std::env::var_os(PREWARM_STREAMS_VAR).is_none()
    );
    let knobs = CopyKnobs::from_env();
    assert_eq!(knobs, CopyKnobs::default());
    // Then the environment changes: the kernel is turned off, the prewarm too. Only this test's
    // thread exists in this binary (and the harness's, waiting for it), so nothing reads the
    // environment while it is written.
    std::env::set_var(GATHER_KERNEL_VAR, "off");
    std::env::set_var(PREWARM_STREAMS_VAR, "0");
    let _bound = ferry_watchdog::bound("the copy engine's stream workers");
    let p = platform(1);
    let e = Arc::new(HbmCopyEngine::new(p.clone(), HbmConfig::from_knobs(&knobs)));
    let r = e.prewarm(knobs.prewarm_streams);
    assert_eq!((r.devices[0].streams, r.devices[0].cap), (8, 8), "{r:?}");
    let mut host = pattern(256 * KIB as usize, 2);
    register(&e, &mut host);
    let h = host_ref(&mut host);
    let dev = p.device(0).unwrap();
    let buf = dev.malloc(64 * KIB).unwrap();
    let d = TransferRef::device(0, buf, 64 * KIB);
    for batch in 0..2u64 {
        let items = scattered(h, batch * 128 * KIB, d, 0, 4 * KIB, 16, 0);
        assert!(transfer_detailed(&*e, &items).is_ok());
        check_items(&items, &host, &read_dev(&p, 0, buf, 64 * KIB as usize));
    }
    let st = e.stats();
    assert_eq!((st.gathers, st.skip(GatherSkip::Disabled)), (2, 0), "the kernel stayed on: {st:?}");
    e.clear_host_gather_regions();
}
