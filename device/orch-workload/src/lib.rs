//! Orchestration object of workload files (a device shared object): the workload interpreter.
//!
//! The AICPU program (device-orchestrated variant) loads it when a workload's callable is
//! registered and calls its `ferry_orch_entry` on the orchestrator thread. The entry reads the
//! compiled workload program from the run tensor scalar 0 names (device memory, through the
//! AICPU OS's services), validates it and runs it through `ApiOrchestrator` over the runtime's
//! submission table: `ferry_runtime::device::workload::object_entry`.
#![deny(unsafe_op_in_unsafe_fn)]

ferry_runtime::orchestration_object! {
    name: "workload",
    expected_args: 2,
    orch_with_context: ferry_runtime::device::workload::object_entry,
}
