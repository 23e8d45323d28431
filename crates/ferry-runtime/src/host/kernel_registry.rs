//! The kernel registry: built-in and loaded kernels under one name → spec lookup.
//!
//! A runner starts with the built-in kernels (`device::kernels::KERNELS`, ids
//! `0..KERNEL_COUNT`). [`DeviceRunner::load_kernels`](super::DeviceRunner::load_kernels) loads a
//! custom kernel library (a cdylib built against `ferry-kernel-abi`) through the AICPU OS's
//! loader and adds its kernels here with ids from `CUSTOM_KERNEL_BASE` up, in load order;
//! a name already taken (by a built-in or an earlier library) refuses the whole library, and
//! nothing is added. [`KernelRegistry::lookup`] is the narrow seam a workload resolves kernel names
//! through: name → id, tensor-count range, scalar dtypes, most blocks.
//!
//! The registry also holds what the device needs: [`KernelRegistry::device_table`] (the
//! records the runner uploads for the AICPU's validation) and, as a
//! [`CustomDispatch`], the loaded libraries' device entries the AICore executor calls.
use super::sim_backend::SimCustomKernels;
use crate::device::custom::{CustomDispatch, CustomKernels, KernelSpecRecord};
use crate::device::kernels::{CoreKind, KERNELS};
use ferry_abi::kernel_lib::{
    is_custom_kernel, DeviceCall, HostCall, HostTensor, KernelErrorRecord, CORE_AIC, CORE_AIV,
    CUSTOM_KERNEL_BASE, MAX_CALL_SCALARS, MAX_CALL_TENSORS, MAX_CUSTOM_KERNELS,
};
use ferry_abi::records::DType;
use ferry_backend::CustomKernelTable;
use ferry_launch::loader::LoadError;
use std::collections::HashMap;
use std::path::PathBuf;

/// Largest kernel-library file `load_kernels_file` reads (checked before reading it).
pub const MAX_KERNEL_LIBRARY_BYTES: u64 = 256 << 20;

/// What a workload (or any caller naming kernels) needs to know about one kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisteredKernel {
    /// The id tasks carry.
    pub id: u32,
    /// The name.
    pub name: String,
    /// Which core kind runs it.
    pub core: CoreKind,
    /// Accepted tensor counts (inclusive).
    pub tensors: (u32, u32),
    /// The dtype of each required scalar, in order.
    pub scalar_dtypes: Vec<DType>,
    /// Most SPMD blocks.
    pub max_blocks: u32,
    /// The library it was loaded from (`None` for a built-in).
    pub library: Option<String>,
    /// A view kernel: its scalars are the layout words of its tensors' views
    /// (`ferry_abi::layout`), which a workload fills in.
    pub views: bool,
}

