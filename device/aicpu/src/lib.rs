//! The AICPU program ("inner SO"): the logic both runtime variants share (device side).
//!
//! The program is a shared object the host never links: the AICPU OS loads it (Path A, after
//! the bootstrap dispatcher saved it; Method 1 from the preinstalled directory; Path B from the
//! custom-scheduler directory) and calls its exports. A variant crate (`device/aicpu-*`) is a
//! `cdylib` whose whole source is one [`aicpu_program!`] invocation naming the variant, its
//! build id and the task runtime's [`ExecHook`].
//!
//! | export | payload | what it does |
//! |---|---|---|
//! | `ferry_set_services` | `*const DeviceServices` | stores the OS services table (before anything else) |
//! | `ferry_aicpu_init` | [`InitArgs`] | latches the per-device invariants; once per device |
//! | `ferry_aicpu_register_callable` | [`RegisterCallableArgs`] | (re)loads the callable's orchestration object through the OS loader (device-orchestrated); records only (host-built graph) |
//! | `ferry_aicpu_exec` | front-less [`KernelArgs`], by value | checks the ABI stamp (typed status on skew), then calls the [`ExecHook`] on each launched thread |
//! | `ferry_aicpu_query` | [`QueryArgs`] | writes a [`ProgramReport`] (identity: name + build id; what it has seen) to device memory |
//!
//! Every export catches panics (returning `STATUS_PANIC`) so no unwind crosses the boundary,
//! takes only `repr(C)` data, and frees only what it allocated: the payload is the entry's
//! private copy (owned by the OS), orchestration objects are unloaded through the OS that
//! loaded them.
//!
//! # Plugging in the task runtime
//!
//! The exec export decodes and checks the `KernelArgs`, then calls the variant's [`ExecHook`]
//! (`fn(&ExecContext<'_>) -> Result<(), i32>`, defined in `ferry_abi::services`) once per
//! launched AICPU thread. Both variants name the task runtime's hook,
//! `ferry_runtime::device::ffi::exec_hook` (ferry-runtime without its `host` feature);
//! [`noop_exec`] remains for tests of this crate. The hook gets
//! the services table, which covers everything the runtime's `DeviceOps` needs (`translate`,
//! `reg_read`, `reg_write_aicpu`, `reg_write_core`, `core_wait`/`core_wait_with`,
//! `aicpu_wait`/`aicpu_wait_with`, `notify_aicpu`, `now_cycles`, `clock_hz`), the per-run
//! args by value, the thread position, the latched `InitArgs` and the callable table. The
//! crate that holds the hook must depend only on `ferry-abi`, `device/` crates and
//! `ferry-runtime` without default features: the device
//! programs are built by `ferry-programs`' build script, so a dependency on `ferry-launch` (or
//! anything above it) would recurse; the build script refuses that with a message.
#![deny(unsafe_op_in_unsafe_fn)]

use ferry_abi::launch::{
    AbiRecord, DecodeError, InitArgs, KernelArgs, RegisterCallableArgs, KERNEL_ARGS_ABI_VERSION,
    MAX_CALLABLES,
};
use ferry_abi::services::{
    DeviceServices, ExecContext, ExecHook, OrchConfig, OrchConfigFn, OrchEntryFn, ProgramReport,
    QueryArgs, EXPORT_ORCH_CONFIG, EXPORT_ORCH_ENTRY, STATUS_ABI_SIZE_MISMATCH,
    STATUS_ABI_VERSION_MISMATCH, STATUS_BAD_ADDRESS, STATUS_BAD_CALLABLE, STATUS_BAD_NAME,
    STATUS_INVALID_ARGUMENT, STATUS_IO, STATUS_MISSING_SYMBOL, STATUS_NOT_INITIALISED,
    STATUS_NO_SERVICES, STATUS_OK, STATUS_PANIC,
};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

pub use ferry_abi;

/// Which runtime variant a program is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Orchestration {
    /// The graph is built on the AICPU by the callable's orchestration object.
    Device,
    /// The graph is built on the host; register-callable only records the call.
    Host,
}

/// A hook that does nothing (tests of this crate; the variants use the task runtime's).
pub fn noop_exec(_ctx: &ExecContext<'_>) -> Result<(), i32> {
    Ok(())
}

