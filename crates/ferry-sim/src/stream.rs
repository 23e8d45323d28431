//! Streams: FIFO executors, one worker thread each, that park while idle.
//!
//! Work enqueued on one stream runs in order; work on different streams runs concurrently and
//! is ordered only by [`Event`]s. Enqueue calls check fault injection and return an error at
//! once (a failed enqueue); failures while the work runs (a bad address, a kernel error) are
//! sticky: the stream skips nothing, keeps running later work, and the next
//! [`synchronize`](Stream::synchronize) returns the first error and clears it.
//!
//! # Examples
//! ```
//! use ferry_sim::{Arch, PlatformBuilder};
//! let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build()?;
//! let dev = p.device(0)?;
//! let s = dev.create_stream()?;
//! let buf = dev.malloc(4)?;
//! let src = [1u8, 2, 3, 4];
//! let mut out = [0u8; 4];
//! // SAFETY: both host buffers outlive the copies (synchronize below).
//! unsafe {
//!     s.copy_htod_async(src.as_ptr(), buf, 4)?;
//!     s.copy_dtoh_async(buf, out.as_mut_ptr(), 4)?;
//! }
//! s.synchronize()?;
//! assert_eq!(out, src);
//! # Ok::<(), ferry_sim::DeviceError>(())
//! ```
use crate::counters::Counter;
use crate::device::{CopyKind, Device, DeviceInner};
use crate::error::DeviceError;
use crate::event::Event;
use crate::fault::FaultPoint;
use crate::memory::DevicePtr;
use crate::overlap::CopyRendezvous;
use crate::sync::{lock, Arc, AtomicBool, AtomicU64, Condvar, Mutex, Ordering};
use crate::wait::Doorbell;
use std::collections::VecDeque;
use std::sync::Weak;
use std::time::Duration;

/// Whether a stream is a device's null stream or an ordinary one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// The per-device default stream used by blocking copies.
    Null,
    /// An ordinary (non-blocking) stream.
    Pooled,
}

/// A kernel body run by a stream's worker. It receives the device and reports failure as a
/// message, which becomes [`DeviceError::Kernel`].
pub type StreamKernelFn = Box<dyn FnOnce(&Device) -> Result<(), String> + Send>;

enum Op {
    /// `meet`: the copy keeps its engine until that rendezvous completes (see `overlap`).
    Copy {
        kind: CopyKind,
        src: u64,
        dst: u64,
        len: u64,
        meet: Option<Arc<CopyRendezvous>>,
    },
    Kernel {
        name: Arc<str>,
        body: StreamKernelFn,
    },
    Record(Event, u64),
    Wait(Event, u64),
    Host(Box<dyn FnOnce() + Send>),
    /// A blocking copy's segments (see [`Stream::copy_segments_blocking`]): their first error
    /// goes to `done`, not to the stream's sticky error.
    Segments {
        kind: CopyKind,
        segments: Vec<Segment>,
        done: Arc<Mutex<Option<Result<(), DeviceError>>>>,
    },
}

/// One segment of a blocking multi-segment copy: the seam's type.
pub use ferry_backend::Segment;

struct Shared {
    /// The device, held weakly: the null stream lives inside its device, so a strong handle here
    /// would keep the device (its HBM mapping and this worker) alive forever. A pooled stream's
    /// [`Handle`] holds the strong reference (the child owns its parent).
    device: Weak<DeviceInner>,
    ordinal: u32,
    /// The hardware compute queue this stream runs on, released with the stream.
    hw_queue: HwQueue,
    kind: StreamKind,
    id: u64,
    queue: Mutex<Queue>,
    cv: Condvar,
    /// Ops enqueued minus ops finished.
    pending: AtomicU64,
    /// Whether the worker is blocked in a [`Stream::wait_event`] whose event has not completed.
    blocked: AtomicBool,
    done: Doorbell,
    error: Mutex<Option<DeviceError>>,
}

struct Queue {
    ops: VecDeque<Op>,
    closed: bool,
}

