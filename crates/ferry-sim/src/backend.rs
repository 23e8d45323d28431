//! The simulated chip as a [`ferry_backend`] backend: the reference implementation of the
//! seam the host libraries (the copy engine) program against, and the gather kernel's body.
//!
//! Every trait method is the chip's own operation with its error kept as the
//! [`BackendError`]'s source (a [`DeviceError`], or a [`MemoryError`](crate::MemoryError) for a
//! registration, recovered with
//! [`BackendError::source_as`]).
//!
//! # Examples
//! ```
//! use ferry_backend::{Backend, BackendDevice, BackendOp, BackendStream};
//! use ferry_sim::fault::FaultPoint;
//! use ferry_sim::{Arch, DeviceError, PlatformBuilder};
//!
//! fn streams<B: Backend>(b: &B) -> Result<(), ferry_backend::BackendError> {
//!     let s = b.device(0)?.create_stream()?;
//!     s.synchronize()
//! }
//! let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(1 << 20).build()?;
//! assert!(streams(&p).is_ok());
//! p.device(0)?.faults().fail_next(FaultPoint::StreamCreate);
//! let e = streams(&p).unwrap_err();
//! assert_eq!(e.op(), BackendOp::CreateStream);
//! assert!(matches!(e.source_as::<DeviceError>(), Some(DeviceError::Injected(_))));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
use crate::clock::DeviceClock;
use crate::device::{Device, HostRegistration, Platform};
use crate::error::DeviceError;
use crate::event::Event;
use crate::memory::DevicePtr;
use crate::overlap::CopyRendezvous;
use crate::pinned::PinnedBuffer;
use crate::stream::{Stream, StreamKernelFn};
use ferry_backend::bulk_copy::{copy_bypassing_cache, StoreFence};
use ferry_backend::{
    Backend, BackendDevice, BackendError, BackendEvent, BackendOp, BackendStream, CopyGroup,
    CopyKind, CycleCounter, DeviceCounter, GatherFragment, HostBell, HostBells, HostEntry,
    HostMapping, MappedMemory, PinnedFreeError, PinnedHostBuffer, QueueCounts, Segment,
    FRAGMENT_BYTES, GATHER_KERNEL,
};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

fn err(op: BackendOp) -> impl FnOnce(DeviceError) -> BackendError {
    move |e| BackendError::typed(op, e)
}

impl Backend for Platform {
    type Device = Device;
    type HostRegistration = HostRegistration;

    #[inline]
    fn device_count(&self) -> u32 {
        Platform::device_count(self)
    }

    #[inline]
    fn device(&self, ordinal: u32) -> Result<&Device, BackendError> {
        Platform::device(self, ordinal).map_err(err(BackendOp::Device))
    }

    #[inline]
    fn current_ordinal(&self) -> u32 {
        Platform::current_ordinal(self)
    }

    #[inline]
    fn set_current_device(&self, ordinal: u32) -> Result<(), BackendError> {
        Platform::set_current_device(self, ordinal).map_err(err(BackendOp::Device))
    }

    unsafe fn register_host(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<HostRegistration, BackendError> {
        // SAFETY: the trait's contract is `Platform::register_host`'s, passed on by the caller.
        unsafe { Platform::register_host(self, ptr, len) }
            .map_err(|e| BackendError::typed(BackendOp::RegisterHost, e))
    }
}

impl HostMapping for HostRegistration {
    #[inline]
    fn alias(&self, ordinal: u32, ptr: *const u8, len: usize) -> Option<DevicePtr> {
        HostRegistration::alias(self, ordinal, ptr, len).ok()
    }
}

impl BackendDevice for Device {
    type Stream = Stream;
    type Pinned = PinnedBuffer;

    #[inline]
    fn ordinal(&self) -> u32 {
        Device::ordinal(self)
    }

    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        Device::malloc(self, bytes).map_err(err(BackendOp::Malloc))
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError> {
        Device::free(self, ptr).map_err(err(BackendOp::Free))
    }

    #[inline]
    fn is_allocated(&self, ptr: DevicePtr, len: u64) -> bool {
        self.translate(ptr, len).is_ok()
    }

    fn create_stream(&self) -> Result<Stream, BackendError> {
        Device::create_stream(self).map_err(err(BackendOp::CreateStream))
    }

