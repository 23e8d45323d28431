//! [`DepTasks`]: the tasks of a [`DepsGraph`](super::DepsGraph), as rows or as the run's DepGen
//! log with each tensor argument's id, a task built when it is read.
//!
//! A storm's 50,000 submits as rows are ~22 MB of [`DepTask`]s and 176-byte [`DepArg`]s, one
//! allocation per task, all first-touched on the model build's critical path; the log they come
//! from is ~5 MB and already there. So a run's model keeps the log and one `u64` per tensor
//! argument (its version's id, which the graph's tensor-map replay computes in submission order)
//! and builds a task when the writer, a view or a test reads it; `deps.json` is unchanged, and a
//! graph read back from it holds rows.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::collect::{DepGenLog, DepGenSubmit};
use super::deps::{DepArg, DepTask};
use ferry_abi::dep_gen::{DepGenTensor, DEP_GEN_FLAG_IN_MANUAL_SCOPE};
use ferry_abi::records as abi;

/// The tasks of a DepGen graph, in submission order.
#[derive(Clone, Default)]
pub struct DepTasks(Repr);

#[derive(Clone)]
enum Repr {
    Rows(Vec<DepTask>),
    /// `ids[k]`: the tensor id of the log's `k`-th tensor argument ([`DepGenLog::tensor_offset`]).
    Log {
        log: DepGenLog,
        ids: Vec<u64>,
    },
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Rows(Vec::new())
    }
}

impl DepTasks {
    /// The whole submits of `log`, each tensor argument `k` (in [`DepGenLog::tensor_offset`]
    /// order) with tensor id `ids[k]`.
    ///
    /// # Panics
    /// If `ids` does not hold exactly one id per tensor argument of the log's whole submits.
    pub fn from_log(log: DepGenLog, ids: Vec<u64>) -> DepTasks {
        assert_eq!(ids.len(), log.tensor_args(), "one tensor id per tensor argument");
        DepTasks(Repr::Log { log, ids })
    }

    /// Tasks held.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Rows(r) => r.len(),
            Repr::Log { log, .. } => log.len(),
        }
    }

    /// Whether there is no task.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Task `i`, built from the log when that is what is kept.
    pub fn get(&self, i: usize) -> Option<Cow<'_, DepTask>> {
        match &self.0 {
            Repr::Rows(r) => r.get(i).map(Cow::Borrowed),
            Repr::Log { log, ids } => {
                let s = log.submit(i)?;
                let at = log.tensor_offset(i)?;
                Some(Cow::Owned(task_of(&s, &ids[at..at + s.tensors.len()])))
            }
        }
    }

    /// The last task.
    pub fn last(&self) -> Option<Cow<'_, DepTask>> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    /// Every task, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Cow<'_, DepTask>> + '_ {
        (0..self.len()).map(|i| self.get(i).expect("an index below len"))
    }

    /// Every task's id, in order, without building the tasks.
    pub fn task_ids(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.kernels().map(|(id, _)| id)
    }

    /// Every task's id and kernel per sub-core, in order, without building the tasks.
    pub fn kernels(&self) -> impl ExactSizeIterator<Item = (u64, [i32; 3])> + '_ {
        (0..self.len()).map(|i| match &self.0 {
            Repr::Rows(r) => (r[i].task_id, r[i].kernel_ids),
            Repr::Log { log, .. } => {
                let s = log.submit(i).expect("an index below len");
                (s.task_id, s.kernel_id)
            }
        })
    }

    /// The rows, for editing (a log is built into rows first).
    fn rows_mut(&mut self) -> &mut Vec<DepTask> {
        if let Repr::Log { .. } = self.0 {
            let rows = self.iter().map(Cow::into_owned).collect();
            self.0 = Repr::Rows(rows);
        }
        match &mut self.0 {
            Repr::Rows(r) => r,
            Repr::Log { .. } => unreachable!("built into rows above"),
        }
    }

    /// Appends `t` (a log is built into rows first).
    pub fn push(&mut self, t: DepTask) {
        self.rows_mut().push(t);
    }
}

/// Task `s` with tensor ids `ids` (one per tensor argument): what `deps.json` lists for it.
fn task_of(s: &DepGenSubmit<'_>, ids: &[u64]) -> DepTask {
    let scope = if s.flags & DEP_GEN_FLAG_IN_MANUAL_SCOPE != 0 { "manual" } else { "auto" };
    DepTask {
        task_id: s.task_id,
        scope: scope.into(),
        kernel_ids: s.kernel_id,
        block_num: s.block_num,
        args: s.tensors.iter().zip(ids).enumerate().map(|(i, (t, &id))| arg_of(i, t, id)).collect(),
    }
}

/// Tensor argument `i` of a submit, of tensor `id`: one dimension of the view's bytes in
/// elements of its dtype.
fn arg_of(i: usize, t: &DepGenTensor, id: u64) -> DepArg {
    DepArg {
        idx: i as u32,
        role: abi::role_name(t.role).unwrap_or("INPUT").into(),
        tensor_id: Some(id),
        dtype: t.dtype.name().into(),
        shape: [t.bytes / t.dtype.size() as u64].into(),
        start_offset: 0,
        strides: [1].into(),
    }
}

