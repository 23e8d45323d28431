//! The DepGen graph: from the orchestrator's submits to `deps.json`'s tasks, tensors and edges,
//! checked against the runtime before it is written.

use ferry_abi::records as abi;
use ferry_profile::collect::DepGenLog;
use ferry_profile::{
    DepEdge, DepTasks, DepTensor, DepsGraph, EdgeSource, IdMap, IdSet, IdTable, Swimlane,
};

use super::{DepsCheckError, DfxError};
use crate::device::tensor_map::TensorMap;

/// The DepGen graph of `log`'s submits (in submission order): tasks with their tensor
/// arguments (kept as the log, with each argument's tensor id: [`DepTasks`]), tensors (one
/// version per producer), and the runtime's dependency edges, each labelled by a host replay of
/// the tensor map (`tensormap`, or `explicit` when the replay does not imply it). One pass over
/// the submits (after a scan for any dependency) versions the arguments, replays the map and
/// labels each submit's edges: O(N).
pub(super) fn deps_graph(log: DepGenLog) -> DepsGraph {
    let mut versions: IdMap<u64, u32> = IdMap::default();
    // Each (buffer, version) is one tensor, listed once, in id order (sorted at the end).
    let mut seen: IdSet<u64> = IdSet::default();
    let mut tensors: Vec<DepTensor> = Vec::new();
    // The tensor id of every tensor argument, in the log's order.
    let mut ids: Vec<u64> = Vec::with_capacity(log.tensor_args());
    let mut edges = Vec::new();
    let mut map = TensorMap::new();
    let mut found = Vec::new();
    // The replay only labels edges: a graph without any (a storm of independent tasks) needs
    // none of it.
    let replaying = log.submits().any(|s| !s.deps.is_empty());
    for s in log.submits() {
        // Arguments in order: reads see the current version, writes bump it.
        for t in s.tensors {
            let ver = versions.entry(t.addr).or_insert(0);
            if t.role != abi::ARG_ROLE_INPUT {
                *ver += 1;
            }
            let id = ferry_profile::tensor_id(t.addr, *ver);
            if seen.insert(id) {
                tensors.push(DepTensor {
                    tensor_id: id,
                    buffer_addr: t.addr,
                    version: *ver,
                    dtype: t.dtype.name().into(),
                    buffer_numel: t.bytes / t.dtype.size() as u64,
                });
            }
            ids.push(id);
        }
        // The tensor map over every task submitted so far (none finished): what the runtime's
        // own dependency tracking implies.
        // Its edges are labelled here, against this submit's own replay (sorted for the
        // lookups: a submit may have hundreds of dependencies).
        found.clear();
        if replaying {
            for t in s.tensors {
                let write = t.role != abi::ARG_ROLE_INPUT;
                map.access(s.task_id, t.addr, t.addr + t.bytes, write, &mut found, &mut |_| true);
            }
            found.sort_unstable();
        }
        for &d in s.deps {
            let mut e = DepEdge::explicit(d, s.task_id);
            if found.binary_search(&d).is_ok() {
                e.source = EdgeSource::Tensormap;
            }
            edges.push(e);
        }
    }
    tensors.sort_unstable_by_key(|t| t.tensor_id);
    DepsGraph { tasks: DepTasks::from_log(log, ids), tensors, edges }
}

/// Checks the DepGen graph against the runtime before `deps.json` is written: every edge joins
/// two recorded tasks in submission order, no edge repeats, and — with the swimlane on — every
/// predecessor's last block ended before its successor's first block started (the runtime really
/// waited for it). [`check_graph`] then [`check_timing`].
#[cfg(test)]
pub(super) fn check_deps(
    g: &DepsGraph,
    lossless: bool,
    sw: Option<&Swimlane>,
) -> Result<(), DfxError> {
    check_graph(g, lossless)?;
    check_timing(g, sw)
}

/// The graph's own checks: every edge forward between tasks DepGen recorded (when nothing was
/// lost), none repeated. Run it where the graph was built: it reads every task and edge, which
/// on another CPU costs a cache-line transfer each (~5 ms for a storm's 50,000).
pub(super) fn check_graph(g: &DepsGraph, lossless: bool) -> Result<(), DfxError> {
    if g.edges.is_empty() {
        return Ok(());
    }
    // A table indexed by task id rather than a hash set where the ids are dense (a run's
    // sequence numbers): a storm's 50,000 tasks and edges took ~10 ms of the model's critical
    // path in three hash tables.
    let recorded = IdTable::first(|| g.tasks.task_ids().map(|id| (id, ())));
    for e in &g.edges {
        if e.pred >= e.succ || (lossless && recorded.get(e.pred).is_none()) {
            return Err(DepsCheckError::NotForward { pred: e.pred, succ: e.succ }.into());
        }
    }
    if let Some((pred, succ)) = repeated_edge(&g.edges) {
        return Err(DepsCheckError::Repeated { pred, succ }.into());
    }
    Ok(())
}

