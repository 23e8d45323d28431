//! Orchestration libraries: a user's orchestration cdylib (`ferry_abi::orch_lib`) loaded on
//! the host, for the host-built variant, and checked before any of its functions is
//! registered as a callable.
//!
//! [`AicpuOs::load_orch_library`] saves the bytes into the process directory under a
//! fingerprinted name, loads them with the OS's dynamic loader, resolves
//! [`EXPORT_ORCH_LIBRARY`] and reads the descriptor in the order `ferry_abi::orch_lib` fixes:
//! magic and version first, then the record sizes, then the function count (bounded before the
//! table is copied), then each entry. A refused library is unloaded when its last reference
//! drops. The device-orchestrated variant loads the same bytes again on the AICPU, through the
//! AICPU program's register-callable entry.
//!
//! # Safety
//!
//! As for every program: loading runs the object's initialisers and calling an entry runs
//! foreign code, through the signatures `ferry_abi::orch_lib` fixes.
use crate::aicpu_os::{write_atomic, AicpuOs, LoadedObject, OsError};
use crate::sync::Arc;
use ferry_abi::orch_lib::{
    check_orch_header, function_name, validate_functions, OrchContext, OrchFunctionEntry,
    OrchLibraryDesc, OrchLibraryFn, OrchTableError, EXPORT_ORCH_LIBRARY, ORCH_LIB_ABI_VERSION,
    ORCH_LIB_MAGIC,
};
use ferry_abi::services::{fingerprint, STATUS_INVALID_ARGUMENT};
use std::ffi::c_void;

/// An orchestration library the OS loaded on the host: its validated function table, kept
/// loaded.
#[derive(Clone, Debug)]
pub struct OrchLibrary {
    name: String,
    entries: Arc<[OrchFunctionEntry]>,
    object: Arc<LoadedObject>,
}

// SAFETY: the entries hold code addresses of the object `object` keeps loaded; nothing is
// mutated after construction; `Arc<LoadedObject>` is Send + Sync.
unsafe impl Send for OrchLibrary {}
// SAFETY: as for Send.
unsafe impl Sync for OrchLibrary {}

impl OrchLibrary {
    /// The library's name (from its descriptor).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The validated function table.
    pub fn entries(&self) -> &[OrchFunctionEntry] {
        &self.entries
    }

    /// The index of the function named `name`.
    pub fn function(&self, name: &str) -> Option<usize> {
        self.entries.iter().position(|e| function_name(&e.name) == Some(name))
    }

    /// Runs function `index` on the calling thread with `ctx`. Returns its status;
    /// [`STATUS_INVALID_ARGUMENT`] for an index outside the table.
    ///
    /// # Safety
    /// `ctx` and the tables it points at are valid for the call.
    pub unsafe fn call(&self, index: usize, ctx: &OrchContext) -> i32 {
        let Some(f) = self.entries.get(index).and_then(|e| e.entry) else {
            return STATUS_INVALID_ARGUMENT;
        };
        // SAFETY: `f` follows the `OrchEntryFn` contract (checked present at load), its code
        // kept loaded by `object`; `ctx` is valid (caller's contract).
        unsafe { f(ctx) }
    }

    /// The object the library was loaded from.
    pub fn object(&self) -> &Arc<LoadedObject> {
        &self.object
    }
}

impl AicpuOs {
    /// Loads an orchestration library on the host: saves `bytes` as
    /// `orch_library_<fp>_<dev>.so` in the process directory, loads it and reads and checks
    /// its descriptor and function table (`ferry_abi::orch_lib`).
    ///
    /// # Errors
    /// [`OsError::Io`]; [`OsError::LoadFailed`] for a file the dynamic loader refuses;
    /// [`OsError::MissingSymbol`] without the [`EXPORT_ORCH_LIBRARY`] export;
    /// [`OsError::BadOrchTable`] for a descriptor or table of another ABI version or malformed.
    pub fn load_orch_library(&self, bytes: &[u8]) -> Result<OrchLibrary, OsError> {
        let name =
            format!("orch_library_{:016x}_{}.so", fingerprint(bytes), self.device().ordinal());
        let path = write_atomic(&self.process_dir(), &name, bytes)?;
        let loaded = self.open_object(&path).map(Arc::new);
        let _ = std::fs::remove_file(&path);
        let object = loaded?;
        let p = object.symbol(EXPORT_ORCH_LIBRARY).ok_or_else(|| OsError::MissingSymbol {
            object: object.file_name(),
            symbol: EXPORT_ORCH_LIBRARY.into(),
        })?;
        let bad = |error| OsError::BadOrchTable { object: object.file_name(), error };
        // SAFETY: the orchestration-library contract fixes the export's signature.
        let export = unsafe { std::mem::transmute::<*const c_void, OrchLibraryFn>(p) };
        // SAFETY: the export takes no arguments and returns a pointer to static data.
        let desc = unsafe { export() };
        if desc.is_null() {
            return Err(bad(OrchTableError::NullDescriptor));
        }
        // SAFETY: a non-null descriptor of any version starts with `magic: u64` and
        // `abi_version: u32`; only those 12 bytes are read before they are checked.
        let (magic, version) = unsafe {
            let base = desc.cast::<u8>();
            (base.cast::<u64>().read_unaligned(), base.add(8).cast::<u32>().read_unaligned())
        };
        if magic != ORCH_LIB_MAGIC {
            return Err(bad(OrchTableError::BadMagic { found: magic }));
        }
        if version != ORCH_LIB_ABI_VERSION {
            return Err(bad(OrchTableError::AbiVersion {
                found: version,
                expected: ORCH_LIB_ABI_VERSION,
            }));
        }
        // SAFETY: same magic and version as this crate: the descriptor is this version's record.
        let d: OrchLibraryDesc = unsafe { desc.read_unaligned() };
        check_orch_header(&d).map_err(bad)?;
        let lib_name = ferry_abi::kernel_lib::name_str(&d.name).unwrap_or("unnamed").to_owned();
        // SAFETY: `functions` is non-null and addresses `function_count` entries of static
        // data by this version's contract; the count is bounded by `check_orch_header`.
        let entries: Arc<[OrchFunctionEntry]> =
            unsafe { std::slice::from_raw_parts(d.functions, d.function_count as usize) }.into();
        validate_functions(&entries).map_err(bad)?;
        Ok(OrchLibrary { name: lib_name, entries, object })
    }
}

// The trait matrix the `unsafe impl`s above promise, checked at compile time.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<OrchLibrary>();
};
