//! Expansion on the host: walks the [`Ir`] in submission order with every loop variable bound,
//! once per task, so `ferry workload check` can refuse a view out of range with the task's line,
//! and `verify = "host-reference"` can run the graph with the kernels' host implementations.
//! Linear in the task total (which the compiler bounded before anything expands); the walk
//! recurses once per nesting level, at most `MAX_DEPTH` deep.
use crate::compile::{Ir, Node, ScalarNode, TRef, TaskNode};
use crate::error::{Lines, WorkloadError};
use ferry_runtime::device::workload as w;

/// One concrete task.
pub(crate) struct Concrete<'a> {
    pub(crate) node: &'a TaskNode,
    pub(crate) blocks: u32,
    /// `(tensor, offset, len)` per argument, checked against the tensor's size.
    pub(crate) views: Vec<(TRef, u64, u64)>,
    pub(crate) scalars: Vec<u64>,
}

/// What the walk calls back.
pub(crate) trait Visit {
    /// A scope opened with these scratch allocations `(slot, len)`.
    fn scope_begin(&mut self, allocs: &[(u32, u64)]);
    /// The innermost scope closed.
    fn scope_end(&mut self);
    /// One task.
    fn task(&mut self, t: &Concrete<'_>) -> Result<(), String>;
}

pub(crate) struct Walk<'a> {
    pub(crate) lines: &'a Lines,
    /// Each run tensor's words on the device.
    pub(crate) run_sizes: &'a [u64],
    /// Each run tensor's elements (of its dtype).
    pub(crate) run_elems: &'a [u64],
    pub(crate) scratch_bytes: u64,
    vars: Vec<u64>,
    scratch: Vec<u64>,
    scratch_used: u64,
    seq: u64,
}

fn align64(x: u64) -> u64 {
    x.div_ceil(64) * 64
}

impl<'a> Walk<'a> {
    pub(crate) fn new(
        lines: &'a Lines,
        run_sizes: &'a [u64],
        run_elems: &'a [u64],
        scratch_bytes: u64,
        ir: &Ir,
    ) -> Walk<'a> {
        Walk {
            lines,
            run_sizes,
            run_elems,
            scratch_bytes,
            vars: vec![0; ir.vars as usize],
            scratch: vec![0; ir.scratch_slots as usize],
            scratch_used: 0,
            seq: 0,
        }
    }

    pub(crate) fn run(&mut self, ir: &Ir, v: &mut dyn Visit) -> Result<(), WorkloadError> {
        self.nodes(&ir.nodes, v)
    }

    fn eval(&self, e: &crate::expr::Expr, at: usize, what: &str) -> Result<u64, WorkloadError> {
        e.eval(&self.vars).ok_or_else(|| {
            self.lines.at(
                at,
                format!("task {}: {what} overflows, goes below zero or divides by zero", self.seq),
            )
        })
    }

    fn nodes(&mut self, nodes: &[Node], v: &mut dyn Visit) -> Result<(), WorkloadError> {
        for n in nodes {
            match n {
                Node::Task(t) => self.task(t, v)?,
                Node::Repeat { var, count, body } => {
                    for k in 0..*count {
                        self.vars[*var as usize] = k;
                        self.nodes(body, v)?;
                    }
                }
                Node::Scope { scratch, body, at, .. } => {
                    let saved = self.scratch_used;
                    let mut allocs = Vec::with_capacity(scratch.len());
                    for (slot, len, sat) in scratch {
                        let len = self.eval(len, *sat, "scratch length")?;
                        let start = align64(self.scratch_used);
                        let end = len.checked_mul(4).and_then(|b| b.checked_add(start));
                        match end.filter(|&e| e <= self.scratch_bytes) {
                            Some(e) => self.scratch_used = e,
                            None => {
                                return Err(self.lines.at(*sat, format!(
                                    "scratch arena exhausted: {len} elements at byte {start} of {} (raise `scratch_bytes` in [workload])",
                                    self.scratch_bytes
                                )))
                            }
                        }
                        self.scratch[*slot as usize] = len;
                        allocs.push((*slot, len));
                    }
                    let _ = at;
                    v.scope_begin(&allocs);
                    self.nodes(body, v)?;
                    v.scope_end();
                    self.scratch_used = saved;
                }
            }
        }
        Ok(())
    }

    fn task(&mut self, t: &TaskNode, v: &mut dyn Visit) -> Result<(), WorkloadError> {
        let seq = self.seq;
        let label = &t.label;
        let blocks = self.eval(&t.blocks, t.at, "blocks")?;
        if blocks == 0 || blocks > u64::from(t.kernel.max_blocks) {
            return Err(self.lines.at(
                t.at,
                format!(
                    "task {seq} ('{label}'): blocks = {blocks}, kernel `{}` takes 1..={}",
                    t.kernel.name, t.kernel.max_blocks
                ),
            ));
        }
        let mut views = Vec::with_capacity(t.args.len());
        let mut first_shape: Option<Vec<u64>> = None;
        for a in &t.args {
            let size = match a.tensor {
                TRef::Run(i) => self.run_sizes[i as usize],
                TRef::Scratch(s) => self.scratch[s as usize],
            };
            if let Some(ev) = &a.elem {
                let shape = self.elem_view(seq, label, a, ev)?;
                match &first_shape {
                    None => first_shape = Some(shape),
                    Some(s0) if *s0 != shape => {
                        return Err(self.lines.at(a.at, format!(
                            "task {seq} ('{label}'): the view of `{}` has shape {shape:?}, the first argument's is {s0:?} (a view kernel's arguments share one shape)",
                            a.name
                        )))
                    }
                    Some(_) => {}
                }
            }
            let off = self.eval(&a.offset, a.at, "offset")?;
            let len = match &a.len {
                Some(l) => self.eval(l, a.at, "len")?,
                None => size.saturating_sub(off),
            };
            if off.checked_add(len).is_none_or(|e| e > size) {
                let role = match a.role {
                    ferry_runtime::Role::Input => "input",
                    ferry_runtime::Role::Output => "output",
                    ferry_runtime::Role::InOut => "inout",
                };
                return Err(self.lines.at(a.at, format!(
                    "task {seq} ('{label}'): {role} view of `{}` out of range: offset {off} + len {len} > {size} elements",
                    a.name
                )));
            }
            views.push((a.tensor, off, len));
        }
        if t.kernel.inputs_cover_output {
            if let Some((&(_, _, out_len), inputs)) = views.split_last() {
                let out = &t.args[inputs.len()];
                if let Some(i) = inputs.iter().position(|v| v.2 < out_len) {
                    let a = &t.args[i];
                    return Err(self.lines.at(a.at, format!(
                        "task {seq} ('{label}'): kernel `{}` needs each input at least as long as its output `{}` ({out_len} elements); `{}` has {}",
                        t.kernel.name, out.name, a.name, inputs[i].2
                    )));
                }
            }
        }
        let mut scalars = Vec::with_capacity(t.scalars.len());
        for s in &t.scalars {
            scalars.push(match s {
                ScalarNode::F32(b) => u64::from(*b),
                ScalarNode::U64(e) => self.eval(e, t.at, "u64 scalar")?,
            });
        }
        let c = Concrete { node: t, blocks: blocks as u32, views, scalars };
        v.task(&c).map_err(|m| self.lines.at(t.at, format!("task {seq} ('{label}'): {m}")))?;
        self.seq += 1;
        Ok(())
    }
}

