//! What ferry-sim's loom models share: running one model under explicit bounds.

/// Runs one model under explicit bounds: loom's settings from the environment (CI sets
/// `LOOM_MAX_PREEMPTIONS=2`), at most `max_branches` branch points per execution (loom fails a
/// longer one as a spin), and a liveness bound naming the model: `ferry-watchdog` aborts the
/// process once it passes 2 GiB resident (an execution that never ends grows loom's state
/// without branching) or after three times `FERRY_TEST_BOUND_SECS` (15 minutes by default,
/// CI's own bound per target: the models with two preemptions take minutes on a loaded machine).
pub fn model(name: &str, max_branches: usize, f: impl Fn() + Sync + Send + 'static) {
    let _bound = ferry_watchdog::bound_with_memory_for(
        format!("loom to explore every execution of {name}"),
        3 * ferry_watchdog::configured_bound(),
        2 << 30,
    );
    let mut b = loom::model::Builder::new();
    b.max_branches = b.max_branches.min(max_branches);
    b.check(f);
}
