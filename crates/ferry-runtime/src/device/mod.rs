//! The device half: code that runs on the AICPU threads and AICore workers.
//!
//! Nothing here depends on the simulator: it reaches the chip only through
//! [`ops::DeviceOps`], so the whole module can move into the AICPU shared object unchanged (the
//! loader bridges `DeviceOps` to the services table the AICPU OS provides).
//!
//! | module | runs on | what |
//! |---|---|---|
//! | [`ops`] | — | the [`ops::DeviceOps`] trait |
//! | [`image`] | both | runtime-image layouts and atomic views of device memory |
//! | [`task`] | AICPU | the orchestration API ([`task::Orchestrate`], [`task::Task`]) |
//! | [`tensor_map`] | AICPU | producer regions → dependencies (RAW, WAR, WAW) |
//! | [`sched`] | AICPU | run state, task ring, ready queues, handshake, dispatch loop, shutdown |
//! | [`orch`] | AICPU | the device orchestrator and the host-built graph's loader |
//! | [`services`] | both | [`services::ServicesOps`]: `DeviceOps` over the AICPU OS's services table |
//! | [`orchestrations`] | AICPU | the example callables' orchestration functions |
//! | [`ffi`] | AICPU / orchestration objects | the AICPU program's exec hook and the `OrchApi` submission table |
//! | [`program`] | AICPU | [`program::AicpuProgram`]: the init / register-callable / exec entries |
//! | [`aicore`] | AICore | [`aicore::aicore_execute`]: the core's handshake and dispatch loop |
//! | [`dfx`] | AICPU | DFX emission: the five subsystems' records through the transport writers |
//! | [`kernels`] | AICore | the kernel library |
//! | [`workload`] | AICPU / host | the workload interpreter: a compiled workload program run through any [`task::Orchestrate`] |
//! | [`custom`] | both | loaded (custom) kernels: their shapes in device memory, their device entries |
pub mod aicore;
pub mod custom;
pub mod dfx;
pub mod ffi;
pub mod image;
pub mod inflight;
pub mod kernels;
pub mod lib_api;
pub mod ops;
pub mod orch;
pub mod orchestrations;
pub mod program;
pub mod row_kernels;
pub mod sched;
pub mod services;
pub mod task;
pub mod tensor_map;
pub mod view_kernels;
pub mod workload;

/// `x % n` (`n > 0`): a mask when `n` is a power of two (the task window and the ArgsDump arenas
/// ferry makes are), so the per-task paths that index a ring (a task's slot, a payload's place in
/// its arena lap, several per task) need no 64-bit division; a division otherwise.
#[inline]
pub(crate) fn wrap(x: u64, n: u64) -> u64 {
    if n.is_power_of_two() {
        x & (n - 1)
    } else {
        x % n
    }
}

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn wrap_is_the_modulus_whatever_the_size() {
        for size in [1u64, 64, 4096, 4 << 20, 3, 100, 4 * 1000 + 4, 3 << 20] {
            for cursor in [0, 1, size - 1, size, size + 4, 7 * size + 12, u64::MAX - 3] {
                assert_eq!(wrap(cursor, size), cursor % size, "{cursor} in {size}");
            }
        }
    }
}
