//! Custom kernel libraries: a user's kernel cdylib loaded by the AICPU OS for the AICore workers
//! (`ferry_abi::kernel_lib`), next to the built-in kernel library
//! ([`AicpuOs::load_kernel_library`]).
//!
//! [`AicpuOs::load_custom_kernels`] saves the bytes into the process directory under a
//! fingerprinted name, loads them with the OS's dynamic loader (which injects the services
//! table, as for every program), resolves [`EXPORT_KERNEL_LIBRARY`] and reads the descriptor in
//! the order `ferry_abi::kernel_lib` fixes: magic and version first, then the record sizes, then
//! the kernel count (bounded before the table is copied), then each entry. The library is
//! usable only once all of that passed; a refused library is unloaded when its last reference
//! drops, and the OS is as before.
//!
//! # Safety
//!
//! As for every program: loading runs the object's initialisers and calling an entry runs
//! foreign code, through the signatures `ferry_abi::kernel_lib` fixes.
use crate::aicpu_os::{write_atomic, AicpuOs, LoadedObject, OsError};
use crate::sync::Arc;
use ferry_abi::kernel_lib::{
    check_header, name_str, validate_entries, DeviceCall, HostCall, KernelEntry, KernelErrorRecord,
    KernelLibraryDesc, KernelLibraryFn, KernelTableError, EXPORT_KERNEL_LIBRARY,
    KERNEL_LIB_ABI_VERSION, KERNEL_LIB_MAGIC,
};
use ferry_abi::services::{fingerprint, DeviceServices, STATUS_INVALID_ARGUMENT};
use std::ffi::c_void;

/// A custom kernel library the OS loaded: its validated kernel table, kept loaded.
#[derive(Clone, Debug)]
pub struct CustomKernelLibrary {
    name: String,
    entries: Arc<[KernelEntry]>,
    object: Arc<LoadedObject>,
    services: *const DeviceServices,
    _os: AicpuOs,
}

// SAFETY: the entries hold code addresses of the object `object` keeps loaded, and
// `services` addresses the device's immutable, `Sync` table, which `_os` (a device handle)
// keeps alive as long as the library; `Arc<LoadedObject>` is Send + Sync.
unsafe impl Send for CustomKernelLibrary {}
// SAFETY: as for Send; nothing here is mutated after construction.
unsafe impl Sync for CustomKernelLibrary {}

impl CustomKernelLibrary {
    /// The library's name (from its descriptor).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The validated kernel table.
    pub fn entries(&self) -> &[KernelEntry] {
        &self.entries
    }

    /// The object the library was loaded from.
    pub fn object(&self) -> &Arc<LoadedObject> {
        &self.object
    }

    /// Runs kernel `index`'s device entry on the calling thread (an AICore worker) with the
    /// device's services table. Returns its `STATUS_*` (0 = ok), and a refusing kernel's
    /// reason in `error`; [`STATUS_INVALID_ARGUMENT`] for an index outside the table.
    ///
    /// The kernel reaches device memory only by translating the ranges in `call` through the
    /// table (bounds-checked): a bad address is a status, never a wild access.
    pub fn call_device(
        &self,
        index: usize,
        call: &DeviceCall,
        error: &mut KernelErrorRecord,
    ) -> i32 {
        let Some(f) = self.entries.get(index).and_then(|e| e.device) else {
            return STATUS_INVALID_ARGUMENT;
        };
        // SAFETY: `f` follows the `DeviceKernelFn` contract (checked present at load) and
        // `object` keeps its code loaded; `services` is the live table `_os` keeps alive;
        // `call` and `error` are valid references for the duration of the call.
        unsafe { f(self.services, call, error) }
    }

    /// Runs kernel `index`'s host reference over `call`. Returns its `STATUS_*`;
    /// [`STATUS_INVALID_ARGUMENT`] for an index outside the table.
    ///
    /// # Safety
    /// - every used `call.tensors[i]` addresses `len` initialised `f32`s, valid for reads and
    ///   writes for the duration of the call;
    /// - no two used tensors overlap, and nothing else accesses them during the call.
    pub unsafe fn call_host(&self, index: usize, call: &HostCall) -> i32 {
        let Some(f) = self.entries.get(index).and_then(|e| e.host) else {
            return STATUS_INVALID_ARGUMENT;
        };
        // SAFETY: `f` follows the `HostKernelFn` contract, its code kept loaded by `object`;
        // the buffers are valid and distinct (delegated to the caller).
        unsafe { f(call) }
    }
}