impl From<Vec<DepTask>> for DepTasks {
    fn from(rows: Vec<DepTask>) -> Self {
        DepTasks(Repr::Rows(rows))
    }
}

impl FromIterator<DepTask> for DepTasks {
    fn from_iter<I: IntoIterator<Item = DepTask>>(iter: I) -> Self {
        DepTasks(Repr::Rows(iter.into_iter().collect()))
    }
}

impl<'a> IntoIterator for &'a DepTasks {
    type Item = Cow<'a, DepTask>;
    type IntoIter = Box<dyn Iterator<Item = Cow<'a, DepTask>> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl std::fmt::Debug for DepTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = match &self.0 {
            Repr::Rows(_) => "rows",
            Repr::Log { .. } => "log",
        };
        f.debug_struct("DepTasks").field("len", &self.len()).field("kept", &kept).finish()
    }
}

/// Equal when they list the same tasks, however each is kept.
impl PartialEq for DepTasks {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for DepTasks {}

impl Serialize for DepTasks {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for DepTasks {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<DepTask>::deserialize(d).map(DepTasks::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_abi::dep_gen::{encode, DepGenHead};

    /// A log of `n` submits, submit `i` with `i % 4` tensors and a dependency on `i - 1`; the
    /// manual-scope flag on every third.
    fn log_of(n: u64) -> DepGenLog {
        let mut log = DepGenLog::default();
        for i in 0..n {
            let flags = if i % 3 == 0 { DEP_GEN_FLAG_IN_MANUAL_SCOPE } else { 0 };
            let head =
                DepGenHead { task_id: i, flags, kernel_id: [i as i32, -1, -1], block_num: 2 };
            let roles = [abi::ARG_ROLE_INPUT, abi::ARG_ROLE_OUTPUT, abi::ARG_ROLE_INOUT];
            let dtypes = [abi::DType::Float32, abi::DType::BFloat16, abi::DType::Int8];
            let tensors = (0..(i % 4) as usize).map(|k| DepGenTensor {
                role: roles[k % 3],
                dtype: dtypes[k % 3],
                addr: 0x1000 * (k as u64 + 1),
                bytes: 64 * (k as u64 + 1),
            });
            let deps: Vec<u64> = i.checked_sub(1).into_iter().collect();
            encode(&head, tensors, &deps, &mut [0; 64], |c| log.push_buffer(c)).unwrap();
        }
        log.finish();
        log
    }

    #[test]
    fn a_kept_log_reads_as_the_rows_it_stands_for() {
        let log = log_of(40);
        let ids: Vec<u64> = (0..log.tensor_args() as u64).map(|k| 1000 + k).collect();
        // The rows, built the long way: every submit's arguments with their ids in order.
        let mut k = 0;
        let rows: Vec<DepTask> = log
            .submits()
            .map(|s| {
                let args = s
                    .tensors
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        k += 1;
                        arg_of(i, t, ids[k - 1])
                    })
                    .collect();
                DepTask {
                    task_id: s.task_id,
                    scope: if s.task_id % 3 == 0 { "manual" } else { "auto" }.into(),
                    kernel_ids: s.kernel_id,
                    block_num: 2,
                    args,
                }
            })
            .collect();
        let kept = DepTasks::from_log(log, ids);
        let as_rows = DepTasks::from(rows.clone());
        assert_eq!(kept.len(), 40);
        assert_eq!(kept, as_rows);
        assert_eq!(kept.iter().map(Cow::into_owned).collect::<Vec<_>>(), rows);
        assert_eq!(kept.task_ids().collect::<Vec<_>>(), (0..40).collect::<Vec<_>>());
        assert!(kept.kernels().eq(rows.iter().map(|t| (t.task_id, t.kernel_ids))));
        assert_eq!(kept.get(7).unwrap().args[2].role, "INOUT");
        // Argument 1 is 128 bytes of bf16, argument 2 192 bytes of int8.
        let seventh = kept.get(7).unwrap();
        assert_eq!((&*seventh.args[1].dtype, &seventh.args[1].shape[..]), ("BFLOAT16", &[64][..]));
        assert_eq!((&*seventh.args[2].dtype, &seventh.args[2].shape[..]), ("INT8", &[192][..]));
        assert_eq!((&*seventh.args[0].dtype, &seventh.args[0].shape[..]), ("FLOAT32", &[16][..]));
        assert_eq!(kept.last().unwrap().task_id, 39);
        assert!(kept.get(40).is_none());
        assert_eq!(serde_json::to_string(&kept).unwrap(), serde_json::to_string(&rows).unwrap());
        let back: DepTasks = serde_json::from_str(&serde_json::to_string(&kept).unwrap()).unwrap();
        assert_eq!(back, kept);
        // Editing turns the log into the same rows first.
        let mut edited = kept.clone();
        edited.push(DepTask::default());
        assert_eq!(edited.len(), 41);
        assert!(edited.iter().take(40).eq(kept.iter()));
    }

    #[test]
    #[should_panic(expected = "one tensor id per tensor argument")]
    fn ids_must_match_the_tensor_arguments() {
        let log = log_of(5);
        let n = log.tensor_args();
        let _ = DepTasks::from_log(log, vec![0; n + 1]);
    }
}
