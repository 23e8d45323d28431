//! The one seam through which workload files name kernels: [`KernelCatalog`].
//!
//! The workload compiler asks a catalog for a kernel by name (id, accepted tensor counts,
//! scalar types, most SPMD blocks) and, for `verify = "host-reference"`, runs the kernel's host
//! implementation through it. [`BuiltinKernels`] is the built-in table
//! (`ferry_runtime::device::kernels::KERNELS`); the runner's `KernelRegistry` (the built-ins and
//! every loaded kernel library) implements the same trait.
use ferry_abi::records::DType;
use ferry_runtime::device::kernels;
use std::sync::atomic::AtomicU32;

/// How a kernel reads one scalar's 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// The low 32 bits are an `f32`.
    F32,
    /// An unsigned integer.
    U64,
}

/// What a workload needs to know about a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// Kernel id (what a task carries).
    pub id: u32,
    /// Name.
    pub name: String,
    /// Accepted tensor argument counts (inclusive).
    pub tensors: (u32, u32),
    /// The type of each scalar, in order.
    pub scalars: Vec<ScalarType>,
    /// Most SPMD blocks.
    pub max_blocks: u32,
    /// Every tensor argument before the last must have at least as many elements as the last
    /// (the kernel table's `inputs_cover_output`; `false` when the table does not say).
    pub inputs_cover_output: bool,
    /// A view kernel: its tensors may have any dtype and N-d views, and its scalars are the
    /// layout words the workload fills in (`ferry_abi::layout`), not written in the file.
    pub views: bool,
}

/// Kernels by name, with their host implementations.
pub trait KernelCatalog {
    /// The kernel called `name`, if this catalog has it.
    fn lookup(&self, name: &str) -> Option<KernelInfo>;

    /// Every kernel name (for "did you mean" lists), in id order.
    fn names(&self) -> Vec<String>;

    /// Runs every block of one task of kernel `id` on the host over `tensors`.
    ///
    /// # Errors
    /// The kernel's refusal, as text.
    fn run_host(
        &self,
        id: u32,
        block_dim: u32,
        tensors: &[&[AtomicU32]],
        scalars: &[u64],
    ) -> Result<(), String>;
}

/// How a kernel's scalar dtypes read in a workload: an `f32` for `FLOAT32`, an unsigned integer
/// otherwise.
fn scalar_types(dtypes: &[DType]) -> Vec<ScalarType> {
    dtypes
        .iter()
        .map(|d| if *d == DType::Float32 { ScalarType::F32 } else { ScalarType::U64 })
        .collect()
}

/// The built-in kernel table.
#[derive(Clone, Copy, Debug, Default)]
pub struct BuiltinKernels;

impl KernelCatalog for BuiltinKernels {
    fn lookup(&self, name: &str) -> Option<KernelInfo> {
        let k = kernels::KERNELS.iter().find(|k| k.name == name)?;
        Some(KernelInfo {
            id: k.id,
            name: k.name.to_string(),
            tensors: k.tensors,
            scalars: if k.views { Vec::new() } else { scalar_types(k.scalar_dtypes) },
            max_blocks: k.max_blocks,
            inputs_cover_output: k.inputs_cover_output,
            views: k.views,
        })
    }

    fn names(&self) -> Vec<String> {
        kernels::KERNELS.iter().map(|k| k.name.to_string()).collect()
    }

    fn run_host(
        &self,
        id: u32,
        block_dim: u32,
        tensors: &[&[AtomicU32]],
        scalars: &[u64],
    ) -> Result<(), String> {
        kernels::execute_host(id, block_dim, tensors, scalars).map_err(|e| e.to_string())
    }
}

/// A runner's kernels: the built-ins and every library loaded with
/// `DeviceRunner::load_kernels` (`ferry run --kernels LIB.so`). Built-in kernels run on the host
/// through [`BuiltinKernels`]; loaded ones through their library's host reference.
impl KernelCatalog for ferry_runtime::host::KernelRegistry {
    fn lookup(&self, name: &str) -> Option<KernelInfo> {
        let k = ferry_runtime::host::KernelRegistry::lookup(self, name)?;
        let views = k.views;
        Some(KernelInfo {
            id: k.id,
            name: k.name,
            tensors: k.tensors,
            scalars: if views { Vec::new() } else { scalar_types(&k.scalar_dtypes) },
            max_blocks: k.max_blocks,
            // A loaded kernel's table entry declares no length relation.
            inputs_cover_output: kernels::spec(k.id).is_some_and(|s| s.inputs_cover_output),
            views,
        })
    }

    fn names(&self) -> Vec<String> {
        self.kernels().into_iter().map(|k| k.name).collect()
    }

    fn run_host(
        &self,
        id: u32,
        block_dim: u32,
        tensors: &[&[AtomicU32]],
        scalars: &[u64],
    ) -> Result<(), String> {
        if ferry_abi::kernel_lib::is_custom_kernel(id) {
            self.host_reference_bits(id, tensors, scalars).map_err(|e| e.to_string())
        } else {
            BuiltinKernels.run_host(id, block_dim, tensors, scalars)
        }
    }
}