/// Parses a build id given at build time (`0x…` hex or decimal); 0 when absent or malformed.
pub const fn parse_build_id(s: Option<&str>) -> u64 {
    let Some(s) = s else { return 0 };
    let b = s.as_bytes();
    let (mut i, radix) = if b.len() > 2 && b[0] == b'0' && (b[1] == b'x' || b[1] == b'X') {
        (2, 16)
    } else {
        (0, 10)
    };
    let mut v: u64 = 0;
    while i < b.len() {
        let d = match b[i] {
            c @ b'0'..=b'9' => (c - b'0') as u64,
            c @ b'a'..=b'f' if radix == 16 => (c - b'a' + 10) as u64,
            c @ b'A'..=b'F' if radix == 16 => (c - b'A' + 10) as u64,
            _ => return 0,
        };
        v = v.wrapping_mul(radix).wrapping_add(d);
        i += 1;
    }
    v
}

#[derive(Clone, Copy)]
struct Slot {
    handle: u64,
    entry: Option<OrchEntryFn>,
}

const EMPTY_SLOT: Slot = Slot { handle: 0, entry: None };

struct State {
    init: Option<InitArgs>,
    report: Option<ProgramReport>,
    slots: [Slot; MAX_CALLABLES as usize],
}

/// One AICPU program's state. A variant crate holds exactly one, in a `static`.
pub struct ProgramState {
    name: &'static str,
    build_id: u64,
    orchestration: Orchestration,
    hook: ExecHook,
    /// The [`KernelArgs`] ABI version exec accepts (ferry-abi's, unless the variant names
    /// another: [`ProgramState::built_for_kernel_args_abi`]).
    kernel_args_abi: u32,
    services: AtomicPtr<DeviceServices>,
    state: Mutex<State>,
}

impl ProgramState {
    /// A program named `name` with `build_id`, calling `hook` from exec.
    pub const fn new(
        name: &'static str,
        build_id: u64,
        orchestration: Orchestration,
        hook: ExecHook,
    ) -> ProgramState {
        ProgramState {
            name,
            build_id,
            orchestration,
            hook,
            kernel_args_abi: KERNEL_ARGS_ABI_VERSION,
            services: AtomicPtr::new(core::ptr::null_mut()),
            state: Mutex::new(State { init: None, report: None, slots: [EMPTY_SLOT; 64] }),
        }
    }

    /// The same program as built against another launch ABI: its exec accepts [`KernelArgs`]
    /// stamped with `version` only, and refuses every other run with
    /// `STATUS_ABI_VERSION_MISMATCH`, as a program built from another release of ferry-abi
    /// does. ferry's own variants never call it; tests build such a program to see the host
    /// report the mismatch as a typed error (`LoadError::AbiMismatch`).
    pub const fn built_for_kernel_args_abi(mut self, version: u32) -> ProgramState {
        self.kernel_args_abi = version;
        self
    }

    fn services(&self) -> Option<&DeviceServices> {
        // Acquire: pairs with the Release store in `set_services`, so the table's fields are
        // visible.
        let p = self.services.load(Ordering::Acquire);
        // SAFETY: a non-null pointer was stored by `set_services` from the OS, which keeps the
        // table alive while this program is loaded.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn with_report<R>(&self, st: &mut State, f: impl FnOnce(&mut ProgramReport) -> R) -> R {
        let name = self.name;
        let id = self.build_id;
        let r = st.report.get_or_insert_with(|| {
            ProgramReport::new(name, id).unwrap_or_else(|_| {
                ProgramReport::new("name-too-long", id).expect("fits the name field")
            })
        });
        f(r)
    }

    /// `ferry_set_services`.
    ///
    /// # Safety
    /// `services` is null or points at a table that outlives this program.
    pub unsafe fn set_services(&self, services: *const DeviceServices) -> i32 {
        if services.is_null() {
            return STATUS_INVALID_ARGUMENT;
        }
        // SAFETY: non-null, and valid by the caller's contract.
        if !unsafe { &*services }.is_compatible() {
            return STATUS_NO_SERVICES;
        }
        // Release: pairs with the Acquire load in `services`.
        self.services.store(services.cast_mut(), Ordering::Release);
        STATUS_OK
    }

    /// `ferry_aicpu_init`: latches the [`InitArgs`], once per device: a repeat of the latched
    /// arguments (a second loader on the same device) is acknowledged without re-initialising.
    pub fn init(&self, blob: &[u8]) -> i32 {
        let args = match InitArgs::from_bytes(blob) {
            Ok(a) => a,
            Err(e) => return decode_status(&e),
        };
        if self.services().is_none() {
            return STATUS_NO_SERVICES;
        }
        let mut st = self.state();
        if st.init == Some(args) {
            // Once per device: the resident program already latched these invariants (another
            // loader of the same device, e.g. a second runner, launched init again). Not a
            // re-init: nothing changes and the report does not count it.
            return STATUS_OK;
        }
        st.init = Some(args);
        self.with_report(&mut st, |r| {
            r.init_calls += 1;
            r.init_device_id = args.device_id;
        });
        STATUS_OK
    }

