//! The host-memory backend's streams ([`HostMemoryStream`]): by default their work runs at
//! enqueue, on the calling thread; on a backend made with
//! [`HostMemoryBackend::with_stream_threads`](super::HostMemoryBackend::with_stream_threads)
//! each stream runs its work in order on a host thread of its own, beside the caller, as a
//! device's queues run beside the host.
use super::{lock, DeviceInner, HostMemoryCopyGroup, HostMemoryDevice, HostMemoryError, Shared};
use super::{HostMemoryEvent, Ordering};
use crate::{BackendError, BackendOp, BackendStream, CopyKind, DevicePtr, HostEntry, Segment};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

/// One piece of a stream's work.
type Job = Box<dyn FnOnce() + Send>;

/// A stream's own thread and the queue it takes its work from.
#[derive(Debug)]
struct Worker {
    /// `None` once the stream is dropped: the thread finishes the queue and ends.
    queue: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    id: ThreadId,
}

/// A stream of a [`HostMemoryDevice`]: its work runs at enqueue, on the calling thread, or
/// (a backend with stream threads) in order on the stream's own thread; what failed stays as
/// the stream's sticky error until [`synchronize`](BackendStream::synchronize).
#[derive(Debug)]
pub struct HostMemoryStream {
    shared: Arc<Shared>,
    sticky: Arc<Mutex<Option<HostMemoryError>>>,
    id: u64,
    /// The device, for the entries launched here (the device holds its null stream).
    device: Weak<DeviceInner>,
    worker: Option<Worker>,
}

fn stick(sticky: &Mutex<Option<HostMemoryError>>, r: Result<(), HostMemoryError>) {
    if let Err(e) = r {
        lock(sticky).get_or_insert(e);
    }
}

impl HostMemoryStream {
    pub(super) fn new(shared: Arc<Shared>, id: u64, device: Weak<DeviceInner>) -> Self {
        let sticky = Arc::new(Mutex::new(None));
        let worker = shared.stream_threads.then(|| {
            let (queue, jobs) = mpsc::channel::<Job>();
            let sticky = sticky.clone();
            let thread = std::thread::Builder::new()
                .name(format!("host-stream-{id}"))
                .spawn(move || {
                    for job in jobs {
                        // A job that panicked leaves the stream failed, not its thread gone.
                        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                        if ran.is_err() {
                            let message = "panicked".to_owned();
                            let e = HostMemoryError::Kernel { name: "stream work".into(), message };
                            stick(&sticky, Err(e));
                        }
                    }
                })
                // As `std::thread::spawn`: a process that cannot start a thread is out of
                // resources, not handed bad input.
                .expect("starting a stream's thread");
            Worker { queue: Some(queue), id: thread.thread().id(), thread: Some(thread) }
        });
        Self { shared, sticky, id, device, worker }
    }

    /// Runs `work` in stream order: now, or queued on the stream's thread. Its failure becomes
    /// the stream's sticky error.
    fn enqueue(&self, work: impl FnOnce() -> Result<(), HostMemoryError> + Send + 'static) {
        let sticky = self.sticky.clone();
        let job = move || stick(&sticky, work());
        match self.worker.as_ref().and_then(|w| w.queue.as_ref()) {
            // The thread outlives the sender (it ends when the queue closes), so the send
            // reaches it.
            Some(queue) => {
                let _ = queue.send(Box::new(job));
            }
            None => job(),
        }
    }

    /// Waits until the work enqueued so far has run (at once without a stream thread);
    /// `false` when `timeout` passed first.
    fn drain(&self, timeout: Option<Duration>) -> bool {
        let Some(queue) = self.worker.as_ref().and_then(|w| w.queue.as_ref()) else {
            return true;
        };
        let (done, reached) = mpsc::channel();
        let _ = queue.send(Box::new(move || {
            let _ = done.send(());
        }));
        match timeout {
            Some(t) => reached.recv_timeout(t).is_ok(),
            None => reached.recv().is_ok(),
        }
    }

    fn take_sticky(&self) -> Result<(), BackendError> {
        match lock(&self.sticky).take() {
            Some(e) => Err(BackendError::typed(BackendOp::Synchronize, e)),
            None => Ok(()),
        }
    }
}

impl Drop for HostMemoryStream {
    fn drop(&mut self) {
        if let Some(mut w) = self.worker.take() {
            // Closing the queue ends the thread once the work queued before it ran.
            drop(w.queue.take());
            if let Some(t) = w.thread.take() {
                // A stream dropped by its own work (its device's last handle let go in an
                // entry) cannot join itself: the thread ends on its own.
                if std::thread::current().id() != w.id {
                    let _ = t.join();
                }
            }
        }
    }
}

impl BackendStream for HostMemoryStream {
    type CopyGroup = HostMemoryCopyGroup;
    type Event = HostMemoryEvent;
    type Entry<A: Send + 'static> = HostEntry<HostMemoryDevice, A>;