impl AicpuOs {
    /// Registers a custom kernel library for the AICore workers: saves `bytes` as
    /// `custom_kernels_<fp>_<dev>.so` in the process directory, loads it and reads and checks
    /// its descriptor and kernel table (`ferry_abi::kernel_lib`).
    ///
    /// # Errors
    /// [`OsError::Io`]; [`OsError::LoadFailed`] for a file the dynamic loader refuses
    /// (truncated, corrupt, not a shared object); [`OsError::MissingSymbol`] without the
    /// [`EXPORT_KERNEL_LIBRARY`] export; [`OsError::BadKernelTable`] for a descriptor or table
    /// of another ABI version or malformed.
    pub fn load_custom_kernels(&self, bytes: &[u8]) -> Result<CustomKernelLibrary, OsError> {
        let name =
            format!("custom_kernels_{:016x}_{}.so", fingerprint(bytes), self.device().ordinal());
        let path = write_atomic(&self.process_dir(), &name, bytes)?;
        // Not through the OS's object cache: a refused library must not stay loaded.
        let loaded = self.open_object(&path).map(Arc::new);
        // The loaded image keeps its inode; the file itself is not needed past the load.
        let _ = std::fs::remove_file(&path);
        let object = loaded?;
        let p = object.symbol(EXPORT_KERNEL_LIBRARY).ok_or_else(|| OsError::MissingSymbol {
            object: object.file_name(),
            symbol: EXPORT_KERNEL_LIBRARY.into(),
        })?;
        let bad = |error| OsError::BadKernelTable { object: object.file_name(), error };
        // SAFETY: the kernel-library contract fixes the export's signature.
        let export = unsafe { std::mem::transmute::<*const c_void, KernelLibraryFn>(p) };
        // SAFETY: the export takes no arguments and returns a pointer to static data.
        let desc = unsafe { export() };
        if desc.is_null() {
            return Err(bad(KernelTableError::NullDescriptor));
        }
        // SAFETY: a non-null descriptor of any version starts with `magic: u64` and
        // `abi_version: u32` (the versioning rule of `ferry_abi::kernel_lib`); only those
        // 12 bytes are read before the version and the sizes are checked.
        let (magic, version) = unsafe {
            let base = desc.cast::<u8>();
            (base.cast::<u64>().read_unaligned(), base.add(8).cast::<u32>().read_unaligned())
        };
        if magic != KERNEL_LIB_MAGIC {
            return Err(bad(KernelTableError::BadMagic { found: magic }));
        }
        if version != KERNEL_LIB_ABI_VERSION {
            return Err(bad(KernelTableError::AbiVersion {
                found: version,
                expected: KERNEL_LIB_ABI_VERSION,
            }));
        }
        // SAFETY: same magic and version as this crate: the descriptor is this version's record.
        let d = unsafe { desc.read_unaligned() };
        check_header(
            d.magic,
            d.abi_version,
            d.desc_bytes,
            d.entry_bytes,
            d.kernel_count,
            d.kernels.is_null(),
        )
        .map_err(bad)?;
        let lib_name = name_str(&d.name).unwrap_or("unnamed").to_owned();
        // SAFETY: `kernels` is non-null and, by this version's contract, addresses
        // `kernel_count` entries of static data; the count is bounded by `check_header`.
        let entries: Arc<[KernelEntry]> =
            unsafe { std::slice::from_raw_parts(d.kernels, d.kernel_count as usize) }.into();
        validate_entries(&entries).map_err(bad)?;
        Ok(CustomKernelLibrary {
            name: lib_name,
            entries,
            object,
            services: self.services(),
            _os: self.clone(),
        })
    }
}

const _: () = assert!(std::mem::size_of::<KernelLibraryDesc>() == 64);

// The trait matrix the `unsafe impl`s above promise, checked at compile time.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<CustomKernelLibrary>();
};