    /// `ferry_aicpu_register_callable`: (re)loads the callable's orchestration object.
    pub fn register_callable(&self, blob: &[u8]) -> i32 {
        let rca = match RegisterCallableArgs::from_bytes(blob) {
            Ok(a) => a,
            Err(e) => return decode_status(&e),
        };
        let Some(svc) = self.services() else { return STATUS_NO_SERVICES };
        let Some(cid) = rca.callable_id() else { return STATUS_BAD_CALLABLE };
        let (Ok(func), Ok(cfg)) = (rca.device_orch_func_name(), rca.device_orch_config_name())
        else {
            return STATUS_BAD_NAME;
        };
        let mut st = self.state();
        self.with_report(&mut st, |r| {
            r.register_calls += 1;
            r.last_callable_id = cid as i32;
        });
        if self.orchestration == Orchestration::Host {
            return STATUS_OK; // host-side orchestration: nothing to load on the device
        }
        // Unload the previous object of this callable first (a re-registration reloads).
        let old = core::mem::replace(&mut st.slots[cid as usize], EMPTY_SLOT);
        if old.handle != 0 {
            (svc.close_object)(svc.ctx, old.handle);
        }
        let status = (|| {
            if rca.dev_orch_so_size == 0 {
                return Ok(None); // an empty descriptor only unregisters
            }
            let p = (svc.translate)(svc.ctx, rca.dev_orch_so_addr, rca.dev_orch_so_size);
            if p.is_null() {
                return Err(STATUS_BAD_ADDRESS);
            }
            let tag = format!("{cid}");
            let h =
                (svc.load_object)(svc.ctx, p, rca.dev_orch_so_size, tag.as_ptr(), tag.len() as u64);
            if h == 0 {
                return Err(STATUS_IO);
            }
            let sym = |name: &str, default: &str| {
                let n = if name.is_empty() { default } else { name };
                (svc.object_symbol)(svc.ctx, h, n.as_ptr(), n.len() as u64)
            };
            let entry = sym(func, EXPORT_ORCH_ENTRY);
            if entry.is_null() {
                (svc.close_object)(svc.ctx, h);
                return Err(STATUS_MISSING_SYMBOL);
            }
            // SAFETY: the orchestration contract fixes the entry export's signature.
            let entry = unsafe { core::mem::transmute::<*const _, OrchEntryFn>(entry) };
            let mut config = OrchConfig::default();
            let c = sym(cfg, EXPORT_ORCH_CONFIG);
            if !c.is_null() {
                // SAFETY: the contract fixes the config export's signature; `config` is a
                // live, exclusively borrowed record.
                let c = unsafe { core::mem::transmute::<*const _, OrchConfigFn>(c) };
                // SAFETY: as above.
                unsafe { c(&mut config) };
            }
            Ok(Some((Slot { handle: h, entry: Some(entry) }, config)))
        })();
        match status {
            Ok(loaded) => {
                if let Some((slot, config)) = loaded {
                    st.slots[cid as usize] = slot;
                    self.with_report(&mut st, |r| r.last_orch_name = config.name);
                }
                let n = st.slots.iter().filter(|s| s.entry.is_some()).count() as u32;
                self.with_report(&mut st, |r| r.callables_loaded = n);
                STATUS_OK
            }
            Err(code) => {
                let n = st.slots.iter().filter(|s| s.entry.is_some()).count() as u32;
                self.with_report(&mut st, |r| r.callables_loaded = n);
                code
            }
        }
    }

    /// `ferry_aicpu_exec`: checks the front-less [`KernelArgs`] and calls the hook.
    pub fn exec(&self, blob: &[u8]) -> i32 {
        let (thread, threads) = self.thread_info();
        let status = self.exec_inner(blob, thread, threads);
        let mut st = self.state();
        self.with_report(&mut st, |r| {
            r.last_exec_threads = threads;
            if thread < 32 {
                r.exec_thread_mask |= 1 << thread;
            }
            r.exec_calls += 1;
            r.last_exec_len = blob.len() as u32;
            r.last_exec_status = status;
            r.last_exec_blob = [0; 112];
            let n = blob.len().min(112);
            r.last_exec_blob[..n].copy_from_slice(&blob[..n]);
        });
        status
    }

