//! The transfer-engine interface: plan, submit, wait.
use crate::types::{TransferFailure, TransferItem, TransferPlan, TransferPlanSet, TransferRef};

/// A submitted batch. [`wait`](TransferHandle::wait) blocks until every posted plan settled and
/// appends one failure per failed plan; a second call appends nothing.
pub trait TransferHandle: Send {
    /// Waits for the batch and appends its failures to `out`.
    fn wait(&mut self, out: &mut Vec<TransferFailure>);
}

/// A handle whose work already finished inside `submit`: it replays its failures once.
///
/// # Examples
/// ```
/// use ferry_copy::{SettledHandle, TransferHandle};
/// let mut h = SettledHandle::new(Vec::new());
/// let mut out = Vec::new();
/// h.wait(&mut out);
/// h.wait(&mut out);
/// assert!(out.is_empty());
/// ```
#[derive(Debug, Default)]
pub struct SettledHandle {
    failures: Option<Vec<TransferFailure>>,
}

impl SettledHandle {
    /// A settled handle reporting `failures`.
    pub fn new(failures: Vec<TransferFailure>) -> Self {
        Self { failures: Some(failures) }
    }
}

impl TransferHandle for SettledHandle {
    fn wait(&mut self, out: &mut Vec<TransferFailure>) {
        if let Some(f) = self.failures.take() {
            out.extend(f);
        }
    }
}

/// A byte mover for some pairs of endpoints.
///
/// Engines split the pair space: [`can_handle`](TransferEngine::can_handle) is a function of the
/// pair only, and no two engines of a [`CompositeTransferEngine`](crate::CompositeTransferEngine)
/// claim the same pair.
pub trait TransferEngine: Send + Sync {
    /// Short name for logs and failures.
    fn name(&self) -> &str;
    /// Whether this engine moves bytes from `src` to `dst`.
    fn can_handle(&self, src: &TransferRef, dst: &TransferRef) -> bool;
    /// Plans `items`: pure (no IO, no state change), callable on any thread.
    fn plan(&self, items: &[TransferItem]) -> TransferPlanSet;
    /// Posts `plans`; `None` when nothing was posted (the caller then fails every tag).
    fn submit(&self, plans: Vec<TransferPlan>) -> Option<Box<dyn TransferHandle>>;
}

/// Everything one [`transfer_detailed`] call reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransferOutcome {
    /// Planning output minus the plans (rejections and skipped empty items).
    pub rejected: Vec<crate::types::Rejection>,
    /// Tags of zero-size items (nothing to copy; not failures).
    pub skipped: Vec<u64>,
    /// One failure per failed plan.
    pub failures: Vec<TransferFailure>,
}

impl TransferOutcome {
    /// Whether every item was copied.
    pub fn is_ok(&self) -> bool {
        self.rejected.is_empty() && self.failures.is_empty()
    }

    /// Sorted, deduplicated tags of every rejected item and every failed plan.
    pub fn failed_tags(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.rejected.iter().map(|r| r.tag).collect();
        v.extend(self.failures.iter().flat_map(|f| f.tags.iter().copied()));
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Plan, submit and wait `items`, reporting rejections and failures in detail.
pub fn transfer_detailed(engine: &dyn TransferEngine, items: &[TransferItem]) -> TransferOutcome {
    let mut out = TransferOutcome::default();
    if items.is_empty() {
        return out;
    }
    let set = engine.plan(items);
    out.rejected = set.rejected;
    out.skipped = set.skipped;
    if set.plans.is_empty() {
        return out;
    }
    // Snapshot the tags before the plans move into `submit`.
    let tags: Vec<u64> = set.plans.iter().flat_map(|p| p.tags.iter().copied()).collect();
    match engine.submit(set.plans) {
        None => out.failures.push(TransferFailure {
            tags,
            code: crate::types::FailureCode::NotSubmitted,
            message: format!("{} submitted nothing", engine.name()),
            endpoint: engine.name().to_owned(),
        }),
        Some(mut h) => h.wait(&mut out.failures),
    }
    out
}

/// Plan, submit and wait `items`; appends the failed tags (sorted, deduplicated) to `failed` and
/// returns whether everything was copied.
///
/// # Examples
/// ```
/// use ferry_copy::{transfer, LocalCopyEngine, TransferItem, TransferRef};
/// let (mut a, mut b) = (vec![7u8; 64], vec![0u8; 64]);
/// // SAFETY: both buffers outlive the transfer and nothing else touches them meanwhile.
/// let (src, dst) = unsafe { (TransferRef::host(a.as_mut_ptr(), 64), TransferRef::host(b.as_mut_ptr(), 64)) };
/// let items = [TransferItem { src, src_offset: 0, dst, dst_offset: 0, size: 64, tag: 0 }];
/// let mut failed = Vec::new();
/// assert!(transfer(&LocalCopyEngine::default(), &items, &mut failed));
/// assert_eq!(b, a);
/// ```
pub fn transfer(
    engine: &dyn TransferEngine,
    items: &[TransferItem],
    failed: &mut Vec<u64>,
) -> bool {
    let o = transfer_detailed(engine, items);
    let ok = o.is_ok();
    if !ok {
        failed.extend(o.failed_tags());
        failed.sort_unstable();
        failed.dedup();
    }
    ok
}
