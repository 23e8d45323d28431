//! [`CompositeTransferEngine`]: routes each endpoint pair to the first engine that claims it.
use crate::engine::{SettledHandle, TransferEngine, TransferHandle};
use crate::types::{
    FailureCode, RejectReason, Rejection, TransferFailure, TransferItem, TransferPlan,
    TransferPlanSet, TransferRef,
};
use std::sync::Arc;

/// Engines in preference order; a pair goes to the first engine whose `can_handle` is true.
///
/// # Examples
/// ```
/// use ferry_copy::{CompositeTransferEngine, LocalCopyEngine, TransferEngine, TransferRef};
/// use std::sync::Arc;
/// let mut c = CompositeTransferEngine::new();
/// c.add_engine(Arc::new(LocalCopyEngine::default()));
/// let mut buf = [0u8; 8];
/// // SAFETY: only used for selection, nothing is copied.
/// let h = unsafe { TransferRef::host(buf.as_mut_ptr(), 8) };
/// assert_eq!(c.select_engine(&h, &h), Some(0));
/// ```
#[derive(Default)]
pub struct CompositeTransferEngine {
    engines: Vec<Arc<dyn TransferEngine>>,
}

impl std::fmt::Debug for CompositeTransferEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.engines.iter().map(|e| e.name())).finish()
    }
}

impl CompositeTransferEngine {
    /// An empty composite (claims nothing).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends an engine (lowest preference so far).
    pub fn add_engine(&mut self, e: Arc<dyn TransferEngine>) -> &mut Self {
        self.engines.push(e);
        self
    }

    /// The engines, in preference order.
    pub fn engines(&self) -> &[Arc<dyn TransferEngine>] {
        &self.engines
    }

    /// Index of the first engine that claims the pair.
    pub fn select_engine(&self, src: &TransferRef, dst: &TransferRef) -> Option<usize> {
        self.engines.iter().position(|e| e.can_handle(src, dst))
    }
}

struct FanOutHandle {
    own: Vec<TransferFailure>,
    subs: Vec<Box<dyn TransferHandle>>,
}

impl TransferHandle for FanOutHandle {
    fn wait(&mut self, out: &mut Vec<TransferFailure>) {
        out.append(&mut self.own);
        for h in &mut self.subs {
            h.wait(out);
        }
        // Idempotent: each sub-handle replays nothing on a second wait, and `own` is empty now.
    }
}

impl TransferEngine for CompositeTransferEngine {
    fn name(&self) -> &str {
        "composite"
    }

    fn can_handle(&self, src: &TransferRef, dst: &TransferRef) -> bool {
        self.select_engine(src, dst).is_some()
    }

    fn plan(&self, items: &[TransferItem]) -> TransferPlanSet {
        if items.is_empty() {
            return TransferPlanSet::default();
        }
        let sel: Vec<Option<usize>> =
            items.iter().map(|it| self.select_engine(&it.src, &it.dst)).collect();
        // Fast path: one engine claims every item; delegate the caller's slice unchanged.
        if let Some(first) = sel[0] {
            if sel.iter().all(|s| *s == Some(first)) {
                let mut set = self.engines[first].plan(items);
                set.plans.iter_mut().for_each(|p| p.engine = Some(first));
                return set;
            }
        }
        let mut out = TransferPlanSet::default();
        let mut parts: Vec<Vec<TransferItem>> = vec![Vec::new(); self.engines.len()];
        for (it, s) in items.iter().zip(&sel) {
            match s {
                Some(i) => parts[*i].push(*it),
                None if it.size == 0 => out.skipped.push(it.tag),
                None => {
                    let reason = if !it.src.has_host_ptr() || !it.dst.has_host_ptr() {
                        RejectReason::InvalidEndpoint
                    } else {
                        RejectReason::NoEngine
                    };
                    out.rejected.push(Rejection { tag: it.tag, reason });
                }
            }
        }
        for (i, part) in parts.iter().enumerate().filter(|(_, p)| !p.is_empty()) {
            let mut set = self.engines[i].plan(part);
            set.plans.iter_mut().for_each(|p| p.engine = Some(i));
            out.plans.append(&mut set.plans);
            out.rejected.append(&mut set.rejected);
            out.skipped.append(&mut set.skipped);
        }
        out
    }

    fn submit(&self, plans: Vec<TransferPlan>) -> Option<Box<dyn TransferHandle>> {
        if plans.is_empty() {
            return None;
        }
        let mut own = Vec::new();
        let mut groups: Vec<Vec<TransferPlan>> = vec![Vec::new(); self.engines.len()];
        for p in plans {
            match p.engine.filter(|&i| i < self.engines.len()) {
                Some(i) => groups[i].push(p),
                None => own.push(TransferFailure {
                    tags: p.tags,
                    code: FailureCode::NotSubmitted,
                    message: "plan has no owning engine".into(),
                    endpoint: "composite".into(),
                }),
            }
        }
        let mut subs = Vec::new();
        for (i, g) in groups.into_iter().enumerate().filter(|(_, g)| !g.is_empty()) {
            let tags: Vec<u64> = g.iter().flat_map(|p| p.tags.iter().copied()).collect();
            match self.engines[i].submit(g) {
                Some(h) => subs.push(h),
                None => own.push(TransferFailure {
                    tags,
                    code: FailureCode::NotSubmitted,
                    message: format!("{} submitted nothing", self.engines[i].name()),
                    endpoint: self.engines[i].name().to_owned(),
                }),
            }
        }
        if own.is_empty() && subs.is_empty() {
            return None;
        }
        if subs.is_empty() {
            return Some(Box::new(SettledHandle::new(own)));
        }
        Some(Box::new(FanOutHandle { own, subs }))
    }
}