impl Walk<'_> {
    /// Checks a view kernel's argument `a` in elements (its start on a word, its extent inside
    /// the tensor); returns its shape.
    fn elem_view(
        &self,
        seq: u64,
        label: &str,
        a: &crate::compile::ArgNode,
        ev: &crate::views::ElemView,
    ) -> Result<Vec<u64>, WorkloadError> {
        let elems = match a.tensor {
            TRef::Run(i) => self.run_elems[i as usize],
            TRef::Scratch(s) => self.scratch[s as usize],
        };
        let off = self.eval(&ev.offset, a.at, "offset")?;
        let len = match &ev.form {
            crate::views::Form::Flat(Some(l)) => Some(self.eval(l, a.at, "len")?),
            _ => None,
        };
        let (shape, extent) = ev.shape_extent(off, len, elems);
        let size = ev.dtype.size() as u64;
        let role = match a.role {
            ferry_runtime::Role::Input => "input",
            ferry_runtime::Role::Output => "output",
            ferry_runtime::Role::InOut => "inout",
        };
        if off.checked_mul(size).is_none_or(|b| b % 4 != 0) {
            return Err(self.lines.at(a.at, format!(
                "task {seq} ('{label}'): {role} view of `{}` starts at element {off}, not on a 32-bit word ({} elements: the offset is a multiple of {})",
                a.name, ev.dtype.short_name(), 4 / size.min(4)
            )));
        }
        if off.checked_add(extent).is_none_or(|e| e > elems) {
            return Err(self.lines.at(a.at, format!(
                "task {seq} ('{label}'): {role} view of `{}` out of range: offset {off} + extent {extent} (shape {shape:?}) > {elems} elements",
                a.name
            )));
        }
        Ok(shape)
    }
}

/// Checks only.
pub(crate) struct NoVisit;

impl Visit for NoVisit {
    fn scope_begin(&mut self, _: &[(u32, u64)]) {}
    fn scope_end(&mut self) {}
    fn task(&mut self, _: &Concrete<'_>) -> Result<(), String> {
        Ok(())
    }
}

/// The host reference: run tensors and scratch slots as host cells, each task run with its
/// kernel's host implementation in submission order (an order every dependency respects: the
/// tensor map derives them from submission order).
pub(crate) struct HostRef<'a> {
    pub(crate) catalog: &'a dyn crate::catalog::KernelCatalog,
    pub(crate) run: Vec<Vec<std::sync::atomic::AtomicU32>>,
    pub(crate) scratch: Vec<Vec<std::sync::atomic::AtomicU32>>,
}

impl Visit for HostRef<'_> {
    fn scope_begin(&mut self, allocs: &[(u32, u64)]) {
        for &(slot, len) in allocs {
            // Scratch memory is not cleared on the device either; a fresh host buffer per scope
            // keeps a workload that reads scratch before writing it from passing by accident.
            self.scratch[slot as usize] =
                (0..len).map(|_| std::sync::atomic::AtomicU32::new(f32::NAN.to_bits())).collect();
        }
    }

    fn scope_end(&mut self) {}

    fn task(&mut self, t: &Concrete<'_>) -> Result<(), String> {
        let views: Vec<&[std::sync::atomic::AtomicU32]> = t
            .views
            .iter()
            .map(|&(r, off, len)| {
                let cells = match r {
                    TRef::Run(i) => &self.run[i as usize],
                    TRef::Scratch(s) => &self.scratch[s as usize],
                };
                &cells[off as usize..(off + len) as usize]
            })
            .collect();
        self.catalog.run_host(t.node.kernel.id, t.blocks, &views, &t.scalars)
    }
}

const _: () = assert!(w::MAX_DEPTH <= 16);