/// Why a kernel library was not added. Nothing of it was added then, and the runner is as it
/// was.
#[derive(Debug, thiserror::Error)]
pub enum KernelLoadError {
    /// The loader refused the library (truncated or corrupt file, missing export, another ABI
    /// version, duplicate names inside it, malformed table).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// One of its kernels has the name of a kernel the runner already has.
    #[error("kernel library `{library}`: kernel `{name}` is already defined by {existing}")]
    DuplicateName {
        /// The library.
        library: String,
        /// The name.
        name: String,
        /// Who has it (`built-in` or `library <name>`).
        existing: String,
    },
    /// The runner's loaded-kernel id range would overflow.
    #[error(
        "kernel library `{library}`: {adding} kernels on top of {loaded} loaded exceed the \
         {MAX_CUSTOM_KERNELS} a runner takes"
    )]
    TooMany {
        /// The library.
        library: String,
        /// Kernels already loaded.
        loaded: u32,
        /// Kernels it has.
        adding: u32,
    },
    /// The file could not be read.
    #[error("kernel library {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file was refused before it was read (a FIFO, a device, a directory).
    #[error("kernel library: {0}")]
    File(#[source] ferry_fs::FsError),
    /// The file is larger than [`MAX_KERNEL_LIBRARY_BYTES`] (checked before it is read, and
    /// by the read).
    #[error("kernel library {path} is {bytes} bytes, more than the {MAX_KERNEL_LIBRARY_BYTES} ferry loads")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// A run is prepared or in flight; libraries are loaded between runs (a prepared run's
    /// image names the kernel table it was prepared with).
    #[error("a run is prepared or in flight on this runner")]
    Busy,
    /// Uploading the kernel table to the device failed (the backend's error is the source).
    #[error(transparent)]
    Device(#[from] ferry_backend::BackendError),
}

/// Why a host reference did not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostRefError {
    /// No loaded kernel has this id (built-in kernels have no host reference here).
    #[error("kernel {kernel} is not a loaded kernel")]
    NotLoaded {
        /// The id.
        kernel: u32,
    },
    /// More arguments than a call carries.
    #[error("kernel {kernel}: {tensors} tensors and {scalars} scalars exceed a call's 6 and 4")]
    TooManyArgs {
        /// The id.
        kernel: u32,
        /// Tensors given.
        tensors: usize,
        /// Scalars given.
        scalars: usize,
    },
    /// The reference returned a non-zero status.
    #[error("host reference of kernel {kernel} returned status {status} ({})", ferry_abi::services::status_name(*status))]
    Status {
        /// The id.
        kernel: u32,
        /// Its `STATUS_*`.
        status: i32,
    },
}

#[derive(Clone, Debug)]
struct Loaded {
    info: RegisteredKernel,
    lib: usize,
    entry: usize,
}

/// Built-in and loaded kernels (see the module docs), the loaded ones in libraries of type `K`
/// (the backend's [`CustomKernelTable`]; by default the runner's, [`SimCustomKernels`]).
/// Generic rather than behind a pointer: the AICore executor calls a loaded kernel through
/// it on every execution ([`CustomDispatch`]).
#[derive(Clone, Debug)]
pub struct KernelRegistry<K: CustomKernelTable = SimCustomKernels> {
    libs: Vec<K>,
    loaded: Vec<Loaded>,
    by_name: HashMap<String, u32>,
}

impl<K: CustomKernelTable> Default for KernelRegistry<K> {
    fn default() -> Self {
        KernelRegistry::builtins()
    }
}

fn builtin_info(id: u32) -> Option<RegisteredKernel> {
    let s = KERNELS.get(id as usize)?;
    Some(RegisteredKernel {
        id: s.id,
        name: s.name.into(),
        core: s.core,
        tensors: s.tensors,
        scalar_dtypes: s.scalar_dtypes.to_vec(),
        max_blocks: s.max_blocks,
        library: None,
        views: s.views,
    })
}

impl KernelRegistry {
    /// The built-in kernels only, in a registry of the runner's default library type.
    pub fn new() -> KernelRegistry {
        KernelRegistry::builtins()
    }
}

impl<K: CustomKernelTable> KernelRegistry<K> {
    /// The built-in kernels only.
    pub fn builtins() -> KernelRegistry<K> {
        let by_name = KERNELS.iter().map(|k| (k.name.to_owned(), k.id)).collect();
        KernelRegistry { libs: Vec::new(), loaded: Vec::new(), by_name }
    }