impl Shared {
    /// The device, while it lives (always, for a pooled stream: its handle holds it).
    fn device(&self) -> Result<Device, DeviceError> {
        self.device.upgrade().map(Device).ok_or_else(|| {
            DeviceError::Resource(format!("device {} is gone (stream {})", self.ordinal, self.id))
        })
    }
}

/// A stream's hardware compute queue (see [`Device::attach_compute_queue`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum HwQueue {
    /// The null stream's own queue, with its context-save area.
    Own(DevicePtr),
    /// Pooled queue `i` of the device, shared with other pooled streams.
    Pooled(usize),
}

impl Drop for Shared {
    fn drop(&mut self) {
        // A dropped stream gives its queue back: the null stream's context memory, or its share
        // of a pooled queue (whose memory goes with its last stream). The null stream drops with
        // its device, whose whole HBM goes with it (the upgrade then fails).
        if let Some(d) = self.device.upgrade().map(Device) {
            match self.hw_queue {
                HwQueue::Own(ctx) => {
                    let _ = d.0.memory.free(ctx);
                }
                HwQueue::Pooled(i) => d.release_compute_queue(i),
            }
        }
    }
}

struct Handle {
    shared: Arc<Shared>,
    worker: Option<std::thread::JoinHandle<()>>,
    /// The strong reference of a pooled stream to its device; `None` for the null stream, which
    /// its device owns.
    _device: Option<Device>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        lock(&self.shared.queue).closed = true;
        self.shared.cv.notify_all();
        if let Some(w) = self.worker.take() {
            // The last handle can drop on the worker itself (a kernel or host callback that
            // held the last clone, or the device's last reference taken by an op): a thread
            // cannot join itself, and it exits on its own once it sees the queue closed.
            if w.thread().id() == std::thread::current().id() {
                return;
            }
            // The worker drains what is queued, then exits; a panic inside it was already
            // reported as a kernel error, so there is nothing left to lose here.
            let _ = w.join();
        }
    }
}

