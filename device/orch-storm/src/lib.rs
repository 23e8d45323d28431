//! Orchestration object of the `storm` example callable (a device shared object).
//!
//! The AICPU program (device-orchestrated variant) loads it through the OS loader when the
//! callable is registered, and calls its `ferry_orch_entry` from the task runtime's exec hook
//! on the orchestrator thread. The entry runs `ferry_runtime::device::orchestrations::storm`
//! through `ApiOrchestrator` over the runtime's submission table (`OrchContext::api`).
#![deny(unsafe_op_in_unsafe_fn)]

ferry_runtime::orchestration_object! {
    name: "storm",
    expected_args: 1,
    orch: ferry_runtime::device::orchestrations::storm,
}
