//! The device engine on the seam's second backend (`ferry_backend::host`): the gather, the
//! fallback, prewarm and the error paths run on a backend that is not the simulated chip, so
//! the engine relies on the seam's contract alone.
use ferry_backend::host::{HostMemoryBackend, HostMemoryError};
use ferry_backend::{Backend, BackendDevice, BackendOp};
use ferry_copy::{
    transfer_detailed, FailureCode, GatherSkip, HbmConfig, HbmCopyEngine, TransferItem, TransferRef,
};

const F: u64 = 4096;
const N: u64 = 16;

fn engine(devices: u32) -> (HostMemoryBackend, HbmCopyEngine<HostMemoryBackend>) {
    let b = HostMemoryBackend::new(devices, 16 << 20).unwrap();
    (b.clone(), HbmCopyEngine::new(b, HbmConfig::default()))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) ^ (i >> 12) as u8).collect()
}

fn host_ref(buf: &mut [u8]) -> TransferRef {
    // SAFETY: every test keeps `buf` alive and untouched until the transfers using it have
    // been waited for (they complete inside `transfer_detailed`).
    unsafe { TransferRef::host(buf.as_mut_ptr(), buf.len()) }
}

fn register(e: &HbmCopyEngine<HostMemoryBackend>, buf: &mut [u8]) {
    // SAFETY: each test drops the engine before `buf` and does not touch `buf` while
    // transfers run.
    unsafe { e.add_host_gather_region(buf.as_mut_ptr(), buf.len()).unwrap() };
}

/// `N` pages: host page `i` to device slot `N - 1 - i` (reversed, so nothing coalesces).
fn reversed(src: TransferRef, dst: TransferRef) -> Vec<TransferItem> {
    (0..N)
        .map(|i| TransferItem {
            src,
            src_offset: i * F,
            dst,
            dst_offset: (N - 1 - i) * F,
            size: F,
            tag: i,
        })
        .collect()
}

/// The device's bytes, read back through the engine (one null-stream copy).
fn read_back(e: &HbmCopyEngine<HostMemoryBackend>, d: TransferRef) -> Vec<u8> {
    let mut out = vec![0u8; d.size as usize];
    let o = host_ref(&mut out);
    let item = TransferItem { src: d, src_offset: 0, dst: o, dst_offset: 0, size: d.size, tag: 99 };
    assert!(transfer_detailed(e, &[item]).is_ok());
    out
}

fn assert_reversed(host: &[u8], dev: &[u8]) {
    for i in 0..N as usize {
        let (s, d) = (i * F as usize, (N as usize - 1 - i) * F as usize);
        assert_eq!(&dev[d..d + F as usize], &host[s..s + F as usize], "page {i}");
    }
}

#[test]
fn scattered_pages_go_through_one_gather_each_way() {
    let (b, e) = engine(1);
    let mut host = pattern((N * F) as usize, 1);
    let mut back = vec![0u8; (N * F) as usize];
    register(&e, &mut host);
    register(&e, &mut back);
    let dev = b.device(0).unwrap().malloc(N * F).unwrap();
    let d = TransferRef::device(0, dev, N * F);
    assert!(transfer_detailed(&e, &reversed(host_ref(&mut host), d)).is_ok());
    assert!(transfer_detailed(&e, &reversed(d, host_ref(&mut back))).is_ok());
    assert_eq!(back, host, "reversed twice is the identity");
    let s = e.stats();
    assert_eq!((s.gathers, s.gather_fragments, s.fallback_plans), (2, 2 * N, 0), "{s:?}");
    assert_eq!(b.device(0).unwrap().stats().launches, 2, "one kernel per batch");
    drop(e);
    assert_eq!(b.registered_bytes(), 0, "the engine's registrations went with it");
}

#[test]
fn a_refused_launch_falls_back_to_copies_without_turning_the_kernel_off() {
    let (b, e) = engine(1);
    let mut host = pattern((N * F) as usize, 2);
    register(&e, &mut host);
    let dev = b.device(0).unwrap().malloc(N * F).unwrap();
    let d = TransferRef::device(0, dev, N * F);
    b.device(0).unwrap().fail_next(BackendOp::Launch);
    assert!(transfer_detailed(&e, &reversed(host_ref(&mut host), d)).is_ok());
    let s = e.stats();
    assert_eq!((s.gathers, s.fallback_plans, s.skip(GatherSkip::LaunchFailed)), (0, 1, 1));
    assert!(!e.is_gather_latched());
    assert_reversed(&host, &read_back(&e, d));
    assert_eq!(b.device(0).unwrap().armed(), 0, "the armed launch failure was the gather's");
}