/// With the swimlane on: every edge's predecessor's last block ended before its successor's first
/// block started (a task with no recorded block is not checked).
pub(super) fn check_timing(g: &DepsGraph, sw: Option<&Swimlane>) -> Result<(), DfxError> {
    let Some(sw) = sw.filter(|_| !g.edges.is_empty()) else { return Ok(()) };
    // Each task's first start and last end over its AICore blocks.
    let spans = IdTable::fold(
        || sw.aicore_tasks.iter().map(|t| (t.task_token_raw, (t.start, t.end))),
        |s: &mut (u64, u64), (start, end)| *s = (s.0.min(start), s.1.max(end)),
    );
    for e in &g.edges {
        if let (Some(p), Some(s)) = (spans.get(e.pred), spans.get(e.succ)) {
            if p.1 > s.0 {
                return Err(DepsCheckError::StartedEarly {
                    succ: e.succ,
                    start: s.0,
                    pred: e.pred,
                    end: p.1,
                }
                .into());
            }
        }
    }
    Ok(())
}

/// An edge that appears twice, as `(pred, succ)`: the pairs sorted by successor (a submit's
/// edges are together and submits come in order, so they are nearly sorted already).
fn repeated_edge(edges: &[DepEdge]) -> Option<(u64, u64)> {
    let mut pairs: Vec<(u64, u64)> = edges.iter().map(|e| (e.succ, e.pred)).collect();
    pairs.sort_unstable();
    pairs.windows(2).find(|w| w[0] == w[1]).map(|w| (w[0].1, w[0].0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_abi::dep_gen::{encode, DepGenHead, DepGenTensor};

    fn log_of(tasks: &[(u64, Vec<u64>)], cap: usize) -> DepGenLog {
        let mut log = DepGenLog::default();
        for (id, preds) in tasks {
            let head = DepGenHead { task_id: *id, flags: 0, kernel_id: [-1, 0, -1], block_num: 1 };
            let t = [DepGenTensor {
                role: abi::ARG_ROLE_OUTPUT,
                dtype: abi::DType::Float32,
                addr: 0x1000 * (id + 1),
                bytes: 64,
            }];
            let mut words = Vec::new();
            encode(&head, t.into_iter(), preds, &mut vec![0; cap], |c| words.push(c.to_vec()))
                .unwrap();
            for c in words {
                log.push_buffer(&c);
            }
        }
        log.finish();
        log
    }

    #[test]
    fn long_dependency_lists_become_edges_and_bad_edges_are_refused() {
        let many: Vec<u64> = (0..70).collect();
        let mut tasks: Vec<(u64, Vec<u64>)> = (0..70).map(|i| (i, vec![])).collect();
        tasks.push((70, many));
        // 32-word chains: task 70's 70 dependencies take several overflow chains.
        let log = log_of(&tasks, 32);
        let g = deps_graph(log.clone());
        assert_eq!(g.tasks.len(), 71);
        assert_eq!(g.edges.len(), 70);
        check_deps(&g, true, None).unwrap();
        // A backward edge is refused before deps.json is written.
        let bad = log_of(&[(0, vec![]), (1, vec![]), (2, vec![1]), (3, vec![5])], 64);
        let g = deps_graph(bad.clone());
        assert!(matches!(check_deps(&g, true, None), Err(DfxError::Deps(_))));
        // A repeated edge too.
        let rep = log_of(&[(0, vec![]), (1, vec![0, 0])], 64);
        assert!(matches!(check_deps(&deps_graph(rep.clone()), true, None), Err(DfxError::Deps(_))));
    }

    #[test]
    fn repeated_edges_are_found_in_small_and_large_groups_and_in_any_order() {
        let edges = |v: &[(u64, u64)]| -> Vec<DepEdge> {
            v.iter().map(|&(p, s)| DepEdge::explicit(p, s)).collect()
        };
        assert_eq!(repeated_edge(&edges(&[(0, 2), (1, 2), (1, 3), (2, 3)])), None);
        assert_eq!(repeated_edge(&edges(&[(0, 2), (1, 3), (0, 3), (1, 3)])), Some((1, 3)));
        // A successor with more than a handful of predecessors.
        let mut many: Vec<(u64, u64)> = (0..40).map(|p| (p, 100)).collect();
        assert_eq!(repeated_edge(&edges(&many)), None);
        many.push((17, 100));
        assert_eq!(repeated_edge(&edges(&many)), Some((17, 100)));
        // Not grouped by successor: the whole list is sorted.
        assert_eq!(repeated_edge(&edges(&[(0, 3), (0, 2), (0, 3)])), Some((0, 3)));
        assert_eq!(repeated_edge(&edges(&[(0, 3), (0, 2), (1, 3)])), None);
    }

    #[test]
    fn a_successor_that_started_before_its_predecessor_ended_is_refused() {
        let block = |task, start, end| ferry_profile::AicoreTask {
            core: 0,
            task_token_raw: task,
            reg_task_id: 1,
            start,
            end,
            receive_to_start: 0,
        };
        // Dense ids (a table) and ids a million apart (a map): the same verdicts.
        for (a, b) in [(0u64, 1u64), (5, 1_000_005)] {
            let log = log_of(&[(a, vec![]), (b, vec![a])], 64);
            let g = deps_graph(log.clone());
            let mut sw = Swimlane::new(1);
            // Two blocks of the predecessor: its span ends at the later end (50).
            sw.aicore_tasks = vec![block(a, 10, 30), block(a, 12, 50), block(b, 50, 60)];
            check_deps(&g, true, Some(&sw)).unwrap();
            sw.aicore_tasks[2].start = 49;
            let e = check_deps(&g, true, Some(&sw)).unwrap_err();
            assert!(
                matches!(e, DfxError::Deps(DepsCheckError::StartedEarly { succ, start: 49, pred, end: 50 })
                    if succ == b && pred == a),
                "{e:?}"
            );
            // A task with no recorded block is not checked.
            sw.aicore_tasks.truncate(2);
            check_deps(&g, true, Some(&sw)).unwrap();
        }
    }

    #[test]
    fn tensor_versions_follow_writes_and_the_replay_labels_edges() {
        // Task 1 writes what task 0 wrote (same address): WAW, implied by the tensor map.
        let mut log = DepGenLog::default();
        for (id, preds) in [(0u64, vec![]), (1, vec![0u64])] {
            let head = DepGenHead { task_id: id, flags: 0, kernel_id: [-1, 0, -1], block_num: 1 };
            let t = [DepGenTensor {
                role: abi::ARG_ROLE_INOUT,
                dtype: abi::DType::Float32,
                addr: 0x40,
                bytes: 64,
            }];
            encode(&head, t.into_iter(), &preds, &mut [0; 64], |c| log.push_buffer(c)).unwrap();
        }
        let g = deps_graph(log.clone());
        assert_eq!(g.tensors.len(), 2, "one version per producer");
        assert_eq!(g.edges.len(), 1);
        assert_eq!(g.edges[0].source, EdgeSource::Tensormap);

        // Task 2 reads what task 1 wrote and also declares task 0, whose version task 1
        // overwrote: the map implies 1 -> 2 only, so 0 -> 2 stays explicit, and so does an edge
        // between tasks that share no tensor (3 -> 4).
        let head = |id| DepGenHead { task_id: id, flags: 0, kernel_id: [-1, 0, -1], block_num: 1 };
        let t = |role, addr| DepGenTensor { role, dtype: abi::DType::Float32, addr, bytes: 64 };
        let submits: [(u64, Vec<DepGenTensor>, Vec<u64>); 3] = [
            (2, vec![t(abi::ARG_ROLE_INPUT, 0x40)], vec![0, 1]),
            (3, vec![t(abi::ARG_ROLE_OUTPUT, 0x1000)], vec![]),
            (4, vec![t(abi::ARG_ROLE_OUTPUT, 0x2000)], vec![3]),
        ];
        for (id, tensors, preds) in submits {
            encode(&head(id), tensors.into_iter(), &preds, &mut [0; 64], |c| log.push_buffer(c))
                .unwrap();
        }
        let g = deps_graph(log.clone());
        let sources: Vec<(u64, u64, EdgeSource)> =
            g.edges.iter().map(|e| (e.pred, e.succ, e.source)).collect();
        assert_eq!(
            sources,
            [
                (0, 1, EdgeSource::Tensormap),
                (0, 2, EdgeSource::Explicit),
                (1, 2, EdgeSource::Tensormap),
                (3, 4, EdgeSource::Explicit),
            ]
        );
        check_deps(&g, true, None).unwrap();
    }
}