    /// This AICPU thread's position in its launch (`(0, 1)` outside a launch or without
    /// services).
    fn thread_info(&self) -> (u32, u32) {
        let info = self.services().map_or(u64::MAX, |svc| (svc.thread_info)(svc.ctx));
        if info == u64::MAX {
            (0, 1)
        } else {
            ((info >> 32) as u32, info as u32)
        }
    }

    fn exec_inner(&self, blob: &[u8], thread: u32, threads: u32) -> i32 {
        let args = match KernelArgs::from_bytes(blob) {
            Ok(a) => a,
            Err(e) => return decode_status(&e),
        };
        // The stamp: the version against the one this program was built for, the rest as
        // ferry-abi checks it.
        if args.abi_version != self.kernel_args_abi {
            return STATUS_ABI_VERSION_MISMATCH;
        }
        let stamp = KernelArgs { abi_version: KERNEL_ARGS_ABI_VERSION, ..args };
        if let Err(e) = stamp.check_abi() {
            return decode_status(&e);
        }
        let Some(svc) = self.services() else { return STATUS_NO_SERVICES };
        let (init, orch_entries) = {
            let st = self.state();
            let Some(init) = st.init else { return STATUS_NOT_INITIALISED };
            let mut e = [None; MAX_CALLABLES as usize];
            for (d, s) in e.iter_mut().zip(st.slots.iter()) {
                *d = s.entry;
            }
            (init, e)
        };
        let ctx = ExecContext { services: svc, args, thread, threads, init, orch_entries };
        match (self.hook)(&ctx) {
            Ok(()) => STATUS_OK,
            Err(code) => code,
        }
    }

    /// `ferry_aicpu_query`: writes the [`ProgramReport`] where [`QueryArgs`] says.
    pub fn query(&self, blob: &[u8]) -> i32 {
        let q = match QueryArgs::from_bytes(blob) {
            Ok(q) => q,
            Err(e) => return decode_status(&e),
        };
        let Some(svc) = self.services() else { return STATUS_NO_SERVICES };
        let report = {
            let mut st = self.state();
            self.with_report(&mut st, |r| *r)
        };
        let p = (svc.translate)(svc.ctx, q.result_addr, ProgramReport::SIZE as u64);
        if p.is_null() {
            return STATUS_BAD_ADDRESS;
        }
        let bytes = report.as_bytes();
        // SAFETY: `translate` checked that `p` addresses `ProgramReport::SIZE` bytes of one live
        // allocation, which the host reserved for this report and does not touch meanwhile.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
        STATUS_OK
    }
}

/// Maps a payload decode error to the status the host turns into a typed error.
pub fn decode_status(e: &DecodeError) -> i32 {
    match e {
        DecodeError::WrongLength { .. } | DecodeError::SizeFieldMismatch { .. } => {
            STATUS_ABI_SIZE_MISMATCH
        }
        DecodeError::VersionMismatch { .. } => STATUS_ABI_VERSION_MISMATCH,
        _ => STATUS_INVALID_ARGUMENT,
    }
}

/// Runs an entry body, turning a panic into `STATUS_PANIC` so no unwind crosses the boundary.
pub fn guarded(f: impl FnOnce() -> i32) -> i32 {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(STATUS_PANIC)
}

/// Views an entry's payload.
///
/// # Safety
/// `blob` is null (then `len` must be 0) or valid for reads of `len` bytes for `'a`.
pub unsafe fn payload<'a>(blob: *const u8, len: u64) -> &'a [u8] {
    if blob.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts(blob, len as usize) }
}