#[test]
fn a_failed_synchronize_latches_the_kernel_off_and_the_bytes_still_arrive() {
    let (b, e) = engine(1);
    let mut host = pattern((N * F) as usize, 3);
    register(&e, &mut host);
    let dev = b.device(0).unwrap().malloc(N * F).unwrap();
    let d = TransferRef::device(0, dev, N * F);
    b.device(0).unwrap().fail_next(BackendOp::Synchronize);
    assert!(transfer_detailed(&e, &reversed(host_ref(&mut host), d)).is_ok());
    assert!(e.is_gather_latched());
    assert_eq!(e.stats().skip(GatherSkip::SyncFailed), 1);
    assert_reversed(&host, &read_back(&e, d));
    // Latched: the next batch does not try the kernel.
    let before = e.stats().skip(GatherSkip::Disabled);
    assert!(transfer_detailed(&e, &reversed(host_ref(&mut host), d)).is_ok());
    assert_eq!(e.stats().skip(GatherSkip::Disabled), before + 1);
    e.reset_gather_latch();
    assert!(transfer_detailed(&e, &reversed(host_ref(&mut host), d)).is_ok());
    assert_eq!(e.stats().gathers, 1, "re-armed");
}

#[test]
fn a_device_side_outside_every_allocation_fails_its_plan_alone_and_moves_nothing() {
    let (b, e) = engine(1);
    let mut host = pattern((2 * F) as usize, 4);
    let dev = b.device(0).unwrap().malloc(F).unwrap();
    let good = TransferRef::device(0, dev, F);
    // An endpoint that claims twice the allocation: its second page is nobody's memory.
    let bad = TransferRef::device(0, dev, 2 * F);
    let h = host_ref(&mut host);
    let items = [
        TransferItem { src: h, src_offset: 0, dst: good, dst_offset: 0, size: F, tag: 1 },
        TransferItem { src: h, src_offset: F, dst: bad, dst_offset: F, size: F, tag: 2 },
    ];
    let o = transfer_detailed(&e, &items);
    assert_eq!(o.failures.len(), 1, "{o:?}");
    let f = &o.failures[0];
    assert_eq!((f.code, f.tags.as_slice()), (FailureCode::InvalidAddress, &[2][..]));
    assert!(f.message.contains("outside every allocation of device 0"), "{}", f.message);
    assert_eq!(&read_back(&e, good)[..], &host[..F as usize], "the good plan landed");
}

#[test]
fn a_failed_null_stream_copy_is_a_copy_failure_naming_the_operation_and_its_cause() {
    let (b, e) = engine(1);
    let mut host = pattern(F as usize, 5);
    let dev = b.device(0).unwrap().malloc(F).unwrap();
    let d = TransferRef::device(0, dev, F);
    b.device(0).unwrap().fail_next(BackendOp::Copy);
    let item = TransferItem {
        src: host_ref(&mut host),
        src_offset: 0,
        dst: d,
        dst_offset: 0,
        size: F,
        tag: 7,
    };
    let o = transfer_detailed(&e, &[item]);
    assert_eq!(o.failures.len(), 1);
    assert_eq!(o.failures[0].code, FailureCode::CopyFailed);
    assert_eq!(o.failures[0].message, "null-stream copy: copying: injected fault at copying");
}

#[test]
fn prewarm_creates_the_pool_groups_the_warm_up_copies_and_caps_it() {
    let (b, e) = engine(2);
    let r = e.prewarm(3);
    assert_eq!(r.devices.len(), 2);
    for (o, dp) in r.devices.iter().enumerate() {
        assert!(dp.errors.is_empty(), "{:?}", dp.errors);
        assert_eq!((dp.streams, dp.cap, dp.null_stream_warm), (3, 3, true));
        let s = b.device(o as u32).unwrap().stats();
        // Three pooled streams and the null stream; the warm-up gathers are not counted as
        // launches; the three uploads and the null stream's first copy joined one group.
        assert_eq!((s.streams_created, s.launches, s.grouped_copies), (4, 0, 4), "{s:?}");
        assert_eq!(s.allocated_bytes, 3 * 16_384 * 24, "each slot's staging, the scratch freed");
    }
    assert!(e.prewarm(3).already_prewarmed);
}

#[test]
fn a_stream_that_cannot_be_created_leaves_the_device_lazy_and_says_why() {
    let (b, e) = engine(1);
    b.device(0).unwrap().fail_nth(BackendOp::CreateStream, 2);
    let r = e.prewarm(2);
    let dp = &r.devices[0];
    assert_eq!((dp.streams, dp.cap), (1, 0), "one slot warmed, the pool left uncapped");
    assert_eq!(
        dp.errors,
        ["creating pooled streams: creating a stream: injected fault at creating a stream"]
    );
    assert_eq!(e.pool_stats(0).unwrap().created, 1);
}

#[test]
fn registration_errors_keep_the_backend_error_as_their_cause() {
    let (_b, e) = engine(1);
    let mut host = vec![0u8; 8192];
    register(&e, &mut host);
    // SAFETY: the call is refused (the range overlaps the registration above); nothing is
    // registered.
    let err = unsafe { e.add_host_gather_region(host.as_mut_ptr().add(4096), 4096) }.unwrap_err();
    assert_eq!(err.op(), BackendOp::RegisterHost);
    assert!(matches!(
        err.source_as::<HostMemoryError>(),
        Some(HostMemoryError::BadRegistration { len: 4096, .. })
    ));
}