    /// Adds a library's kernels (ids continue after the loaded ones), all or none.
    ///
    /// # Errors
    /// [`KernelLoadError::DuplicateName`], [`KernelLoadError::TooMany`].
    pub fn add(&mut self, lib: K) -> Result<Vec<RegisteredKernel>, KernelLoadError> {
        let library = lib.name().to_owned();
        let (loaded, adding) = (self.loaded.len() as u32, lib.entries().len() as u32);
        if loaded + adding > MAX_CUSTOM_KERNELS {
            return Err(KernelLoadError::TooMany { library, loaded, adding });
        }
        let mut infos = Vec::with_capacity(lib.entries().len());
        for (i, e) in lib.entries().iter().enumerate() {
            // Validated by the loader: a well-formed name, counts in range.
            let name = e.name().unwrap_or_default().to_owned();
            if let Some(&id) = self.by_name.get(&name) {
                let existing = match self.info(id).and_then(|k| k.library) {
                    Some(l) => format!("library `{l}`"),
                    None => "built-in".into(),
                };
                return Err(KernelLoadError::DuplicateName { library, name, existing });
            }
            infos.push(RegisteredKernel {
                id: CUSTOM_KERNEL_BASE + loaded + i as u32,
                name,
                core: if e.core == CORE_AIC { CoreKind::Aic } else { CoreKind::Aiv },
                tensors: (e.min_tensors, e.max_tensors),
                scalar_dtypes: e.dtypes().collect(),
                max_blocks: e.max_blocks,
                library: Some(library.clone()),
                views: e.is_view_kernel(),
            });
        }
        let lib_index = self.libs.len();
        self.libs.push(lib);
        for (entry, info) in infos.iter().enumerate() {
            self.by_name.insert(info.name.clone(), info.id);
            self.loaded.push(Loaded { info: info.clone(), lib: lib_index, entry });
        }
        Ok(infos)
    }

    /// Kernel `id` (built-in or loaded).
    pub fn info(&self, id: u32) -> Option<RegisteredKernel> {
        if is_custom_kernel(id) {
            return self.loaded.get((id - CUSTOM_KERNEL_BASE) as usize).map(|l| l.info.clone());
        }
        builtin_info(id)
    }

    /// Every kernel: built-ins first, then loaded ones in id order.
    pub fn kernels(&self) -> Vec<RegisteredKernel> {
        (0..KERNELS.len() as u32)
            .filter_map(builtin_info)
            .chain(self.loaded.iter().map(|l| l.info.clone()))
            .collect()
    }

    /// Loaded kernels.
    pub fn loaded_count(&self) -> u32 {
        self.loaded.len() as u32
    }

    /// The loaded kernels' spec records, as the runner uploads them for the AICPU.
    pub fn device_table(&self) -> Vec<KernelSpecRecord> {
        self.loaded
            .iter()
            .map(|l| {
                let k = &l.info;
                let mut dtypes = [0u8; 4];
                for (d, t) in dtypes.iter_mut().zip(&k.scalar_dtypes) {
                    *d = *t as u8;
                }
                KernelSpecRecord {
                    id: k.id,
                    core: if k.core == CoreKind::Aic { CORE_AIC } else { CORE_AIV },
                    min_tensors: k.tensors.0,
                    max_tensors: k.tensors.1,
                    scalar_count: k.scalar_dtypes.len() as u32,
                    max_blocks: k.max_blocks,
                    scalar_dtypes: u32::from_le_bytes(dtypes),
                    flags: if k.views { crate::device::custom::SPEC_VIEW } else { 0 },
                }
            })
            .collect()
    }

    /// The loaded kernels' shapes, for host-built graphs.
    pub fn custom_kernels(&self) -> CustomKernels {
        CustomKernels::from_records(self.device_table())
    }

