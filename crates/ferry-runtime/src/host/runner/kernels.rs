//! [`DeviceRunner::load_kernels`]: custom kernel libraries on a runner.
use super::super::{KernelLoadError, KernelRegistry, RegisteredKernel, MAX_KERNEL_LIBRARY_BYTES};
use super::{DeviceRunner, RunnerDevice};
use crate::device::image::as_bytes;
use ferry_backend::BackendDevice;
use std::path::Path;
use std::sync::Arc;

impl<P: RunnerDevice> DeviceRunner<P> {
    /// The runner's kernels: the built-ins and every loaded library's.
    pub fn kernels(&self) -> &KernelRegistry<P::CustomKernels> {
        &self.kernels
    }

    /// A shared handle on [`kernels`](Self::kernels), for callers that hold it across mutable
    /// uses of the runner (verifying each run of [`repeat`](Self::repeat) against host
    /// references). A library loaded later is not in it: loading replaces the runner's registry.
    pub fn kernel_registry(&self) -> Arc<KernelRegistry<P::CustomKernels>> {
        self.kernels.clone()
    }

    /// Loads a custom kernel library (a cdylib built against `ferry-kernel-abi`; `name` labels
    /// it in errors) through the AICPU OS's loader, the path the built-in kernel library takes
    /// (`ferry_launch::loader::Loader::load_custom_kernels`), adds its kernels to the registry
    /// and uploads the loaded kernels' spec table, which the next runs' images name for the
    /// AICPU's validation. Returns the library's kernels with their ids.
    ///
    /// All or nothing: on error the registry, the device table and the runner are as before.
    ///
    /// # Errors
    /// [`KernelLoadError`]: the loader's typed refusal (truncated or corrupt file, missing
    /// export, another ABI version, duplicate names within the library, malformed table), a
    /// name a built-in or an earlier library has, too many kernels, a run in flight, or a
    /// device failure uploading the table.
    pub fn load_kernels(
        &mut self,
        name: &str,
        bytes: &[u8],
    ) -> Result<Vec<RegisteredKernel>, KernelLoadError> {
        if self.is_busy() {
            return Err(KernelLoadError::Busy);
        }
        let lib = match &self.full {
            Some(full) => full.loader.load_custom_kernels(name, bytes)?,
            None => ferry_launch::loader::load_custom_kernels(&self.chip, name, bytes)?,
        };
        let mut registry = (*self.kernels).clone();
        let added = registry.add(lib)?;
        let table: Vec<u8> =
            registry.device_table().iter().flat_map(|r| as_bytes(r).to_vec()).collect();
        // Through the backend seam: a failed upload is a `BackendError` naming the operation.
        let device = &self.device;
        let ptr = BackendDevice::malloc(device, table.len() as u64)?;
        if let Err(e) = BackendDevice::copy_htod(device, &table, ptr) {
            let _ = BackendDevice::free(device, ptr);
            return Err(e.into());
        }
        let old = std::mem::replace(&mut self.kernel_table, (ptr, registry.loaded_count()));
        if !old.0.is_null() {
            // No run is prepared or in flight (checked above), so no image names the old table;
            // the next prepare publishes a header naming the new one (a changed route prefix).
            let _ = BackendDevice::free(device, old.0);
        }
        self.kernels = Arc::new(registry);
        Ok(added)
    }

    /// [`load_kernels`](Self::load_kernels) from a file: a regular file (a FIFO or a device is
    /// refused before any read) of at most [`MAX_KERNEL_LIBRARY_BYTES`], a bound the read
    /// itself enforces.
    ///
    /// # Errors
    /// [`KernelLoadError::Io`], [`KernelLoadError::File`], [`KernelLoadError::TooLarge`], and
    /// those of `load_kernels`.
    pub fn load_kernels_file(
        &mut self,
        path: &Path,
    ) -> Result<Vec<RegisteredKernel>, KernelLoadError> {
        let data = match ferry_fs::read_input(path, MAX_KERNEL_LIBRARY_BYTES) {
            Ok(d) => d,
            Err(ferry_fs::FsError::TooLarge { size, .. }) => {
                let bytes = size.unwrap_or(MAX_KERNEL_LIBRARY_BYTES + 1);
                return Err(KernelLoadError::TooLarge { path: path.into(), bytes });
            }
            Err(ferry_fs::FsError::Io { source, .. }) => {
                return Err(KernelLoadError::Io { path: path.into(), source })
            }
            Err(e) => return Err(KernelLoadError::File(e)),
        };
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        self.load_kernels(name.as_deref().unwrap_or("kernel library"), &data)
    }
}