    fn id(&self) -> u64 {
        self.id
    }

    fn record_event(&self, event: &HostMemoryEvent) -> Result<(), BackendError> {
        self.shared.check(BackendOp::RecordEvent)?;
        let ticket = event.begin();
        let (event, sticky) = (event.clone(), self.sticky.clone());
        self.enqueue(move || {
            event.complete(ticket, lock(&sticky).clone());
            Ok(())
        });
        Ok(())
    }

    fn wait_event(&self, event: &HostMemoryEvent) -> Result<(), BackendError> {
        self.shared.check(BackendOp::WaitEvent)?;
        // The latest record at the time of the call; a never-recorded event is waited for by
        // nothing.
        let ticket = event.recorded();
        let event = event.clone();
        self.enqueue(move || {
            event.wait_for(ticket, None);
            Ok(())
        });
        Ok(())
    }

    fn launch_entry<A: Send + 'static>(
        &self,
        name: &str,
        entry: HostEntry<HostMemoryDevice, A>,
        args: A,
    ) -> Result<(), BackendError> {
        self.shared.check(BackendOp::Launch)?;
        // Relaxed: a statistic.
        self.shared.stats.launches.fetch_add(1, Ordering::Relaxed);
        let (device, name) = (self.device.clone(), name.to_owned());
        self.enqueue(move || match device.upgrade() {
            Some(d) => entry(&HostMemoryDevice(d), args)
                .map_err(|message| HostMemoryError::Kernel { name, message }),
            None => Err(HostMemoryError::DeviceGone),
        });
        Ok(())
    }

    fn synchronize_timeout(&self, timeout: Duration) -> Result<(), BackendError> {
        self.shared.check(BackendOp::Wait)?;
        if !self.drain(Some(timeout)) {
            return Err(BackendError::typed(BackendOp::Wait, HostMemoryError::TimedOut));
        }
        self.take_sticky()
    }

    unsafe fn copy_htod_async(
        &self,
        src: *const u8,
        dst: DevicePtr,
        bytes: u64,
    ) -> Result<(), BackendError> {
        self.shared.check(BackendOp::Copy)?;
        let (shared, src) = (self.shared.clone(), src as u64);
        // SAFETY: the caller's promise on `src` (the trait's contract) holds until the stream
        // is synchronized, which waits for this work.
        self.enqueue(move || unsafe { shared.copy(CopyKind::Htod, src, dst.0, bytes) });
        Ok(())
    }

    unsafe fn copy_htod_async_grouped(
        &self,
        src: *const u8,
        dst: DevicePtr,
        bytes: u64,
        group: &Arc<HostMemoryCopyGroup>,
    ) -> Result<(), BackendError> {
        // SAFETY: as `copy_htod_async`.
        unsafe { self.copy_htod_async(src, dst, bytes)? };
        let group = group.clone();
        self.enqueue(move || {
            group.arrive();
            Ok(())
        });
        // Relaxed: a statistic.
        self.shared.stats.grouped.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    unsafe fn copy_dtoh_async(
        &self,
        src: DevicePtr,
        dst: *mut u8,
        bytes: u64,
    ) -> Result<(), BackendError> {
        self.shared.check(BackendOp::Copy)?;
        let (shared, dst) = (self.shared.clone(), dst as u64);
        // SAFETY: the caller's promise on `dst` (the trait's contract) holds until the stream
        // is synchronized, which waits for this work.
        self.enqueue(move || unsafe { shared.copy(CopyKind::Dtoh, src.0, dst, bytes) });
        Ok(())
    }

    unsafe fn copy_segments_blocking(
        &self,
        kind: CopyKind,
        segments: &[Segment],
    ) -> Result<(), BackendError> {
        // After the stream's earlier work, on the calling thread: its result is its own.
        self.drain(None);
        for s in segments {
            self.shared.check(BackendOp::Copy)?;
            // SAFETY: the caller's promise on every host side (the trait's contract).
            unsafe { self.shared.copy(kind, s.src, s.dst, s.len) }
                .map_err(|e| BackendError::typed(BackendOp::Copy, e))?;
        }
        Ok(())
    }

    fn launch_gather(
        &self,
        descriptors: DevicePtr,
        count: usize,
        counted: bool,
    ) -> Result<(), BackendError> {
        self.shared.check(BackendOp::Launch)?;
        if counted {
            // Relaxed: a statistic.
            self.shared.stats.launches.fetch_add(1, Ordering::Relaxed);
        }
        if count > 0 {
            let shared = self.shared.clone();
            self.enqueue(move || shared.gather(descriptors.0, count));
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        self.shared.check(BackendOp::Synchronize)?;
        self.drain(None);
        self.take_sticky()
    }

    fn quiesce(&self) {
        self.drain(None);
        lock(&self.sticky).take();
    }
}
