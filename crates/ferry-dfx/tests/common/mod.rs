//! Helpers shared by ferry-dfx's integration tests: a small region configuration, SVM memory
//! for it, and a clock that counts its reads.
#![allow(dead_code)] // each test binary uses its own subset

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferry_abi::arch::A2A3;
use ferry_dfx::clock::CycleClock;
use ferry_dfx::mem::{DeviceMemory, SvmMemory};
use ferry_dfx::{DfxBuilder, DfxConfig, Policy};

/// A clock that counts how often it is read (and advances by one per read).
#[derive(Debug, Default)]
pub(crate) struct CountingClock {
    /// Reads so far.
    pub(crate) reads: AtomicU64,
}

impl CycleClock for CountingClock {
    fn now_cycles(&self) -> u64 {
        self.reads.fetch_add(1, Ordering::Relaxed)
    }
}

/// `lanes` lanes, lane `l` on ready queue `l` with `buffers` buffers of `records` records, ready
/// queues `depth` deep, under `policy`.
pub(crate) fn cfg(lanes: u32, buffers: u32, records: u32, policy: Policy, depth: u32) -> DfxConfig {
    let mut b = DfxBuilder::new(&A2A3);
    b.ready_queues(lanes).ready_depth(depth).records_per_buffer(records).policy(policy);
    for l in 0..lanes {
        b.lane(l, 0, buffers);
    }
    b.build::<[u64; 2]>().unwrap()
}

/// SVM memory (one set of bytes) sized for `c`'s region.
pub(crate) fn svm(c: &DfxConfig) -> Arc<dyn DeviceMemory> {
    Arc::new(SvmMemory::new(c.region_size(), 0x2000_0000_0000))
}
