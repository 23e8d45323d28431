//! Shared fixtures of the ferry-copy integration tests.
#![allow(dead_code, unreachable_pub)]
use ferry_copy::{HbmConfig, HbmCopyEngine, TransferItem, TransferRef};
use ferry_sim::{Arch, DevicePtr, Platform, PlatformBuilder};
use std::sync::Arc;

pub const KIB: u64 = 1024;

pub fn platform(devices: u32) -> Platform {
    PlatformBuilder::new(Arch::A2a3).devices(devices).hbm_bytes(256 << 20).build().unwrap()
}

pub fn engine(p: &Platform) -> Arc<HbmCopyEngine<ferry_sim::Platform>> {
    Arc::new(HbmCopyEngine::new(p.clone(), HbmConfig::default()))
}

/// A host buffer filled with a pattern derived from `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed).wrapping_add((i >> 8) as u8))
        .collect()
}

/// An endpoint over `buf`.
pub fn host_ref(buf: &mut [u8]) -> TransferRef {
    // SAFETY: every test keeps `buf` alive and untouched until the transfers using this endpoint
    // have been waited for (all transfers in these tests complete inside `transfer*`).
    unsafe { TransferRef::host(buf.as_mut_ptr(), buf.len()) }
}

/// Registers `buf` as a gather region of `e`.
pub fn register(e: &HbmCopyEngine<ferry_sim::Platform>, buf: &mut [u8]) {
    // SAFETY: every test drops the engine (and with it the registration) or clears its regions
    // before `buf`, and does not touch `buf` while transfers run.
    unsafe { e.add_host_gather_region(buf.as_mut_ptr(), buf.len()).unwrap() };
}

/// `n` fragments of `frag` bytes: source gapped (stride 2·frag from `src_base`), destination
/// permuted (stride-7 permutation of `n` slots from `dst_base`), so nothing coalesces.
pub fn scattered(
    src: TransferRef,
    src_base: u64,
    dst: TransferRef,
    dst_base: u64,
    frag: u64,
    n: u64,
    tag0: u64,
) -> Vec<TransferItem> {
    assert!(n % 7 != 0);
    (0..n)
        .map(|i| TransferItem {
            src,
            src_offset: src_base + i * 2 * frag,
            dst,
            dst_offset: dst_base + ((i * 7) % n) * frag,
            size: frag,
            tag: tag0 + i,
        })
        .collect()
}

/// Reads `len` bytes of device memory through the null stream.
pub fn read_dev(p: &Platform, dev: u32, ptr: DevicePtr, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    p.device(dev).unwrap().copy_dtoh(ptr, &mut out).unwrap();
    out
}

/// Checks that the destination holds what `items` say (sources read from `src_bytes`).
pub fn check_items(items: &[TransferItem], src_bytes: &[u8], dst_bytes: &[u8]) {
    for it in items {
        let (s, d, n) = (it.src_offset as usize, it.dst_offset as usize, it.size as usize);
        assert_eq!(&dst_bytes[d..d + n], &src_bytes[s..s + n], "item tag {}", it.tag);
    }
}