    /// Runs loaded kernel `id`'s host reference over `tensors` (each a distinct buffer, in
    /// argument order) and `scalars`: what the device computes for one task, on the host.
    ///
    /// # Errors
    /// [`HostRefError`].
    pub fn host_reference(
        &self,
        id: u32,
        tensors: &mut [Vec<f32>],
        scalars: &[u64],
    ) -> Result<(), HostRefError> {
        let l = is_custom_kernel(id)
            .then(|| self.loaded.get((id - CUSTOM_KERNEL_BASE) as usize))
            .flatten()
            .ok_or(HostRefError::NotLoaded { kernel: id })?;
        if tensors.len() > MAX_CALL_TENSORS || scalars.len() > MAX_CALL_SCALARS {
            return Err(HostRefError::TooManyArgs {
                kernel: id,
                tensors: tensors.len(),
                scalars: scalars.len(),
            });
        }
        let mut call = HostCall {
            tensors: [HostTensor { ptr: std::ptr::null_mut(), len: 0 }; MAX_CALL_TENSORS],
            scalars: [0; MAX_CALL_SCALARS],
            n_tensors: tensors.len() as u32,
            n_scalars: scalars.len() as u32,
        };
        for (d, t) in call.tensors.iter_mut().zip(tensors.iter_mut()) {
            *d = HostTensor { ptr: t.as_mut_ptr(), len: t.len() as u64 };
        }
        call.scalars[..scalars.len()].copy_from_slice(scalars);
        // SAFETY: every used tensor is a distinct `Vec` (exclusively borrowed for the call) of
        // `len` initialised f32s.
        let status = unsafe { self.libs[l.lib].call_host(l.entry, &call) };
        if status != ferry_abi::services::STATUS_OK {
            return Err(HostRefError::Status { kernel: id, status });
        }
        Ok(())
    }

    /// [`host_reference`](Self::host_reference) over views that may alias, as `f32` bits (the
    /// form a workload's host-side replay keeps its tensors in): each view is copied into its
    /// own buffer, the reference runs, and only the elements it changed are stored back, so an
    /// input view that overlaps an output view never undoes the output.
    ///
    /// # Errors
    /// [`HostRefError`].
    pub fn host_reference_bits(
        &self,
        id: u32,
        tensors: &[&[std::sync::atomic::AtomicU32]],
        scalars: &[u64],
    ) -> Result<(), HostRefError> {
        use std::sync::atomic::Ordering;
        // Relaxed: the caller owns the views for the call; nothing else touches them meanwhile.
        let load = |t: &[std::sync::atomic::AtomicU32]| -> Vec<f32> {
            t.iter().map(|b| f32::from_bits(b.load(Ordering::Relaxed))).collect()
        };
        let before: Vec<Vec<f32>> = tensors.iter().map(|t| load(t)).collect();
        let mut bufs = before.clone();
        self.host_reference(id, &mut bufs, scalars)?;
        for ((t, old), new) in tensors.iter().zip(&before).zip(&bufs) {
            for ((cell, o), n) in t.iter().zip(old).zip(new) {
                if o.to_bits() != n.to_bits() {
                    // Relaxed: as above.
                    cell.store(n.to_bits(), Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }
}

impl<K: CustomKernelTable> KernelRegistry<K> {
    /// The kernel called `name` (built-in or loaded), if any. Workload files resolve names
    /// through this (`ferry_workload::KernelCatalog` is implemented over it).
    pub fn lookup(&self, name: &str) -> Option<RegisteredKernel> {
        self.by_name.get(name).and_then(|&id| self.info(id))
    }
}

impl<K: CustomKernelTable> CustomDispatch for KernelRegistry<K> {
    fn call(&self, id: u32, call: &DeviceCall, error: &mut KernelErrorRecord) -> Option<i32> {
        if !is_custom_kernel(id) {
            return None;
        }
        let l = self.loaded.get((id - CUSTOM_KERNEL_BASE) as usize)?;
        Some(self.libs[l.lib].call_device(l.entry, call, error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_found_by_name_and_id() {
        let r = KernelRegistry::new();
        let add = r.lookup("add").unwrap();
        assert_eq!((add.id, add.tensors, add.library), (0, (3, 3), None));
        assert_eq!(r.lookup("attn_partial").unwrap().scalar_dtypes.len(), 3);
        assert!(r.lookup("saxpy").is_none());
        assert_eq!(r.kernels().len(), KERNELS.len());
        assert!(r.device_table().is_empty());
        assert_eq!(r.host_reference(0, &mut [], &[]), Err(HostRefError::NotLoaded { kernel: 0 }));
        assert_eq!(
            r.host_reference(CUSTOM_KERNEL_BASE, &mut [], &[]),
            Err(HostRefError::NotLoaded { kernel: CUSTOM_KERNEL_BASE })
        );
    }
}
