//! A loaded [`LoadedAicpuProgram`]: its four entries (init, register-callable, exec, query), resolved
//! and called through the device's program loader ([`ProgramDevice`]).

use super::*;

/// An AICPU program loaded on a device: its four entries, resolved.
///
/// Keeps the program's code loaded and the device session open.
#[derive(Debug)]
pub struct LoadedAicpuProgram<P: ProgramDevice> {
    pub(super) programs: P,
    pub(super) _session: Arc<P::Session>,
    pub(super) shipped: Identity,
    pub(super) fingerprint: u64,
    pub(super) init: P::Function,
    pub(super) register: P::Function,
    pub(super) exec: P::Function,
    pub(super) query: P::Function,
}

impl<P: ProgramDevice> LoadedAicpuProgram<P> {
    /// Who the program is (verified at load).
    pub fn identity(&self) -> &Identity {
        &self.shipped
    }

    /// Fingerprint of the program's bytes.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The exec entry, for launches the caller schedules itself (e.g. on a stream) with
    /// [`ProgramDevice::launch_function`].
    pub fn exec_function(&self) -> &P::Function {
        &self.exec
    }

    /// The device's program loader.
    pub fn programs(&self) -> &P {
        &self.programs
    }

    fn classify(&self, e: ProgramError) -> LoadError {
        classify(&self.shipped.name, e)
    }

    fn run(&self, f: &P::Function, threads: u32, payload: &[u8]) -> Result<(), LoadError> {
        self.programs
            .launch_function(f, threads, payload)
            .and_then(|l| l.wait_timeout(ENTRY_TIMEOUT))
            .map_err(|e| self.classify(e))
    }

    /// Runs the init entry on one AICPU thread.
    ///
    /// # Errors
    /// The entry's status as [`LoadError::Entry`] / [`LoadError::AbiMismatch`].
    pub fn init(&self, args: &InitArgs) -> Result<(), LoadError> {
        self.run(&self.init, 1, args.as_bytes())
    }

    /// Queries the program's report.
    ///
    /// # Errors
    /// A failed launch, or [`LoadError::BadReport`].
    pub fn report(&self) -> Result<ProgramReport, LoadError> {
        let device = self.programs.device();
        let mut bufs = DeviceBuffers { device: device.clone(), ptrs: Vec::new() };
        let out = bufs.upload(&[0u8; ProgramReport::SIZE])?;
        self.run(&self.query, 1, QueryArgs { result_addr: out.0 }.as_bytes())?;
        let mut bytes = [0u8; ProgramReport::SIZE];
        device.copy_dtoh(out, &mut bytes)?;
        let r = ProgramReport::from_bytes(&bytes)
            .map_err(|_| LoadError::BadReport { program: self.shipped.name.clone() })?;
        if r.magic != PROGRAM_REPORT_MAGIC || r.version != PROGRAM_REPORT_VERSION {
            return Err(LoadError::BadReport { program: self.shipped.name.clone() });
        }
        Ok(r)
    }

    /// Registers (or re-registers) callable `callable_id` with its orchestration object
    /// `orch` (empty: unregister). `entry` names the orchestration entry (`None`: the default).
    /// The object's bytes are uploaded for the call and freed after it.
    ///
    /// # Errors
    /// [`LoadError::BadCallable`] for an id or name that does not fit; the entry's status
    /// (e.g. `STATUS_MISSING_SYMBOL` for an entry the object does not export).
    pub fn register_callable(
        &self,
        callable_id: u32,
        orch: &[u8],
        entry: Option<&str>,
    ) -> Result<(), LoadError> {
        let device = self.programs.device();
        let mut bufs = DeviceBuffers { device: device.clone(), ptrs: Vec::new() };
        let addr = if orch.is_empty() { DevicePtr::NULL } else { bufs.upload(orch)? };
        let mut rca = RegisterCallableArgs::new(callable_id, addr.0, orch.len() as u64)?;
        if let Some(e) = entry {
            rca.set_device_orch_func_name(e)?;
        }
        self.register_callable_raw(rca.as_bytes())
    }

    /// Launches register-callable with a raw payload (bad-input tests).
    ///
    /// # Errors
    /// As [`register_callable`](Self::register_callable).
    pub fn register_callable_raw(&self, payload: &[u8]) -> Result<(), LoadError> {
        self.run(&self.register, 1, payload)
    }

    /// Launches exec on `threads` AICPU threads with `args` by value.
    ///
    /// # Errors
    /// An invalid thread count or an injected launch fault.
    pub fn launch_exec(&self, args: &KernelArgs, threads: u32) -> Result<P::Launch, LoadError> {
        self.launch_exec_blob(args.as_bytes(), threads)
    }

    /// Launches exec with a raw payload (it must be the front-less `KernelArgs` image).
    ///
    /// # Errors
    /// As [`launch_exec`](Self::launch_exec).
    pub fn launch_exec_blob(&self, blob: &[u8], threads: u32) -> Result<P::Launch, LoadError> {
        self.programs.launch_function(&self.exec, threads, blob).map_err(|e| self.classify(e))
    }

    /// The exec entry as the AICPU body of a launch transaction
    /// ([`EntryKernels::new`](crate::EntryKernels::new)): when the AICPU stream reaches it, it
    /// launches exec on `threads` AICPU threads with the run's `KernelArgs` by value and waits
    /// for them. A non-zero status is a typed [`LoadError`] (as [`exec`](Self::exec)'s); the
    /// caller keeps it and hands the stream its message.
    pub fn aicpu_entry(
        &self,
        threads: u32,
    ) -> impl FnOnce(&P::Device, KernelArgs) -> Result<(), LoadError> + Send + 'static {
        let (programs, exec) = (self.programs.clone(), self.exec.clone());
        let name = self.shipped.name.clone();
        move |_device, args| {
            programs
                .launch_function(&exec, threads, args.as_bytes())
                .and_then(|l| l.wait())
                .map_err(|e| classify(&name, e))
        }
    }

    /// Runs exec and waits.
    ///
    /// # Errors
    /// [`LoadError::AbiMismatch`] when the program rejects the payload's layout;
    /// [`LoadError::Entry`] for another non-zero status.
    pub fn exec(&self, args: &KernelArgs, threads: u32) -> Result<(), LoadError> {
        self.launch_exec(args, threads)?.wait().map_err(|e| self.classify(e))
    }

    /// Runs exec with a raw payload and waits.
    ///
    /// # Errors
    /// As [`exec`](Self::exec).
    pub fn exec_blob(&self, blob: &[u8], threads: u32) -> Result<(), LoadError> {
        self.launch_exec_blob(blob, threads)?.wait().map_err(|e| self.classify(e))
    }
}