/// A FIFO executor on one device. Cheap to clone; the worker exits when the last clone drops
/// (after finishing queued work).
#[derive(Clone)]
pub struct Stream(Arc<Handle>);

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.0.shared.ordinal)
            .field("id", &self.0.shared.id)
            .field("kind", &self.0.shared.kind)
            .finish()
    }
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Stream {
    pub(crate) fn new(device: Device, kind: StreamKind) -> Result<Stream, DeviceError> {
        let hw_queue = device.attach_compute_queue(kind)?;
        let shared = Arc::new(Shared {
            device: Arc::downgrade(&device.0),
            ordinal: device.ordinal(),
            hw_queue,
            kind,
            // Relaxed: a unique id; nothing is published through it.
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            queue: Mutex::new(Queue { ops: VecDeque::new(), closed: false }),
            cv: Condvar::new(),
            pending: AtomicU64::new(0),
            blocked: AtomicBool::new(false),
            done: Doorbell::new(),
            error: Mutex::new(None),
        });
        let s2 = shared.clone();
        let worker = std::thread::Builder::new()
            .name(format!("sim-stream-{}-{}", shared.ordinal, shared.id))
            .spawn(move || worker(s2))
            .map_err(|e| DeviceError::Resource(format!("spawning a stream worker: {e}")))?;
        let owner = (kind == StreamKind::Pooled).then_some(device);
        Ok(Stream(Arc::new(Handle { shared, worker: Some(worker), _device: owner })))
    }

    /// The device this stream runs on; `None` only for a clone of a device's null stream that
    /// outlived the device.
    pub fn device(&self) -> Option<Device> {
        self.0.shared.device().ok()
    }

    /// Whether this is the null stream.
    pub fn kind(&self) -> StreamKind {
        self.0.shared.kind
    }

    /// A process-unique id.
    pub fn id(&self) -> u64 {
        self.0.shared.id
    }

    fn push(&self, op: Op) {
        let s = &self.0.shared;
        // Relaxed: `pending` is read by `synchronize` under the `done` doorbell protocol, whose
        // SeqCst ring/park pair orders it; the worker's decrement is Release (see `worker`).
        s.pending.fetch_add(1, Ordering::Relaxed);
        lock(&s.queue).ops.push_back(op);
        s.cv.notify_one();
    }

    /// Counts one operation of kind `point` on the device; the device, for the operation.
    fn check(&self, point: FaultPoint) -> Result<Device, DeviceError> {
        let d = self.0.shared.device()?;
        d.faults().check(point).inspect_err(|_| d.fault_counted())?;
        Ok(d)
    }

    fn copy(&self, kind: CopyKind, src: u64, dst: u64, len: u64) -> Result<(), DeviceError> {
        self.copy_with(kind, src, dst, len, None)
    }

    pub(crate) fn copy_with(
        &self,
        kind: CopyKind,
        src: u64,
        dst: u64,
        len: u64,
        meet: Option<Arc<CopyRendezvous>>,
    ) -> Result<(), DeviceError> {
        let d = self.check(FaultPoint::Copy)?;
        d.0.counters.bump(Counter::Copies);
        if self.kind() == StreamKind::Null {
            d.note_null_copy(kind);
        }
        self.push(Op::Copy { kind, src, dst, len, meet });
        Ok(())
    }

    /// Enqueues a host-to-device copy of `len` bytes.
    ///
    /// # Errors
    /// An injected [`FaultPoint::Copy`] (nothing is enqueued). Address errors surface at the
    /// next synchronize.
    ///
    /// # Safety
    /// - `src` is valid for reads of `len` bytes until the copy completes (observe completion
    ///   with [`synchronize`](Self::synchronize) or an event);
    /// - the host does not write those bytes before then.
    pub unsafe fn copy_htod_async(
        &self,
        src: *const u8,
        dst: DevicePtr,
        len: u64,
    ) -> Result<(), DeviceError> {
        self.copy(CopyKind::Htod, src as u64, dst.0, len)
    }

    /// Enqueues a device-to-host copy of `len` bytes.
    ///
    /// # Errors
    /// As [`copy_htod_async`](Self::copy_htod_async).
    ///
    /// # Safety
    /// - `dst` is valid for writes of `len` bytes until the copy completes;
    /// - the host does not access those bytes before then.
    pub unsafe fn copy_dtoh_async(
        &self,
        src: DevicePtr,
        dst: *mut u8,
        len: u64,
    ) -> Result<(), DeviceError> {
        self.copy(CopyKind::Dtoh, src.0, dst as u64, len)
    }

    /// Enqueues a device-to-device copy (either side may be any device's HBM or host alias).
    ///
    /// # Errors
    /// As [`copy_htod_async`](Self::copy_htod_async).
    pub fn copy_dtod_async(
        &self,
        src: DevicePtr,
        dst: DevicePtr,
        len: u64,
    ) -> Result<(), DeviceError> {
        self.copy(CopyKind::Dtod, src.0, dst.0, len)
    }

    /// Enqueues kernel `name` (its body runs on the stream's worker). The first launch of a name
    /// on a device loads its code object.
    ///
    /// # Errors
    /// An injected [`FaultPoint::Launch`] (nothing is enqueued, nothing loaded).
    pub fn launch(&self, name: &str, body: StreamKernelFn) -> Result<(), DeviceError> {
        self.launch_inner(name, body, true)
    }

    /// Like [`launch`](Self::launch) but not counted in the launch counter (code object still
    /// loads): for warm-up launches that tests must not mistake for real work.
    ///
    /// # Errors
    /// As [`launch`](Self::launch).
    pub fn launch_uncounted(&self, name: &str, body: StreamKernelFn) -> Result<(), DeviceError> {
        self.launch_inner(name, body, false)
    }

    fn launch_inner(
        &self,
        name: &str,
        body: StreamKernelFn,
        counted: bool,
    ) -> Result<(), DeviceError> {
        self.check(FaultPoint::Launch)?.note_launch(name, counted);
        self.push(Op::Kernel { name: name.into(), body });
        Ok(())
    }

    /// Enqueues a host callback.
    pub fn host_fn(&self, f: impl FnOnce() + Send + 'static) {
        self.push(Op::Host(Box::new(f)));
    }

    /// Records `event` at the current end of this stream.
    ///
    /// # Errors
    /// An injected [`FaultPoint::EventRecord`] (the event is unchanged).
    pub fn record_event(&self, event: &Event) -> Result<(), DeviceError> {
        self.check(FaultPoint::EventRecord)?.0.counters.bump(Counter::EventRecords);
        let gen = event.arm();
        self.push(Op::Record(event.clone(), gen));
        Ok(())
    }

    /// Makes later work on this stream wait until `event`'s latest record completes. Waiting
    /// for a never-recorded event is a no-op.
    ///
    /// # Errors
    /// An injected [`FaultPoint::StreamWait`].
    pub fn wait_event(&self, event: &Event) -> Result<(), DeviceError> {
        self.check(FaultPoint::StreamWait)?;
        let gen = event.armed();
        self.push(Op::Wait(event.clone(), gen));
        Ok(())
    }

    /// Whether the stream's worker is blocked in a [`wait_event`](Self::wait_event) for a
    /// record that has not completed: nothing enqueued behind that wait has started, and
    /// nothing will until the record completes. A test that holds the recording stream back
    /// waits for this state (or for the work behind the wait to show up, when the wait is
    /// missing) instead of guessing that the stream's thread has not run yet.
    ///
    /// # Examples
    /// ```
    /// use ferry_sim::{Arch, Event, PlatformBuilder};
    /// let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(16 << 20).build()?;
    /// let dev = p.device(0)?;
    /// let (a, b) = (dev.create_stream()?, dev.create_stream()?);
    /// let (tx, rx) = std::sync::mpsc::channel::<()>();
    /// a.host_fn(move || {
    ///     let _ = rx.recv();
    /// });
    /// let ev = Event::new();
    /// a.record_event(&ev)?;
    /// b.wait_event(&ev)?;
    /// while !b.blocked_on_event() {
    ///     std::thread::yield_now();
    /// }
    /// assert!(!ev.query());
    /// tx.send(()).unwrap();
    /// b.synchronize()?;
    /// assert!(!b.blocked_on_event());
    /// # Ok::<(), ferry_sim::DeviceError>(())
    /// ```
    pub fn blocked_on_event(&self) -> bool {
        // Acquire: pairs with the worker's Release store of `true`, made before it blocks.
        self.0.shared.blocked.load(Ordering::Acquire)
    }

    /// Whether all enqueued work has finished.
    pub fn is_idle(&self) -> bool {
        // Acquire: pairs with the worker's Release decrement, so the work's effects are visible.
        self.0.shared.pending.load(Ordering::Acquire) == 0
    }

    /// Waits for all enqueued work, then returns (and clears) the first error it hit.
    ///
    /// # Errors
    /// An injected [`FaultPoint::Synchronize`], or the stream's sticky error.
    pub fn synchronize(&self) -> Result<(), DeviceError> {
        self.sync_inner(None)
    }

    /// A blocking copy of `segments` in one direction (as `hipMemcpy` is blocking): enqueues
    /// them as one unit behind the stream's earlier work, waits for that unit alone, and
    /// returns *its* result — an address error of these segments is reported here and not left
    /// as the stream's sticky error, and another thread's failed work on the same stream is not
    /// reported here. So several threads may copy on one (null) stream at once without a lock
    /// around enqueue + wait.
    ///
    /// Every segment is an accepted copy (counted; [`FaultPoint::Copy`] checked once per
    /// segment, all before anything is enqueued, so an injected fault moves no byte); the wait
    /// checks [`FaultPoint::Synchronize`] (a failed wait first lets the segments finish, so
    /// no copy is left running over the caller's buffers).
    ///
    /// # Safety
    /// The host side of every segment (source for [`CopyKind::Htod`], destination for
    /// [`CopyKind::Dtoh`]) must be valid for `len` bytes until this call returns, and not
    /// accessed by anything else meanwhile.
    ///
    /// # Errors
    /// An injected fault, or the first segment's address error.
    pub unsafe fn copy_segments_blocking(
        &self,
        kind: CopyKind,
        segments: &[Segment],
    ) -> Result<(), DeviceError> {
        if segments.is_empty() {
            return Ok(());
        }
        let d = &self.0.shared.device()?;
        for _ in segments {
            self.check(FaultPoint::Copy)?;
        }
        d.0.counters.add(Counter::Copies, segments.len() as u64);
        if self.kind() == StreamKind::Null {
            d.note_null_copy(kind);
        }
        let done = Arc::new(Mutex::new(None));
        self.push(Op::Segments { kind, segments: segments.to_vec(), done: done.clone() });
        let sync = self.check(FaultPoint::Synchronize);
        d.0.counters.bump(Counter::Synchronizes);
        // No timeout: the caller's buffers must outlive the copy, so this cannot return early.
        self.0.shared.done.wait_until(|| lock(&done).is_some(), None);
        let res = lock(&done).take().unwrap_or(Ok(()));
        sync.and(res)
    }

    /// As [`synchronize`](Self::synchronize), giving up after `timeout`.
    ///
    /// # Errors
    /// [`DeviceError::Timeout`] when work is still pending after `timeout`.
    pub fn synchronize_timeout(&self, timeout: Duration) -> Result<(), DeviceError> {
        self.sync_inner(Some(timeout))
    }

    /// The clean-up after a failed call: waits, without a fault check, for the work enqueued so
    /// far (a failed [`synchronize`](Self::synchronize) may return before the work ran, and the
    /// buffers it uses must outlive it), then discards the sticky error that work left, so it is
    /// not reported to the next, unrelated user of the stream.
    ///
    /// # Examples
    /// ```
    /// use ferry_sim::fault::FaultPoint;
    /// use ferry_sim::{Arch, PlatformBuilder};
    /// let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(1 << 24).build()?;
    /// let d = p.device(0)?;
    /// let s = d.create_stream()?;
    /// s.launch("k", Box::new(|_| Ok(())))?;
    /// d.faults().fail_next(FaultPoint::Synchronize);
    /// assert!(s.synchronize().is_err()); // returned before the kernel ran
    /// s.quiesce();
    /// assert!(s.is_idle());
    /// # Ok::<(), ferry_sim::DeviceError>(())
    /// ```
    pub fn quiesce(&self) {
        let s = &self.0.shared;
        s.done.wait_until(|| self.is_idle(), None);
        lock(&s.error).take();
    }

    fn sync_inner(&self, timeout: Option<Duration>) -> Result<(), DeviceError> {
        self.check(FaultPoint::Synchronize)?.0.counters.bump(Counter::Synchronizes);
        let s = &self.0.shared;
        if !s.done.wait_until(|| self.is_idle(), timeout) {
            return Err(DeviceError::Timeout { what: "stream synchronize" });
        }
        match lock(&s.error).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

fn worker(s: Arc<Shared>) {
    loop {
        let op = {
            let mut q = lock(&s.queue);
            loop {
                if let Some(op) = q.ops.pop_front() {
                    break Some(op);
                }
                if q.closed {
                    break None;
                }
                q = match s.cv.wait(q) {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
            }
        };
        let Some(op) = op else { return };
        if matches!(op, Op::Copy { .. } | Op::Kernel { .. } | Op::Segments { .. }) {
            if let Ok(d) = s.device() {
                if d.wait_while_evicted() {
                    d.0.counters.bump(Counter::EvictionWaits);
                }
            }
        }
        if let Err(e) = run(&s, op) {
            let mut err = lock(&s.error);
            if err.is_none() {
                *err = Some(e);
            }
        }
        // Release: publishes the op's effects (copied bytes, kernel writes) to the Acquire load
        // in `is_idle`.
        s.pending.fetch_sub(1, Ordering::Release);
        s.done.ring();
    }
}

fn run(s: &Shared, op: Op) -> Result<(), DeviceError> {
    match op {
        Op::Segments { kind, segments, done } => {
            // Held for this op only: between ops the worker does not keep its device alive. The
            // result always reaches `done`, a missing device included: its caller waits for it.
            let res = s.device().and_then(|d| {
                segments.iter().try_for_each(|g| copy_one(&d, kind, g.src, g.dst, g.len, None))
            });
            *lock(&done) = Some(res);
            Ok(())
        }
        Op::Copy { kind, src, dst, len, meet } => copy_one(&s.device()?, kind, src, dst, len, meet),
        Op::Kernel { name, body } => {
            let d = &s.device()?;
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(d))) {
                Ok(Ok(())) => Ok(()),
                Ok(Err(message)) => Err(DeviceError::Kernel { name: name.to_string(), message }),
                Err(_) => Err(DeviceError::Kernel {
                    name: name.to_string(),
                    message: "kernel panicked".into(),
                }),
            }
        }
        Op::Record(ev, gen) => {
            // The record's timestamp: the device counter when the stream reached it.
            // Ordered: after everything the stream did before it (host clock anchors bracket
            // this read).
            let error = lock(&s.error).clone();
            ev.complete(gen, s.device().ok().map(|d| d.clock().now_cycles_ordered()), error);
            Ok(())
        }
        Op::Wait(ev, gen) => {
            if !ev.reached(gen) {
                // Release (both stores): the flag is raised after this op was dequeued, so a
                // reader that sees it knows every later op is still queued; it is lowered
                // before the worker goes on to them.
                s.blocked.store(true, Ordering::Release);
                ev.wait_for(gen);
                s.blocked.store(false, Ordering::Release);
            }
            Ok(())
        }
        Op::Host(f) => {
            f();
            Ok(())
        }
    }
}

/// One copy on a copy engine: host side checked to be a host address, device sides translated
/// and bounds-checked, then the bytes moved while holding the lowest free engine.
fn copy_one(
    d: &Device,
    kind: CopyKind,
    src: u64,
    dst: u64,
    len: u64,
    meet: Option<Arc<CopyRendezvous>>,
) -> Result<(), DeviceError> {
    let host_side = match kind {
        CopyKind::Htod => Some(src),
        CopyKind::Dtoh => Some(dst),
        CopyKind::Dtod => None,
    };
    if let Some(h) = host_side {
        if h == 0 || crate::memory::classify(h) != crate::memory::AddrKind::Foreign {
            return Err(crate::memory::MemoryError::NotHostAddress { addr: h }.into());
        }
    }
    let (sp, dp) = match kind {
        CopyKind::Htod => (src as *const u8, d.translate(DevicePtr(dst), len)?),
        CopyKind::Dtoh => (d.translate(DevicePtr(src), len)? as *const u8, dst as *mut u8),
        CopyKind::Dtod => (translate_any(d, src, len)? as *const u8, translate_any(d, dst, len)?),
    };
    d.with_copy_engine(|| {
        // SAFETY: device sides were translated and bounds-checked above; host sides are
        // valid for `len` bytes by the enqueuing caller's contract (`copy_*_async`).
        // `copy` (memmove) tolerates overlapping device-to-device ranges.
        unsafe { std::ptr::copy(sp, dp, len as usize) };
        if let Some(m) = &meet {
            // Keep this engine until the other parties hold theirs (see `overlap`).
            m.arrive_and_wait();
        }
    })?;
    let c = match kind {
        CopyKind::Htod => Counter::BytesHtod,
        CopyKind::Dtoh => Counter::BytesDtoh,
        CopyKind::Dtod => Counter::BytesDtod,
    };
    d.0.counters.add(c, len);
    Ok(())
}

/// Device-to-device copies may name another device's HBM (peer access) or host alias.
fn translate_any(d: &Device, addr: u64, len: u64) -> Result<*mut u8, DeviceError> {
    match crate::memory::classify(addr) {
        crate::memory::AddrKind::Hbm(o) | crate::memory::AddrKind::HostAlias(o)
            if o != d.ordinal() =>
        {
            match d.peer(o) {
                Some(peer) => Ok(peer.translate(DevicePtr(addr), len)?),
                None => Err(DeviceError::Memory(crate::memory::MemoryError::WrongDevice {
                    addr,
                    owner: o,
                    device: d.ordinal(),
                })),
            }
        }
        _ => Ok(d.translate(DevicePtr(addr), len)?),
    }
}