/// Defines an AICPU program's exports in a variant crate.
///
/// ```ignore
/// ferry_device_aicpu::aicpu_program! {
///     name: "device-orchestrated",
///     build_id_env: "FERRY_BUILD_ID_AICPU_DEVICE_ORCHESTRATED",
///     orchestration: Device,
///     exec: ferry_runtime::device::ffi::exec_hook,
/// }
/// ```
///
/// A trailing `kernel_args_abi: VERSION` builds the program as if against another launch ABI
/// ([`ProgramState::built_for_kernel_args_abi`]; for tests of the mismatch only).
#[macro_export]
macro_rules! aicpu_program {
    (name: $name:literal, build_id_env: $env:literal, orchestration: $orch:ident, exec: $hook:path $(, kernel_args_abi: $abi:expr)? $(,)?) => {
        /// This program's build id (given by the build that embedded it; 0 otherwise).
        pub const BUILD_ID: u64 = $crate::parse_build_id(option_env!($env));

        static PROGRAM: $crate::ProgramState =
            $crate::ProgramState::new($name, BUILD_ID, $crate::Orchestration::$orch, $hook)
                $(.built_for_kernel_args_abi($abi))?;

        /// Stores the OS services table. Called by the OS before any other entry.
        ///
        /// # Safety
        /// `services` is null or points at a table that outlives this program.
        #[no_mangle]
        pub unsafe extern "C" fn ferry_set_services(
            services: *const $crate::ferry_abi::services::DeviceServices,
        ) -> i32 {
            // SAFETY: forwarded contract.
            $crate::guarded(|| unsafe { PROGRAM.set_services(services) })
        }

        /// Init entry: payload `InitArgs`.
        ///
        /// # Safety
        /// `blob` is valid for reads of `len` bytes (the OS's private copy of the payload).
        #[no_mangle]
        pub unsafe extern "C" fn ferry_aicpu_init(blob: *const u8, len: u64) -> i32 {
            // SAFETY: forwarded contract.
            $crate::guarded(|| PROGRAM.init(unsafe { $crate::payload(blob, len) }))
        }

        /// Register-callable entry: payload `RegisterCallableArgs`.
        ///
        /// # Safety
        /// As `ferry_aicpu_init`.
        #[no_mangle]
        pub unsafe extern "C" fn ferry_aicpu_register_callable(blob: *const u8, len: u64) -> i32 {
            // SAFETY: forwarded contract.
            $crate::guarded(|| PROGRAM.register_callable(unsafe { $crate::payload(blob, len) }))
        }

        /// Exec entry: payload the front-less `KernelArgs`, by value.
        ///
        /// # Safety
        /// As `ferry_aicpu_init`.
        #[no_mangle]
        pub unsafe extern "C" fn ferry_aicpu_exec(blob: *const u8, len: u64) -> i32 {
            // SAFETY: forwarded contract.
            $crate::guarded(|| PROGRAM.exec(unsafe { $crate::payload(blob, len) }))
        }

        /// Query entry: payload `QueryArgs`; writes a `ProgramReport`.
        ///
        /// # Safety
        /// As `ferry_aicpu_init`.
        #[no_mangle]
        pub unsafe extern "C" fn ferry_aicpu_query(blob: *const u8, len: u64) -> i32 {
            // SAFETY: forwarded contract.
            $crate::guarded(|| PROGRAM.query(unsafe { $crate::payload(blob, len) }))
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_ids_parse() {
        assert_eq!(parse_build_id(None), 0);
        assert_eq!(parse_build_id(Some("0x1F")), 31);
        assert_eq!(parse_build_id(Some("42")), 42);
        assert_eq!(parse_build_id(Some("zz")), 0);
    }

    #[test]
    fn exec_checks_the_stamp_and_init() {
        let p = ProgramState::new("t", 1, Orchestration::Device, noop_exec);
        let good = KernelArgs::new(1, 2);
        assert_eq!(p.exec(&good.as_bytes()[..104]), STATUS_ABI_SIZE_MISMATCH);
        let mut old = good;
        old.abi_version += 1;
        assert_eq!(p.exec(old.as_bytes()), STATUS_ABI_VERSION_MISMATCH);
        // No services injected yet.
        assert_eq!(p.exec(good.as_bytes()), STATUS_NO_SERVICES);
        assert_eq!(p.init(&[0; 3]), STATUS_ABI_SIZE_MISMATCH);
        let st = p.state();
        assert_eq!(st.report.unwrap().exec_calls, 3);
    }

    #[test]
    fn a_program_built_for_another_launch_abi_refuses_this_ones_stamp() {
        let p = ProgramState::new("t", 1, Orchestration::Device, noop_exec)
            .built_for_kernel_args_abi(KERNEL_ARGS_ABI_VERSION + 1);
        let current = KernelArgs::new(1, 2);
        assert_eq!(p.exec(current.as_bytes()), STATUS_ABI_VERSION_MISMATCH);
        let mut newer = current;
        newer.abi_version += 1;
        // Its own version passes the stamp (and stops at the missing services table)...
        assert_eq!(p.exec(newer.as_bytes()), STATUS_NO_SERVICES);
        // ...but not with a size field of another layout.
        newer.abi_size += 8;
        assert_eq!(p.exec(newer.as_bytes()), STATUS_ABI_SIZE_MISMATCH);
    }
}
