//! A kernel's failure in the user's terms: the kernel's name and library, what it said (for a
//! loaded kernel, its `KernelError`'s own text), and the workload line of the task, instead of
//! the device's numbers (`task 3 (kernel 256)`).
use ferry_runtime::host::KernelRegistry;
use ferry_runtime::{DeviceFault, KernelFault, RunError};
use ferry_workload::Workload;

/// A kernel that failed on its core, named.
#[derive(Debug)]
pub(crate) struct KernelFailed {
    /// Task sequence number in the run.
    pub(crate) task: u64,
    /// `file:line:col` of the task's graph entry, when the graph came from a workload file.
    pub(crate) at: Option<String>,
    /// Kernel name (the id when the registry does not know it).
    pub(crate) name: String,
    /// The loaded library that defines it (`None` for a built-in).
    pub(crate) library: Option<String>,
    /// Kernel id.
    pub(crate) id: u32,
    /// What the device reported.
    pub(crate) fault: KernelFault,
}

impl std::fmt::Display for KernelFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(at) = &self.at {
            write!(f, "{at}: ")?;
        }
        write!(f, "task {}: kernel `{}`", self.task, self.name)?;
        if let Some(l) = &self.library {
            write!(f, " (library `{l}`, id {})", self.id)?;
        }
        write!(f, " failed on its core: {}", self.fault.detail())?;
        if matches!(self.fault, KernelFault::Panicked { .. }) && self.library.is_some() {
            write!(f, " (FERRY_LOG=info prints its panic message from the device log)")?;
        }
        Ok(())
    }
}

impl std::error::Error for KernelFailed {}

/// `e` with a kernel's failure on its core named (see the module docs); any other error as it
/// was.
pub(crate) fn name_kernel_fault(
    e: anyhow::Error,
    kernels: &KernelRegistry,
    workload: Option<&Workload>,
) -> anyhow::Error {
    // Directly, or under a repeat's `run N of runs 0..M` (the kernel's failure says more).
    let Some(RunError::Fault(DeviceFault::Kernel { task, kernel, fault })) =
        e.chain().find_map(|c| c.downcast_ref::<RunError>())
    else {
        return e;
    };
    let info = kernels.info(*kernel);
    anyhow::Error::new(KernelFailed {
        task: *task,
        at: workload.and_then(|w| w.task_location(*task)),
        name: info.as_ref().map_or_else(|| format!("id {kernel}"), |k| k.name.clone()),
        library: info.and_then(|k| k.library),
        id: *kernel,
        fault: *fault,
    })
}
