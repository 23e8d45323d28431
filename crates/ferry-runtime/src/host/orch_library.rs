//! Orchestration libraries on a runner: a user's cdylib (`ferry_abi::orch_lib`) loaded once
//! and its functions registered as callables ([`Callable::library`]).
//!
//! Device-orchestrated, the callable's registration ships the library's bytes to the AICPU
//! program, which loads them through the AICPU OS and calls the function's export
//! (`ferry_orch_fn_<name>`) on the orchestrator thread while the schedulers run the graph.
//! Host-built, the runner calls the same function from the copy loaded on the host while it
//! prepares the run, and uploads the validated graph. Both serve the function the same table
//! (`crate::device::lib_api`), so both build the same graph from the same tensors.
use super::config::{Callable, Source, Variant};
use super::{DeviceRunner, RunnerDevice};
use ferry_backend::{HostOrchLibrary, OrchLibraryLoader, ProgramError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The largest orchestration library file ferry reads.
pub const MAX_ORCH_LIBRARY_BYTES: u64 = 256 << 20;

/// A loaded orchestration library: its bytes (what the AICPU loads) and its host copy (the
/// backend's [`HostOrchLibrary`], behind a pointer: it is called once per host-built prepare,
/// never on the launch path, and keeps [`Callable`] free of the backend's type).
#[derive(Debug)]
pub struct LoadedOrchLibrary {
    bytes: Vec<u8>,
    lib: Box<dyn HostOrchLibrary>,
}

impl LoadedOrchLibrary {
    /// The library's name (from its descriptor).
    pub fn name(&self) -> &str {
        self.lib.name()
    }

    /// Its functions' names, in table order.
    pub fn functions(&self) -> Vec<String> {
        self.lib
            .entries()
            .iter()
            .filter_map(|e| ferry_abi::orch_lib::function_name(&e.name).map(str::to_owned))
            .collect()
    }

    /// The index of function `name` in the library's table.
    pub fn function_index(&self, name: &str) -> Option<usize> {
        self.lib.function(name)
    }

    /// Runs function `index` on the calling thread (on the host) over `orch`, serving it
    /// the library table: how a host-built graph is built, and how a host reference of the
    /// graph runs it.
    ///
    /// # Errors
    /// The first call ferry refused, or the function's own failure
    /// ([`SubmitError::Function`](crate::SubmitError::Function)).
    pub fn run_on(
        &self,
        index: usize,
        orch: &mut dyn crate::Orchestrate,
    ) -> Result<(), crate::SubmitError> {
        use crate::device::ffi::{orch_context, serve_tables};
        let (status, last, next) = serve_tables(orch, |api, lib| {
            let ctx = orch_context(std::ptr::null(), 0, 0, api, lib);
            // SAFETY: `ctx` and both tables it points at live until the call returns; the
            // library's host copy stays loaded while `self` is.
            unsafe { self.lib.call(index, &ctx) }
        });
        match crate::device::lib_api::function_error(status, last, next) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub(super) fn host(&self) -> &dyn HostOrchLibrary {
        &*self.lib
    }
}

/// Why an orchestration library or one of its functions could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OrchLoadError {
    /// The loader refused the library (not a shared object, no descriptor, another ABI
    /// version, a malformed table).
    #[error("orchestration library {name} refused")]
    Refused {
        /// The file's name.
        name: String,
        /// Why.
        #[source]
        source: ProgramError,
    },
    /// The file could not be read.
    #[error("reading {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The path is not a regular file, or was refused.
    #[error(transparent)]
    File(ferry_fs::FsError),
    /// The file is larger than [`MAX_ORCH_LIBRARY_BYTES`].
    #[error("{} is {bytes} bytes, more than the {MAX_ORCH_LIBRARY_BYTES} an orchestration library may have", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// The library has no function of this name.
    #[error("orchestration library `{library}` has no function `{function}` (it has: {})", known.join(", "))]
    UnknownFunction {
        /// The library.
        library: String,
        /// The name asked for.
        function: String,
        /// The names it has.
        known: Vec<String>,
    },
}

impl<P: RunnerDevice + OrchLibraryLoader> DeviceRunner<P> {
    /// Loads an orchestration library (`name` labels it in errors) on the host and checks its
    /// descriptor and function table; its functions become callables with
    /// [`Callable::library`].
    ///
    /// # Errors
    /// [`OrchLoadError::Refused`] with the loader's typed reason.
    pub fn load_orchestration(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Result<Arc<LoadedOrchLibrary>, OrchLoadError> {
        let lib = self
            .program_device()
            .load_orch_library(bytes)
            .map_err(|source| OrchLoadError::Refused { name: name.into(), source })?;
        Ok(Arc::new(LoadedOrchLibrary { bytes: bytes.to_vec(), lib: Box::new(lib) }))
    }

    /// [`load_orchestration`](Self::load_orchestration) from a file: a regular file of at
    /// most [`MAX_ORCH_LIBRARY_BYTES`], a bound the read itself enforces.
    ///
    /// # Errors
    /// [`OrchLoadError::Io`], [`OrchLoadError::File`], [`OrchLoadError::TooLarge`], and those
    /// of `load_orchestration`.
    pub fn load_orchestration_file(
        &self,
        path: &Path,
    ) -> Result<Arc<LoadedOrchLibrary>, OrchLoadError> {
        let data = match ferry_fs::read_input(path, MAX_ORCH_LIBRARY_BYTES) {
            Ok(d) => d,
            Err(ferry_fs::FsError::TooLarge { size, .. }) => {
                let bytes = size.unwrap_or(MAX_ORCH_LIBRARY_BYTES + 1);
                return Err(OrchLoadError::TooLarge { path: path.into(), bytes });
            }
            Err(ferry_fs::FsError::Io { source, .. }) => {
                return Err(OrchLoadError::Io { path: path.into(), source })
            }
            Err(e) => return Err(OrchLoadError::File(e)),
        };
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        self.load_orchestration(name.as_deref().unwrap_or("orchestration library"), &data)
    }
}

impl Callable {
    /// A callable whose graph is built by function `function` of `library`, on the AICPU
    /// (device-orchestrated) or on the host (host-built).
    ///
    /// # Errors
    /// [`OrchLoadError::UnknownFunction`].
    pub fn library(
        library: &Arc<LoadedOrchLibrary>,
        function: &str,
        variant: Variant,
    ) -> Result<Callable, OrchLoadError> {
        let index =
            library.host().function(function).ok_or_else(|| OrchLoadError::UnknownFunction {
                library: library.name().into(),
                function: function.into(),
                known: library.functions(),
            })?;
        Ok(Callable {
            name: function.into(),
            variant,
            source: Source::Library { library: library.clone(), index },
            object: None,
        })
    }

    /// Builds the callable's graph into `gb` on the host (callable `id`): its orchestration
    /// function, its prebuilt tasks, or its library function.
    ///
    /// # Errors
    /// The function's fault (named by [`name_fault`](Self::name_fault)), or the prebuilt
    /// graph's refusal.
    pub(super) fn build_graph(
        &self,
        gb: &mut crate::host::graph::GraphBuilder<'_>,
    ) -> Result<(), crate::RunError> {
        match &self.source {
            Source::Orch(f) => f(gb).map_err(|e| crate::RunError::Fault(e.into()))?,
            Source::Prebuilt(tasks) => gb.record_prebuilt(tasks)?,
            Source::Library { library, index } => library
                .run_on(*index, gb)
                .map_err(|e| self.name_fault(crate::DeviceFault::Submit(e)))?,
        }
        Ok(())
    }

    /// `fault` as the run's error: for a library callable's orchestration fault,
    /// [`RunError::Orchestration`](crate::RunError::Orchestration) naming the library and
    /// the function.
    pub(super) fn name_fault(&self, fault: crate::DeviceFault) -> crate::RunError {
        match (&self.source, fault) {
            (Source::Library { library, .. }, f @ crate::DeviceFault::Submit(_)) => {
                crate::RunError::Orchestration {
                    library: library.name().into(),
                    function: self.name.clone(),
                    fault: f,
                }
            }
            (_, f) => crate::RunError::Fault(f),
        }
    }

    /// The library and function of a [`library`](Self::library) callable.
    pub fn library_function(&self) -> Option<(&str, &str)> {
        match &self.source {
            Source::Library { library, .. } => Some((library.name(), &self.name)),
            _ => None,
        }
    }
}
