//! The AICPU program, device-orchestrated variant: a shared object the AICPU OS loads.
//!
//! The graph is built on the AICPU by each callable's orchestration object, which the
//! register-callable entry (re)loads. All logic lives in `ferry-device-aicpu`; this crate names
//! the variant, its build id and the task runtime's exec hook
//! (`ferry_runtime::device::ffi::exec_hook`: schedulers, AICore dispatch and the orchestrator
//! thread run inside this shared object).
#![deny(unsafe_op_in_unsafe_fn)]

ferry_device_aicpu::aicpu_program! {
    name: "device-orchestrated",
    build_id_env: "FERRY_BUILD_ID_AICPU_DEVICE_ORCHESTRATED",
    orchestration: Device,
    exec: ferry_runtime::device::ffi::exec_hook,
}
