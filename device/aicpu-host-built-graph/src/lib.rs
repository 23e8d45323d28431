//! The AICPU program, host-built-graph variant: a shared object the AICPU OS loads.
//!
//! The graph is built on the host and uploaded with the run; register-callable only records the
//! call. All logic lives in `ferry-device-aicpu`; this crate names the variant, its build id and
//! the task runtime's exec hook
//! (`ferry_runtime::device::ffi::exec_hook`: schedulers, AICore dispatch and the orchestrator
//! thread run inside this shared object).
#![deny(unsafe_op_in_unsafe_fn)]

ferry_device_aicpu::aicpu_program! {
    name: "host-built-graph",
    build_id_env: "FERRY_BUILD_ID_AICPU_HOST_BUILT_GRAPH",
    orchestration: Host,
    exec: ferry_runtime::device::ffi::exec_hook,
}
