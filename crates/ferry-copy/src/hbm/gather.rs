//! The device gather kernel: one launch copies many fragments.
//!
//! The host writes [`GatherFragment`] descriptors into the stream slot's staging, uploads them
//! to the slot's device staging on the slot's stream, then launches the backend's gather
//! kernel ([`BackendStream::launch_gather`](ferry_backend::BackendStream::launch_gather)) on
//! the same stream. The kernel runs on the device: it reads the descriptors from *device*
//! memory and copies each fragment through device-side addresses (device memory, or the
//! per-device alias of registered host memory), so a host pointer handed to it fails instead
//! of working by accident. The descriptor layout and the kernel's name are the seam's
//! (re-exported here); the launch geometry is computed here.
pub use ferry_backend::{GatherFragment, FRAGMENT_BYTES, GATHER_KERNEL};

/// Threads per block of the real kernel's grid (geometry is computed for the launch check).
pub const THREADS_PER_BLOCK: u64 = 256;
/// Most blocks one fragment gets.
pub const MAX_BLOCKS_PER_FRAGMENT: u64 = 8;
/// Smallest staging a slot grows to, in descriptors.
pub const MIN_STAGING_FRAGMENTS: usize = 256;

/// Blocks per fragment for a launch whose largest fragment is `max_bytes` (16-byte chunks,
/// 256 threads per block, clamped to 1..=8), and whether `count` fragments fit a 32-bit grid.
///
/// # Examples
/// ```
/// use ferry_copy::hbm::gather::grid;
/// assert_eq!(grid(10, 4096), Some((1, 10)));
/// assert_eq!(grid(2, 1 << 20), Some((8, 16)));
/// assert_eq!(grid(1 << 30, 1 << 20), None, "grid would overflow u32");
/// ```
pub fn grid(count: u64, max_bytes: u64) -> Option<(u64, u32)> {
    let chunks = max_bytes.div_ceil(16);
    let bpf = chunks.div_ceil(THREADS_PER_BLOCK).clamp(1, MAX_BLOCKS_PER_FRAGMENT);
    let blocks = u32::try_from(count.checked_mul(bpf)?).ok()?;
    Some((bpf, blocks))
}