    fn null_stream(&self) -> Result<&Stream, BackendError> {
        Device::null_stream(self).map_err(err(BackendOp::CreateStream))
    }

    fn copy_engine_count(&self) -> usize {
        Device::copy_engine_count(self)
    }

    fn queue_counts(&self) -> QueueCounts {
        let c = self.counters();
        QueueCounts {
            compute_queues: c.compute_queues_created,
            sdma_queues: c.sdma_queues_created,
            queue_memory_bytes: c.queue_memory_bytes,
        }
    }

    fn alloc_pinned(&self, len: usize) -> Result<PinnedBuffer, BackendError> {
        Device::alloc_pinned(self, len).map_err(err(BackendOp::PinnedAlloc))
    }

    fn synchronize_event(
        &self,
        event: &Event,
        timeout: Option<Duration>,
    ) -> Result<(), BackendError> {
        Device::synchronize_event(self, event, timeout).map_err(err(BackendOp::Wait))
    }

    fn copy_htod(&self, bytes: &[u8], dst: DevicePtr) -> Result<(), BackendError> {
        Device::copy_htod(self, bytes, dst).map_err(err(BackendOp::Copy))
    }

    fn copy_dtoh(&self, src: DevicePtr, out: &mut [u8]) -> Result<(), BackendError> {
        Device::copy_dtoh(self, src, out).map_err(err(BackendOp::Copy))
    }
}

impl BackendEvent for Event {
    #[inline]
    fn query(&self) -> bool {
        Event::query(self)
    }

    #[inline]
    fn timestamp_cycles(&self) -> Option<u64> {
        Event::timestamp_cycles(self)
    }

    fn error(&self) -> Option<BackendError> {
        Event::error(self).map(err(BackendOp::Execute))
    }
}

impl PinnedHostBuffer for PinnedBuffer {
    #[inline]
    fn len(&self) -> usize {
        PinnedBuffer::len(self)
    }

    #[inline]
    fn as_ptr(&self) -> *const u8 {
        PinnedBuffer::as_ptr(self)
    }

    unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the trait's contract is the inherent method's, passed on by the caller.
        unsafe { PinnedBuffer::as_mut_slice(self) }
    }

    fn free(self) -> Result<(), PinnedFreeError<Self>> {
        PinnedBuffer::free(self).map_err(|e| PinnedFreeError {
            buffer: e.buffer,
            error: BackendError::typed(BackendOp::PinnedFree, e.error),
        })
    }

    fn leak(self) -> *const u8 {
        PinnedBuffer::leak(self)
    }
}

impl BackendStream for Stream {
    type CopyGroup = CopyRendezvous;
    type Event = Event;
    type Entry<A: Send + 'static> = HostEntry<Device, A>;

    #[inline]
    fn id(&self) -> u64 {
        Stream::id(self)
    }

    fn record_event(&self, event: &Event) -> Result<(), BackendError> {
        Stream::record_event(self, event).map_err(err(BackendOp::RecordEvent))
    }

    fn wait_event(&self, event: &Event) -> Result<(), BackendError> {
        Stream::wait_event(self, event).map_err(err(BackendOp::WaitEvent))
    }

