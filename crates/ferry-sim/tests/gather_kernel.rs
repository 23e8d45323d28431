//! The chip's gather kernel (`BackendStream::launch_gather`): every fragment lands where its
//! descriptor says, across block boundaries and both block workers; a fragment that does not
//! resolve fails the launch naming it, after the fragments before it in its block are copied
//! and before any after it is.
use ferry_backend::{BackendStream, GatherFragment, FRAGMENT_BYTES};
use ferry_sim::kernel::{BLOCK_ITEMS, MIN_ITEMS_PER_BLOCK};
use ferry_sim::{Arch, Device, DevicePtr, PlatformBuilder};

/// Uploads `frags` to a fresh device allocation; returns its address.
fn upload(d: &Device, frags: &[GatherFragment]) -> DevicePtr {
    let bytes: Vec<u8> =
        frags.iter().flat_map(|f| [f.src, f.dst, f.bytes]).flat_map(u64::to_le_bytes).collect();
    assert_eq!(bytes.len(), frags.len() * FRAGMENT_BYTES);
    let table = d.malloc(bytes.len() as u64).unwrap();
    d.copy_htod(&bytes, table).unwrap();
    table
}

#[test]
fn every_fragment_lands_where_its_descriptor_says() {
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).block_workers(2).build().unwrap();
    let d = p.device(0).unwrap();
    // Enough fragments for both workers and many blocks; sizes from 1 byte to just over 4 KiB
    // (below and above the streaming copy's threshold, every alignment of the destination).
    let n = 2 * MIN_ITEMS_PER_BLOCK + BLOCK_ITEMS / 2;
    let size = |i: usize| 1 + (i * 37) % 4200;
    let total: usize = (0..n).map(size).sum();
    let src_bytes: Vec<u8> = (0..total).map(|i| (i * 31 + i / 251) as u8).collect();
    let (src, dst) = (d.malloc(total as u64).unwrap(), d.malloc(total as u64).unwrap());
    d.copy_htod(&src_bytes, src).unwrap();
    d.copy_htod(&vec![0u8; total], dst).unwrap();
    // Source offsets in order; destinations in reverse order, so each fragment moves.
    let mut frags = Vec::with_capacity(n);
    let (mut s_off, mut d_end) = (0usize, total);
    for i in 0..n {
        let len = size(i);
        d_end -= len;
        frags.push(GatherFragment {
            src: src.0 + s_off as u64,
            dst: dst.0 + d_end as u64,
            bytes: len as u64,
        });
        s_off += len;
    }
    let table = upload(d, &frags);
    let s = d.create_stream().unwrap();
    s.launch_gather(table, n, true).unwrap();
    BackendStream::synchronize(&s).unwrap();
    let mut out = vec![0u8; total];
    d.copy_dtoh(dst, &mut out).unwrap();
    for (i, f) in frags.iter().enumerate() {
        let (so, dof, len) = ((f.src - src.0) as usize, (f.dst - dst.0) as usize, f.bytes as usize);
        assert_eq!(out[dof..dof + len], src_bytes[so..so + len], "fragment {i}");
    }
}

#[test]
fn a_fragment_that_does_not_resolve_fails_the_launch_after_the_ones_before_it() {
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(4 << 20).block_workers(2).build().unwrap();
    let d = p.device(0).unwrap();
    const F: u64 = 4096;
    let (src, dst) = (d.malloc(3 * F).unwrap(), d.malloc(3 * F).unwrap());
    d.copy_htod(&[7u8; 3 * F as usize], src).unwrap();
    d.copy_htod(&[0u8; 3 * F as usize], dst).unwrap();
    let frags = [
        GatherFragment { src: src.0, dst: dst.0, bytes: F },
        // Past every allocation: the translator refuses it.
        GatherFragment { src: src.0 + (1 << 40), dst: dst.0 + F, bytes: F },
        GatherFragment { src: src.0 + 2 * F, dst: dst.0 + 2 * F, bytes: F },
    ];
    let table = upload(d, &frags);
    let s = d.create_stream().unwrap();
    s.launch_gather(table, frags.len(), true).unwrap();
    let e = BackendStream::synchronize(&s).expect_err("fragment 1 does not resolve");
    let chain = {
        let mut msg = e.to_string();
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(&e);
        while let Some(s) = src {
            msg += &format!(": {s}");
            src = s.source();
        }
        msg
    };
    assert!(chain.contains("fragment 1 src"), "{chain}");
    let mut out = vec![0u8; 3 * F as usize];
    d.copy_dtoh(dst, &mut out).unwrap();
    let f = F as usize;
    assert!(out[..f].iter().all(|&b| b == 7), "fragment 0, before the bad one, is copied");
    assert!(out[f..].iter().all(|&b| b == 0), "nothing from the bad fragment on is copied");
}
