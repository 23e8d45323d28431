//! The device gather kernel: one launch copies many fragments.
//!
//! The host writes [`GatherFragment`] descriptors into the stream slot's pinned staging, uploads
//! them to the slot's device staging on the slot's stream, then launches the kernel on the same
//! stream. The kernel body runs on the device: it reads the descriptors from *device* memory and
//! copies each fragment through device-side addresses (HBM, or the per-device alias of
//! registered host memory), so a host pointer handed to it fails instead of working by accident.
use ferry_sim::stream::KernelFn;
use ferry_sim::{Device, DevicePtr};

/// Name the gather kernel is launched under (its code object loads on the first launch per
/// device).
pub const GATHER_KERNEL: &str = "ferry_device_gather";
/// Threads per block of the real kernel's grid (geometry is computed for the launch check).
pub const THREADS_PER_BLOCK: u64 = 256;
/// Most blocks one fragment gets.
pub const MAX_BLOCKS_PER_FRAGMENT: u64 = 8;
/// Smallest staging a slot grows to, in descriptors.
pub const MIN_STAGING_FRAGMENTS: usize = 256;

/// One fragment of a gather, as the device reads it.
///
/// # Layout
/// `#[repr(C)]`, 24 bytes, align 8: `src` at 0, `dst` at 8, `bytes` at 16. Both addresses are
/// device-side (HBM or a host alias of the device that runs the kernel).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GatherFragment {
    /// Device-side source address.
    pub src: u64,
    /// Device-side destination address.
    pub dst: u64,
    /// Bytes to copy.
    pub bytes: u64,
}

/// Size of one descriptor on the device.
pub const FRAGMENT_BYTES: usize = std::mem::size_of::<GatherFragment>();
const _: () = assert!(FRAGMENT_BYTES == 24 && std::mem::align_of::<GatherFragment>() == 8);
const _: () = assert!(std::mem::offset_of!(GatherFragment, bytes) == 16);

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

/// The kernel body for `count` descriptors at `staging` on the running device. `count == 0` is
/// the prewarm's empty gather: one block that reads no descriptor (a zero-block grid would be an
/// invalid launch on real hardware).
pub(crate) fn kernel(staging: DevicePtr, count: usize) -> KernelFn {
    Box::new(move |d: &Device| {
        if count == 0 {
            return Ok(());
        }
        let table_len = (count * FRAGMENT_BYTES) as u64;
        let table = d.translate(staging, table_len).map_err(|e| format!("descriptors: {e}"))?;
        // The table's address crosses to the block threads as an integer (a raw pointer is not
        // `Sync`); every block only reads it.
        let table = table as usize;
        // The fragments split into contiguous blocks that run in parallel; each block has its
        // own translator, so a fragment inside the allocation or registration of the previous
        // one is checked against cached bounds instead of the device's locked tables.
        d.run_blocks(count, |range| {
            let mut t = d.translator();
            for i in range {
                // SAFETY: `table` addresses `count * 24` bytes of a live device allocation
                // (checked by `translate` above); descriptor `i < count` lies inside it.
                // `read_unaligned` needs no alignment, and the stream's FIFO order finished the
                // upload before this body runs.
                let f = unsafe {
                    ((table + i * FRAGMENT_BYTES) as *const GatherFragment).read_unaligned()
                };
                let src = t
                    .translate(DevicePtr(f.src), f.bytes)
                    .map_err(|e| format!("fragment {i} src: {e}"))?;
                let dst = t
                    .translate(DevicePtr(f.dst), f.bytes)
                    .map_err(|e| format!("fragment {i} dst: {e}"))?;
                // SAFETY: [1] both ranges are `f.bytes` long inside a live allocation or a live
                // host registration of this device (checked by the translator); [2] registered
                // host bytes are valid while the registration lives, and the endpoint's creator
                // promised nobody else touches them during the transfer (`TransferRef::host`);
                // [3] blocks run in parallel, so no two fragments of a launch may touch the same
                // bytes with one of them writing: the planner rejects, within one batch (and a
                // launch only holds fragments of one batch), an item whose destination overlaps
                // another item's source or destination (`planner`, pass 2).
                unsafe { std::ptr::copy(src as *const u8, dst, f.bytes as usize) };
            }
            Ok(())
        })
    })
}