    fn launch_entry<A: Send + 'static>(
        &self,
        name: &str,
        entry: HostEntry<Device, A>,
        args: A,
    ) -> Result<(), BackendError> {
        self.launch(name, Box::new(move |d| entry(d, args))).map_err(err(BackendOp::Launch))
    }

    fn synchronize_timeout(&self, timeout: Duration) -> Result<(), BackendError> {
        Stream::synchronize_timeout(self, timeout).map_err(|e| {
            // A copy's or kernel's failure is the stream's (it is idle now); anything else is
            // the wait's own.
            let op = match e {
                DeviceError::Kernel { .. } | DeviceError::Memory(_) => BackendOp::Synchronize,
                _ => BackendOp::Wait,
            };
            BackendError::typed(op, e)
        })
    }

    unsafe fn copy_htod_async(
        &self,
        src: *const u8,
        dst: DevicePtr,
        bytes: u64,
    ) -> Result<(), BackendError> {
        // SAFETY: the trait's contract is the inherent method's, passed on by the caller.
        unsafe { Stream::copy_htod_async(self, src, dst, bytes) }.map_err(err(BackendOp::Copy))
    }

    unsafe fn copy_htod_async_grouped(
        &self,
        src: *const u8,
        dst: DevicePtr,
        bytes: u64,
        group: &Arc<CopyRendezvous>,
    ) -> Result<(), BackendError> {
        // SAFETY: as `copy_htod_async`.
        unsafe { self.copy_htod_async_rendezvous(src, dst, bytes, group) }
            .map_err(err(BackendOp::Copy))
    }

    unsafe fn copy_dtoh_async(
        &self,
        src: DevicePtr,
        dst: *mut u8,
        bytes: u64,
    ) -> Result<(), BackendError> {
        // SAFETY: the trait's contract is the inherent method's, passed on by the caller.
        unsafe { Stream::copy_dtoh_async(self, src, dst, bytes) }.map_err(err(BackendOp::Copy))
    }

    unsafe fn copy_segments_blocking(
        &self,
        kind: CopyKind,
        segments: &[Segment],
    ) -> Result<(), BackendError> {
        // SAFETY: the trait's contract is the inherent method's, passed on by the caller.
        unsafe { Stream::copy_segments_blocking(self, kind, segments) }
            .map_err(err(BackendOp::Copy))
    }

    fn launch_gather(
        &self,
        descriptors: DevicePtr,
        count: usize,
        counted: bool,
    ) -> Result<(), BackendError> {
        let body = gather_kernel(descriptors, count);
        match counted {
            true => self.launch(GATHER_KERNEL, body),
            false => self.launch_uncounted(GATHER_KERNEL, body),
        }
        .map_err(err(BackendOp::Launch))
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        Stream::synchronize(self).map_err(err(BackendOp::Synchronize))
    }

    fn quiesce(&self) {
        Stream::quiesce(self)
    }
}

impl CopyGroup for CopyRendezvous {
    fn with_parties(parties: usize) -> Self {
        CopyRendezvous::new(parties)
    }

    fn withdraw(&self) {
        CopyRendezvous::withdraw(self)
    }
}

/// The gather kernel's body for `count` descriptors at `staging` on the running device.
/// `count == 0` is the empty gather (loads the code object, reads no descriptor).
///
/// It reads the descriptors from *device* memory and copies each fragment through
/// device-side addresses (HBM, or the per-device alias of registered host memory), so a host
/// pointer handed to it fails instead of working by accident.
fn gather_kernel(staging: DevicePtr, count: usize) -> StreamKernelFn {
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
            // The fragments' stores bypass the host's caches (as a device's writes into its
            // memory do); the fence orders them before the block's end publishes them.
            let _fence = StoreFence;
            // Fragment `i`'s device-side ranges as host pointers, or the error that names it.
            let mut resolve = |i: usize| -> Result<(*const u8, *mut u8, usize), String> {
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
                Ok((src as *const u8, dst, f.bytes as usize))
            };
            // Each fragment is resolved one step ahead, so its source is prefetched while the
            // one before it copies; a fragment that does not resolve fails the block after the
            // ones before it are copied, as when they were resolved one at a time.
            let mut next = match range.is_empty() {
                true => None,
                false => Some(resolve(range.start)),
            };
            for i in range.clone() {
                let Some(current) = next.take() else { break };
                let (src, dst, len) = current?;
                if i + 1 < range.end {
                    next = Some(resolve(i + 1));
                }
                let ahead = match &next {
                    Some(Ok((s, _, l))) => (*s, *l),
                    _ => (std::ptr::null(), 0),
                };
                // SAFETY: [1] both ranges are `len` bytes inside a live allocation or a live
                // host registration of this device (checked by the translator); [2] registered
                // host bytes are valid while the registration lives, and whoever launched the
                // gather vouched that nobody else touches them during it; [3] blocks run in
                // parallel, so no two fragments of a launch may touch the same bytes with one
                // of them writing: the launcher guarantees it (ferry-copy's planner rejects
                // overlapping items within a batch, and a launch holds one batch), so nothing
                // reads the destination before the block's fence and the launch's end.
                unsafe { copy_bypassing_cache(src, dst, len, ahead) };
            }
            Ok(())
        })
    })
}

impl ferry_backend::CoreRegisters for crate::cores::Chip {
    fn arch(&self) -> ferry_abi::arch::Arch {
        self.device().arch().arch
    }

    fn core_count(&self) -> u32 {
        self.config().cores()
    }

    fn reg_bases(&self) -> Vec<u64> {
        crate::cores::Chip::reg_bases(self)
    }

