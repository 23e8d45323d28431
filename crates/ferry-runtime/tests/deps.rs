//! Dependency resolution: the tensor map's edges against a brute-force per-byte replay, on
//! random graphs.
use ferry_runtime::device::kernels::{K_ADD, K_SCALE};
use ferry_runtime::device::task::{Orchestrate, Role, Task, TensorId, TensorInfo, View};
use ferry_runtime::device::tensor_map::TensorMap;
use ferry_runtime::host::graph::GraphBuilder;
use proptest::prelude::*;
use std::collections::BTreeSet;

/// Elements of the one tensor the random graphs touch.
const ELEMS: u64 = 16;
const BASE: u64 = 0x1000;

type Access = (u64, u64, Role); // element offset, length, role

fn role(r: u8) -> Role {
    match r % 3 {
        0 => Role::Input,
        1 => Role::Output,
        _ => Role::InOut,
    }
}

fn task_strategy() -> impl Strategy<Value = Vec<Access>> {
    prop::collection::vec(
        (0..ELEMS, 1..=ELEMS, any::<u8>()).prop_map(|(o, l, r)| (o, l.min(ELEMS - o), role(r))),
        1..=3,
    )
}

/// Per byte: the last writer, and the readers since. Task `j` depends on the last writer of every
/// byte it touches, and — where it writes — on every reader since that writer.
fn brute_force(tasks: &[Vec<Access>]) -> BTreeSet<(u64, u64)> {
    let bytes = (ELEMS * 4) as usize;
    let mut writer: Vec<Option<u64>> = vec![None; bytes];
    let mut readers: Vec<Vec<u64>> = vec![Vec::new(); bytes];
    let mut edges = BTreeSet::new();
    for (j, acc) in tasks.iter().enumerate() {
        let j = j as u64;
        // How task j touches each byte: None, Some(false) read only, Some(true) writes.
        let mut touch: Vec<Option<bool>> = vec![None; bytes];
        for &(o, l, r) in acc {
            for t in &mut touch[(o * 4) as usize..((o + l) * 4) as usize] {
                *t = Some(t.unwrap_or(false) || r != Role::Input);
            }
        }
        for (b, t) in touch.iter().enumerate() {
            let Some(w) = *t else { continue };
            if let Some(p) = writer[b] {
                edges.insert((p, j));
            }
            if w {
                for &r in &readers[b] {
                    if r != j {
                        edges.insert((r, j));
                    }
                }
                readers[b].clear();
                writer[b] = Some(j);
            } else {
                readers[b].push(j);
            }
        }
    }
    edges
}

fn build(tasks: &[Vec<Access>]) -> Vec<(u64, u64)> {
    let mut g =
        GraphBuilder::new(vec![TensorInfo { addr: BASE, len: ELEMS }], vec![], (0, 0), None);
    for acc in tasks {
        let mut t = Task::new(if acc.len() == 3 { K_ADD } else { K_SCALE }).scalar(0);
        for &(o, l, r) in acc {
            t = t.arg(View::range(TensorId(0), o, l), r);
        }
        g.submit(&t).unwrap();
    }
    g.edges()
}

fn overlaps(a: &[Access], b: &[Access]) -> bool {
    a.iter().any(|&(ao, al, ar)| {
        b.iter().any(|&(bo, bl, br)| {
            ao < bo + bl && bo < ao + al && (ar != Role::Input || br != Role::Input)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The builder's edges are exactly the per-byte last-writer / readers-since edges.
    #[test]
    fn edges_equal_brute_force(tasks in prop::collection::vec(task_strategy(), 1..40)) {
        let got: BTreeSet<_> = build(&tasks).into_iter().collect();
        prop_assert_eq!(got, brute_force(&tasks));
    }

    /// Every pair of tasks whose ranges overlap with at least one writer (the plain brute-force
    /// overlap check: RAW, WAR, WAW) is ordered by a path of edges, and every edge joins such a
    /// pair.
    #[test]
    fn every_conflicting_pair_is_ordered(tasks in prop::collection::vec(task_strategy(), 1..30)) {
        let edges = build(&tasks);
        let n = tasks.len();
        let mut reach = vec![vec![false; n]; n];
        for &(p, s) in &edges {
            prop_assert!(p < s, "edge {} -> {} points backwards", p, s);
            prop_assert!(overlaps(&tasks[p as usize], &tasks[s as usize]), "edge {} -> {} joins no conflict", p, s);
            reach[p as usize][s as usize] = true;
        }
        for k in 0..n {
            let via = reach[k].clone();
            for row in reach.iter_mut() {
                if row[k] {
                    for (r, v) in row.iter_mut().zip(&via) {
                        *r |= *v;
                    }
                }
            }
        }
        for j in 0..n {
            for i in 0..j {
                if overlaps(&tasks[i], &tasks[j]) {
                    prop_assert!(reach[i][j], "tasks {} and {} conflict but are unordered", i, j);
                }
            }
        }
    }

    /// Finished tasks are never depended on, and the map forgets them.
    #[test]
    fn finished_tasks_are_never_edges(tasks in prop::collection::vec(task_strategy(), 1..30), done_below in 0u64..30) {
        let mut m = TensorMap::new();
        for (j, acc) in tasks.iter().enumerate() {
            let mut deps = Vec::new();
            for &(o, l, r) in acc {
                m.access(j as u64, BASE + 4 * o, BASE + 4 * (o + l), r != Role::Input, &mut deps, &mut |t| t >= done_below);
            }
            prop_assert!(deps.iter().all(|&d| d >= done_below || d == j as u64));
        }
    }
}

#[test]
fn disjoint_tensors_never_depend() {
    let mut g = GraphBuilder::new(
        vec![TensorInfo { addr: BASE, len: 4 }, TensorInfo { addr: BASE + 16, len: 4 }],
        vec![],
        (0, 0),
        None,
    );
    for i in 0..10 {
        g.submit(&Task::new(K_SCALE).inout(TensorId(i % 2)).scalar(0)).unwrap();
    }
    let e = g.edges();
    assert_eq!(e.len(), 8);
    assert!(e.iter().all(|&(p, s)| s - p == 2));
}
