//! The runtime image's layout: the header (the launch-route prefix) and the per-run suffix.
use super::{DeviceRunner, RunnerDevice};
use crate::device::image::{
    align64, as_bytes, RunBlock, RunResult, RuntimeHeader, TensorRecord, VARIANT_DEVICE_ORCH,
    VARIANT_HOST_GRAPH,
};
use crate::device::sched::PAYLOAD_PAIR_BYTES;
use crate::device::task::TensorInfo;
use crate::host::graph::HostGraph;
use crate::host::{RunnerConfig, Variant};
use ferry_abi::handshake::{core_type_for_index, Handshake};
use ferry_abi::launch::AbiRecord;
use ferry_abi::regs::RegLayout;

/// What a run allocated for itself, as its image records it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunMemory<'a> {
    /// The scratch arena: address and bytes (`(0, 0)` for none).
    pub(crate) scratch: (u64, u64),
    /// The guarded allocations: address and bytes of each (the guard table's entries).
    pub(crate) guards: &'a [(u64, u64)],
}

/// How many of each variable-size part a runtime image holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ImageCounts {
    pub(crate) tensors: u64,
    pub(crate) scalars: u64,
    pub(crate) graph_tasks: u64,
    pub(crate) graph_preds: u64,
    /// Loaded kernels (one count each).
    pub(crate) custom_kernels: u64,
    /// Guarded allocations (the run's own tensors and its scratch arena).
    pub(crate) guards: u64,
}

/// A header with the image's region offsets and total size for a chip of `cfg` (everything
/// else default): the one layout both a run's image and [`super::super::extent`] use.
pub(crate) fn image_offsets(cfg: &RunnerConfig, n: ImageCounts) -> RuntimeHeader {
    let w = u64::from(cfg.aic + cfg.aiv);
    let mut h = RuntimeHeader::new();
    let mut off = std::mem::size_of::<RuntimeHeader>() as u64;
    let mut take = |n: u64| {
        let o = off;
        off += align64(n);
        o
    };
    let hl = cfg.handshake_layout;
    // Everything from the run block on is the per-run suffix (see `device::image`).
    h.run_off = take(std::mem::size_of::<RunBlock>() as u64);
    h.handshake_off = take(w * u64::from(hl.slot_bytes));
    h.payload_off = take(w * PAYLOAD_PAIR_BYTES);
    h.tensor_off = take(n.tensors * 16);
    h.scalar_off = take(n.scalars * 8);
    h.result_off = take(std::mem::size_of::<RunResult>() as u64);
    h.custom_count_off = take(n.custom_kernels * 8);
    h.handshake_seen_off = take(w * 4);
    h.graph_task_off = take(n.graph_tasks * 160);
    h.graph_pred_off = take(n.graph_preds * 4);
    h.guard_off = take(n.guards * 16);
    h.image_bytes = off;
    h
}

impl<P: RunnerDevice> DeviceRunner<P> {
    pub(super) fn layout(
        &mut self,
        id: u32,
        variant: Variant,
        tensors: &[TensorInfo],
        scalars: &[u64],
        graph: Option<&HostGraph>,
        run_memory: RunMemory<'_>,
    ) -> (Vec<u8>, RuntimeHeader) {
        let RunMemory { scratch, guards } = run_memory;
        self.epoch += 1;
        let cfg = &self.cfg;
        let w = u64::from(cfg.aic + cfg.aiv);
        let (recs, preds) = graph.map(HostGraph::records).unwrap_or_default();
        let hl = cfg.handshake_layout;
        let mut h = image_offsets(
            cfg,
            ImageCounts {
                tensors: tensors.len() as u64,
                scalars: scalars.len() as u64,
                graph_tasks: recs.len() as u64,
                graph_preds: preds.len() as u64,
                custom_kernels: u64::from(self.kernel_table.1),
                guards: guards.len() as u64,
            },
        );
        h.guard_count = guards.len() as u32;
        h.variant = match variant {
            Variant::DeviceOrchestrated => VARIANT_DEVICE_ORCH,
            Variant::HostBuiltGraph => VARIANT_HOST_GRAPH,
        };
        h.worker_count = w as u32;
        h.aic_count = cfg.aic;
        h.aicpu_thread_num = cfg.aicpu_threads;
        h.callable_id = id;
        h.task_window = cfg.task_window;
        h.tensor_count = tensors.len() as u32;
        h.scalar_count = scalars.len() as u32;
        h.graph_task_count = recs.len() as u32;
        h.graph_pred_count = preds.len() as u32;
        h.arch = cfg.arch as u32;
        h.regs_table = self.regs_table.0;
        (h.kernel_table, h.kernel_table_count) = (self.kernel_table.0 .0, self.kernel_table.1);
        let layout = RegLayout::of(cfg.arch);
        h.regs_count = layout.max_physical_cores;
        h.max_physical_cores = layout.max_physical_cores;
        h.handshake_layout = hl.id;
        h.handshake_timeout_ms =
            cfg.handshake_timeout.as_millis().clamp(1, u128::from(u32::MAX)) as u32;
        h.kernel_budget_ms = cfg.kernel_budget.as_millis().clamp(1, u128::from(u32::MAX)) as u32;

        let mut img = vec![0u8; h.image_bytes as usize];
        let mut put = |o: u64, b: &[u8]| img[o as usize..o as usize + b.len()].copy_from_slice(b);
        put(0, as_bytes(&h));
        put(h.run_off, as_bytes(&RunBlock::new(self.epoch, scratch.0, scratch.1)));
        for i in 0..w {
            let slot = Handshake::pretyped(core_type_for_index(i as u32, cfg.aic));
            put(h.handshake_off + u64::from(hl.slot_bytes) * i, slot.as_bytes());
        }
        for (i, t) in tensors.iter().enumerate() {
            put(
                h.tensor_off + 16 * i as u64,
                as_bytes(&TensorRecord { addr: t.addr, bytes: t.len * 4 }),
            );
        }
        for (i, s) in scalars.iter().enumerate() {
            put(h.scalar_off + 8 * i as u64, &s.to_le_bytes());
        }
        for (i, r) in recs.iter().enumerate() {
            put(h.graph_task_off + 160 * i as u64, as_bytes(r));
        }
        for (i, p) in preds.iter().enumerate() {
            put(h.graph_pred_off + 4 * i as u64, &p.to_le_bytes());
        }
        let mut sorted = guards.to_vec();
        sorted.sort_unstable();
        for (i, &(addr, bytes)) in sorted.iter().enumerate() {
            put(h.guard_off + 16 * i as u64, as_bytes(&TensorRecord { addr, bytes }));
        }
        (img, h)
    }
}