    #[track_caller]
    fn write_as_aicpu(&self, core: u32, offset: u32, value: u32) {
        self.window(core).aicpu_write(offset, value);
    }

    #[track_caller]
    fn write_as_core(&self, core: u32, offset: u32, value: u32) {
        self.window(core).core_write(offset, value);
    }
}

/// The chip's cores are host threads: the runtime's AICore executor is the host closure each
/// core runs (`Chip::launch_aicore`).
impl ferry_backend::AicoreLauncher for crate::cores::Chip {
    type CoreLaunch = crate::cores::Completion;

    fn launch_cores<F>(&self, cores: u32, body: F) -> Result<Self::CoreLaunch, BackendError>
    where
        F: Fn(u32) -> Result<(), String> + Send + Sync + 'static,
    {
        self.launch_aicore(cores, Arc::new(move |ctx: crate::cores::CoreCtx| body(ctx.index)))
            .map_err(err(BackendOp::Launch))
    }
}

impl ferry_backend::CoreLaunch for crate::cores::Completion {
    fn wait(&self) -> Result<(), BackendError> {
        crate::cores::Completion::wait(self).map_err(err(BackendOp::Execute))
    }
}

fn mem_err(op: BackendOp) -> impl FnOnce(crate::MemoryError) -> BackendError {
    move |e| BackendError::typed(op, e)
}

/// A live allocation's view as a non-null pointer (a translation of a live range is never
/// null: both maps are real mappings).
fn view(p: Result<*mut u8, crate::MemoryError>) -> Result<NonNull<u8>, BackendError> {
    let p = p.map_err(mem_err(BackendOp::MapMemory))?;
    Ok(NonNull::new(p).expect("a mapping is never at address 0"))
}

/// The chip's HBM as the host maps it: the same pages on SVM (a2a3), else a host mirror (a5)
/// kept in step by the simulator's range copies, each failure a [`MemoryError`] source.
///
/// [`MemoryError`]: crate::MemoryError
impl MappedMemory for Device {
    #[inline]
    fn is_unified(&self) -> bool {
        self.memory().is_svm()
    }

    fn host_view(&self, ptr: DevicePtr, len: u64) -> Result<NonNull<u8>, BackendError> {
        view(self.memory().host_ptr(ptr, len))
    }

    fn device_view(&self, ptr: DevicePtr, len: u64) -> Result<NonNull<u8>, BackendError> {
        view(self.memory().device_ptr(ptr, len))
    }

    fn prefault(&self, ptr: DevicePtr, len: u64) {
        // Best effort: a range the device does not hold is left alone.
        let _ = self.memory().populate(ptr, len);
    }

    #[inline]
    fn flush_to_device(&self, ptr: DevicePtr, len: u64) -> Result<(), BackendError> {
        self.memory().write_range_to_device(ptr, len).map_err(mem_err(BackendOp::Copy))
    }

    #[inline]
    fn refresh_from_device(&self, ptr: DevicePtr, len: u64) -> Result<(), BackendError> {
        self.memory().read_range_from_device(ptr, len).map_err(mem_err(BackendOp::Copy))
    }

    #[inline]
    unsafe fn refresh_owned_from_device(
        &self,
        ptr: DevicePtr,
        len: u64,
    ) -> Result<(), BackendError> {
        // SAFETY: the trait's contract (nobody writes the range meanwhile) is the bulk copy's.
        unsafe { self.memory().read_owned_range_from_device(ptr, len) }
            .map_err(mem_err(BackendOp::Copy))
    }
}

/// The chip's sys counter.
impl CycleCounter for DeviceClock {
    #[inline]
    fn hz(&self) -> u64 {
        DeviceClock::hz(self)
    }

    #[inline]
    fn now_cycles(&self) -> u64 {
        DeviceClock::now_cycles(self)
    }
}

impl DeviceCounter for Device {
    type Counter = DeviceClock;

    #[inline]
    fn cycle_counter(&self) -> &DeviceClock {
        self.clock()
    }
}

/// The AICPU OS's `notify_host`: a loaded program rings the bell registered under a key.
impl HostBells for Device {
    type BellGuard = crate::aicpu_os::HostBellGuard;

    fn register_host_bell(&self, key: u64, bell: HostBell) -> Option<Self::BellGuard> {
        Some(self.aicpu_os().register_host_bell(key, bell))
    }
}
