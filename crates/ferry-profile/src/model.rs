//! The in-memory run model: what collection fills and what every writer, reader and view works on.

use std::collections::BTreeMap;

use ferry_abi::records::{
    AicoreTaskRecord, AicpuTaskRecord, OrchPhaseRecord, SchedPhaseKind, SchedPhaseRecord,
};
use serde::{Deserialize, Serialize};

use super::args::ArgsDump;
use super::deps::DepsGraph;
use super::id_table::IdTable;
use super::pmu::PmuTable;
use super::scopes::ScopeStats;
use super::stream::IdMap;

/// A whole profiled run: run metadata, the five subsystems' data (each present only when that
/// subsystem was on) and the per-lane loss accounting.
///
/// # Examples
/// ```
/// use ferry_profile::{AicoreTask, AicpuTask, CoreType, RunMeta, RunModel, Swimlane};
/// let mut run = RunModel::new(RunMeta::new("a2a3", 50_000_000, vec![CoreType::Aic]));
/// let mut sw = Swimlane::new(2);
/// sw.aicore_tasks.push(AicoreTask { core: 0, task_token_raw: 1, reg_task_id: 1, start: 100,
///                                    end: 150, receive_to_start: 5 });
/// sw.aicpu_tasks.push(AicpuTask { core: 0, reg_task_id: 1, dispatch: 90, finish: 160 });
/// run.swimlane = Some(sw);
/// let tasks = run.tasks();
/// assert_eq!(tasks.len(), 1);
/// assert_eq!(tasks[0].dispatch, Some(90));
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunModel {
    /// Run-wide metadata.
    pub meta: RunMeta,
    /// ChipSwimlane records (`chip_swimlane_records.json`).
    pub swimlane: Option<Swimlane>,
    /// PMU rows (`pmu.csv`).
    pub pmu: Option<PmuTable>,
    /// DepGen graph (`deps.json`).
    pub deps: Option<DepsGraph>,
    /// ArgsDump metadata and payloads (`args_dump/args_dump.json`, `args.bin`).
    pub args: Option<ArgsDump>,
    /// ScopeStats records (`scope_stats/scope_stats.jsonl`).
    pub scopes: Option<ScopeStats>,
    /// Per-lane loss accounting of every subsystem's lanes.
    pub loss: LossAccounting,
    /// Kernel names by `func_id` (optional; views fall back to `func<N>`).
    pub kernels: BTreeMap<i32, String>,
}

/// Type of an AICore worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CoreType {
    /// Cube core.
    Aic,
    /// Vector core.
    Aiv,
}

impl CoreType {
    /// `"aic"` or `"aiv"`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Aic => "aic",
            Self::Aiv => "aiv",
        }
    }
}

/// Run-wide metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct RunMeta {
    /// Arch name (`a2a3`, `a5`).
    pub arch: String,
    /// Device clock in Hz: all `*_cycles` / times in the model are in these cycles.
    pub clock_freq_hz: u64,
    /// Type of each core, indexed by core id.
    pub core_types: Vec<CoreType>,
    /// AICPU scheduler thread that owns each core (−1 unassigned), indexed by core id.
    pub core_to_thread: Vec<i32>,
    /// The run's case (the callable's name): names `name_map_<case>.json` and is its
    /// `orchestrator_name`.
    pub case: Option<String>,
    /// Host↔device clock anchors taken at the run's start and end.
    pub clock_anchors: Option<super::host_time::ClockAnchors>,
    /// The host orchestrator of a host-built run (`None`: device-orchestrated).
    pub host_orchestration: Option<super::host_time::HostOrchestration>,
    /// Which run of a session over several runs this is (`None`: the session's only run).
    pub run: Option<RunLabel>,
    /// The runs this model spans, when it is a whole session read as one
    /// ([`session_model`](crate::session_model)); empty for a model of one run.
    pub session: Vec<RunSpan>,
    /// The task whose kernel failed on its core, in a failed run's profile (from its
    /// manifest's outcome): the page, the trace and the report mark it.
    pub failed: Option<super::FailedTask>,
}

/// One run of a session read as one model: its index and the device cycles its tasks span.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSpan {
    /// The run, from 0.
    pub index: u32,
    /// Whether the session set it apart as a warm-up run.
    pub warmup: bool,
    /// Its first task's first timestamp (dispatch when known, else start), in device cycles.
    pub first: u64,
    /// Its last task's last timestamp (finish when known, else end), in device cycles.
    pub last: u64,
}

/// Run `index` of the `runs` runs one DFX session collected (`ferry run --repeat N`): every file
/// of a run's profile carries it (`chip_swimlane_records.json` in `metadata.run`, the others in
/// their `dfx` loss-accounting object), and the session's `runs.json` lists them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLabel {
    /// The run, from 0, in launch order.
    pub index: u32,
    /// Runs in the session.
    pub runs: u32,
}

impl RunLabel {
    /// The directory of run `index` inside its session's profile directory: `run-000`, … (zero
    /// padded to three digits, so the directories sort in launch order).
    pub fn dir_name(index: u32) -> String {
        format!("run-{index:03}")
    }
}

impl Default for RunMeta {
    fn default() -> Self {
        Self::new("a2a3", 50_000_000, Vec::new())
    }
}

impl RunMeta {
    /// Metadata with every core assigned to thread 0.
    pub fn new(arch: &str, clock_freq_hz: u64, core_types: Vec<CoreType>) -> Self {
        let n = core_types.len();
        Self {
            arch: arch.to_string(),
            clock_freq_hz,
            core_types,
            core_to_thread: vec![0; n],
            case: None,
            clock_anchors: None,
            host_orchestration: None,
            run: None,
            session: Vec::new(),
            failed: None,
        }
    }

    /// Cores in the run.
    pub fn num_cores(&self) -> usize {
        self.core_types.len()
    }

    /// Converts device cycles to nanoseconds (saturating, exact for the arch clocks).
    pub fn cycles_to_ns(&self, cycles: u64) -> u64 {
        if self.clock_freq_hz == 0 {
            return cycles;
        }
        ((cycles as u128 * 1_000_000_000) / self.clock_freq_hz as u128).min(u64::MAX as u128) as u64
    }

    /// Converts device cycles to microseconds (fractional).
    pub fn cycles_to_us(&self, cycles: u64) -> f64 {
        if self.clock_freq_hz == 0 {
            return cycles as f64;
        }
        cycles as f64 * 1e6 / self.clock_freq_hz as f64
    }
}

/// ChipSwimlane data, in raw device cycles.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Swimlane {
    /// Level 1–4 the run used.
    pub level: u32,
    /// AICore-written task records (level ≥ 1).
    pub aicore_tasks: Vec<AicoreTask>,
    /// AICPU-observed dispatch/finish (level ≥ 2).
    pub aicpu_tasks: Vec<AicpuTask>,
    /// Scheduler phases per AICPU scheduler thread (level ≥ 3).
    pub sched_phases: Vec<Vec<SchedPhase>>,
    /// Orchestrator submit envelopes per orchestrator thread (level 4).
    pub orch_phases: Vec<Vec<OrchPhase>>,
}

impl Swimlane {
    /// An empty swimlane at `level`.
    pub fn new(level: u32) -> Self {
        Self { level, ..Default::default() }
    }
}

/// One AICore execution (`aicore_tasks` row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AicoreTask {
    /// Core id.
    pub core: u32,
    /// Task identity `(ring_id << 32) | local_id`.
    pub task_token_raw: u64,
    /// Per-core dispatch counter (low 32 bits).
    pub reg_task_id: u32,
    /// Kernel start cycle.
    pub start: u64,
    /// Kernel end cycle.
    pub end: u64,
    /// Cycles from receiving the dispatch to starting.
    pub receive_to_start: u32,
}

impl AicoreTask {
    /// From the device record of `core`.
    pub fn from_record(core: u32, r: &AicoreTaskRecord) -> Self {
        Self {
            core,
            task_token_raw: r.task_token_raw,
            reg_task_id: r.reg_task_id,
            start: r.start_time,
            end: r.end_time,
            receive_to_start: r.receive_to_start_cycles,
        }
    }
}

/// One AICPU-observed dispatch/finish (`aicpu_tasks` row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AicpuTask {
    /// Core id.
    pub core: u32,
    /// Per-core dispatch counter (low 32 bits).
    pub reg_task_id: u32,
    /// Dispatch cycle.
    pub dispatch: u64,
    /// Finish (FIN observed) cycle.
    pub finish: u64,
}

impl AicpuTask {
    /// From the device record of `core`.
    pub fn from_record(core: u32, r: &AicpuTaskRecord) -> Self {
        Self { core, reg_task_id: r.reg_task_id, dispatch: r.dispatch_time, finish: r.finish_time }
    }
}

/// One scheduler phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedPhase {
    /// Phase kind.
    pub kind: SchedPhaseKind,
    /// Start cycle.
    pub start: u64,
    /// End cycle.
    pub end: u64,
    /// Loop iteration.
    pub loop_iter: u32,
    /// Tasks handled.
    pub tasks_processed: u32,
    /// `(pop_hit, pop_miss)`, or `(local_id, ring_id)` for kinds that carry a task.
    pub phase_data: [u32; 2],
    /// Shared queue depths at start.
    pub shared_at_start: [i16; 3],
    /// Shared queue depths at end.
    pub shared_at_end: [i16; 3],
}

impl SchedPhase {
    /// From the device record; `None` for an unknown kind.
    pub fn from_record(r: &SchedPhaseRecord) -> Option<Self> {
        Some(Self {
            kind: SchedPhaseKind::from_u32(r.kind)?,
            start: r.start,
            end: r.end,
            loop_iter: r.loop_iter,
            tasks_processed: r.tasks_processed,
            phase_data: r.phase_data,
            shared_at_start: r.shared_depth_at_start,
            shared_at_end: r.shared_depth_at_end,
        })
    }

    /// The task id of a task-carrying phase (`ring_id << 32 | local_id`).
    pub fn task_id(&self) -> Option<u64> {
        self.kind
            .carries_task()
            .then(|| (u64::from(self.phase_data[1]) << 32) | u64::from(self.phase_data[0]))
    }
}

/// One orchestrator submit envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrchPhase {
    /// Submit ordinal.
    pub submit_idx: u32,
    /// Task id.
    pub task_id: u64,
    /// Start cycle.
    pub start: u64,
    /// End cycle.
    pub end: u64,
}

impl OrchPhase {
    /// From the device record.
    pub fn from_record(r: &OrchPhaseRecord) -> Self {
        Self { submit_idx: r.submit_idx, task_id: r.task_id, start: r.start, end: r.end }
    }
}

/// Loss policy of a run (mirrors [`ferry_dfx::Policy`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum LossPolicy {
    /// Lossless: writers wait up to the 30-s budget.
    #[default]
    Block,
    /// Bounded wait, counted loss.
    Drop,
}

impl From<ferry_dfx::Policy> for LossPolicy {
    fn from(p: ferry_dfx::Policy) -> Self {
        match p {
            ferry_dfx::Policy::Block => Self::Block,
            ferry_dfx::Policy::Drop => Self::Drop,
        }
    }
}

/// The five DFX subsystems.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Subsystem {
    /// ChipSwimlane.
    ChipSwimlane,
    /// PMU.
    Pmu,
    /// DepGen.
    DepGen,
    /// ArgsDump.
    ArgsDump,
    /// ScopeStats.
    ScopeStats,
}

impl Subsystem {
    /// All subsystems.
    pub const ALL: [Subsystem; 5] =
        [Self::ChipSwimlane, Self::Pmu, Self::DepGen, Self::ArgsDump, Self::ScopeStats];

    /// Its name in ferry's words (`ChipSwimlane`, `PMU`, `DepGen`, `ArgsDump`, `ScopeStats`).
    pub fn title(self) -> &'static str {
        match self {
            Self::ChipSwimlane => "ChipSwimlane",
            Self::Pmu => "PMU",
            Self::DepGen => "DepGen",
            Self::ArgsDump => "ArgsDump",
            Self::ScopeStats => "ScopeStats",
        }
    }

    /// `no records: PMU, ScopeStats` for `list` (empty for none).
    pub fn no_records_line(list: &[Subsystem]) -> String {
        if list.is_empty() {
            return String::new();
        }
        let names: Vec<&str> = list.iter().map(|s| s.title()).collect();
        format!("no records: {}", names.join(", "))
    }

    /// Snake-case name (`chip_swimlane`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::ChipSwimlane => "chip_swimlane",
            Self::Pmu => "pmu",
            Self::DepGen => "dep_gen",
            Self::ArgsDump => "args_dump",
            Self::ScopeStats => "scope_stats",
        }
    }
}

/// Loss accounting of one lane: `produced = collected + dropped`, and how long its writer waited.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneLoss {
    /// Subsystem of the lane.
    pub subsystem: Option<Subsystem>,
    /// Lane name, e.g. `aicore_task/core3`, `sched_phase/thread1`, `pmu/core0`.
    pub lane: String,
    /// AICPU thread (ready queue) that writes the lane.
    pub thread: u32,
    /// Core the lane records, for per-core lanes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core: Option<u32>,
    /// Records the device attempted to write.
    pub produced: u64,
    /// Records the host collected.
    pub collected: u64,
    /// Records the device accounted dropped.
    pub dropped: u64,
    /// Device cycles the writer spent waiting at this lane's gates.
    pub stall_cycles: u64,
    /// The individual waits, `[start, end]` in device cycles (may be empty when only the total is
    /// known).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stalls: Vec<[u64; 2]>,
    /// Gate waits of the lane's writer, however short (0: the pool kept the path cold).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stall_waits: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl LaneLoss {
    /// Whether every produced record is collected or dropped.
    pub fn reconciles(&self) -> bool {
        self.produced == self.collected.saturating_add(self.dropped)
    }
}

/// Per-run loss accounting: the policy, the gate budget and one line per lane.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossAccounting {
    /// Block or Drop.
    pub policy: LossPolicy,
    /// One gate wait's budget in device cycles.
    pub budget_cycles: u64,
    /// Every lane of every subsystem.
    pub lanes: Vec<LaneLoss>,
    /// The run of a session over several runs these lines count (`None`: the session's only
    /// run); every file's loss-accounting object carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunLabel>,
}

impl LossAccounting {
    /// The lanes of one subsystem, with the run's policy and budget.
    pub fn of(&self, s: Subsystem) -> LossAccounting {
        LossAccounting {
            policy: self.policy,
            budget_cycles: self.budget_cycles,
            lanes: self.lanes.iter().filter(|l| l.subsystem == Some(s)).cloned().collect(),
            run: self.run,
        }
    }

    /// Adds the lanes of `other` (policy/budget taken from `other` when this has no lanes yet).
    pub fn merge(&mut self, other: LossAccounting) {
        if self.lanes.is_empty() {
            self.policy = other.policy;
            self.budget_cycles = other.budget_cycles;
            self.run = other.run;
        }
        for l in other.lanes {
            if !self.lanes.contains(&l) {
                self.lanes.push(l);
            }
        }
    }

    /// Sum over lanes of (produced, collected, dropped), saturating (counts read from a file
    /// may be anything).
    pub fn totals(&self) -> (u64, u64, u64) {
        self.lanes.iter().fold((0, 0, 0), |(p, c, d), l| {
            (
                p.saturating_add(l.produced),
                c.saturating_add(l.collected),
                d.saturating_add(l.dropped),
            )
        })
    }

    /// Whether every lane reconciles.
    pub fn reconciles(&self) -> bool {
        self.lanes.iter().all(LaneLoss::reconciles)
    }
}

/// The most AICPU threads a file may name: the largest chip has 5; a thread id beyond this is
/// not a run's (and would make the trace one track per id).
pub const MAX_FILE_THREADS: u32 = 64;

/// Checks loss accounting read from `file`: every lane's thread below [`MAX_FILE_THREADS`].
pub(crate) fn check_loss(l: &LossAccounting, file: &str) -> Result<(), super::OutputError> {
    match l.lanes.iter().find(|ln| ln.thread >= MAX_FILE_THREADS) {
        Some(ln) => Err(super::OutputError::Format {
            file: file.to_string(),
            what: format!(
                "dfx lane {:?} names AICPU thread {} (at most {})",
                ln.lane,
                ln.thread,
                MAX_FILE_THREADS - 1
            ),
        }),
        None => Ok(()),
    }
}

/// One task as the swimlane shows it: AICore and AICPU records joined on `(core, reg_task_id)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinedTask {
    /// Core id.
    pub core: u32,
    /// Per-core dispatch counter.
    pub reg_task_id: u32,
    /// Task identity.
    pub task_id: u64,
    /// Kernel function id, from `deps.json` or the PMU rows.
    pub func_id: Option<i32>,
    /// AICPU dispatch cycle (level ≥ 2).
    pub dispatch: Option<u64>,
    /// Cycle the core received the dispatch (`start − receive_to_start`).
    pub receive: u64,
    /// Kernel start.
    pub start: u64,
    /// Kernel end.
    pub end: u64,
    /// AICPU finish cycle (level ≥ 2).
    pub finish: Option<u64>,
}

impl JoinedTask {
    /// Whether `dispatch ≤ start ≤ end ≤ finish` holds for the known timestamps.
    pub fn is_ordered(&self) -> bool {
        self.dispatch.is_none_or(|d| d <= self.start)
            && self.start <= self.end
            && self.finish.is_none_or(|f| self.end <= f)
    }
}

impl RunModel {
    /// An empty run with `meta`.
    pub fn new(meta: RunMeta) -> Self {
        Self { meta, ..Default::default() }
    }

    /// The subsystems that were on (their file is part of the profile) but recorded nothing:
    /// what the report, the page and the trace say in one line (`no records: PMU, ScopeStats`)
    /// instead of drawing empty rows and tables.
    pub fn no_records(&self) -> Vec<Subsystem> {
        let empty = [
            self.swimlane.as_ref().map(|s| s.aicore_tasks.is_empty()),
            self.pmu.as_ref().map(|p| p.rows.is_empty()),
            self.deps.as_ref().map(|d| d.tasks.is_empty()),
            self.args.as_ref().map(|a| a.args.is_empty()),
            self.scopes.as_ref().map(|s| s.records.is_empty()),
        ];
        Subsystem::ALL
            .into_iter()
            .zip(empty)
            .filter(|(_, e)| *e == Some(true))
            .map(|p| p.0)
            .collect()
    }

    /// The kernel of `task_id`: the first active `kernel_ids` entry of its first `deps.json`
    /// task, else the `func_id` of its first PMU row.
    ///
    /// Scans the deps tasks and PMU rows (O(N) per call): for many tasks use [`Self::tasks`],
    /// which resolves every task's kernel through one index.
    pub fn task_func(&self, task_id: u64) -> Option<i32> {
        if let Some(d) = &self.deps {
            if let Some((_, kernels)) = d.tasks.kernels().find(|&(id, _)| id == task_id) {
                if let Some(&k) = kernels.iter().find(|&&k| k >= 0) {
                    return Some(k);
                }
            }
        }
        self.pmu
            .as_ref()
            .and_then(|p| p.rows.iter().find(|r| r.task_id == task_id))
            .map(|r| r.func_id as i32)
    }

    /// The number of device records the model holds: AICore and AICPU task records, scheduler
    /// and orchestrator phases, PMU rows, DepGen tasks (one record per submit), dumped
    /// arguments and scope records. Tensors and edges of `deps.json` are derived from the
    /// DepGen records and not counted.
    ///
    /// For a model straight from collection this equals the sum of the loss lines'
    /// `collected` ([`LossAccounting::totals`]); unlike that sum it is also known for files
    /// without loss accounting (the original runtime's).
    ///
    /// # Examples
    /// ```
    /// use ferry_profile::{sample::sample_run, LossPolicy};
    /// let run = sample_run(LossPolicy::Block);
    /// assert_eq!(run.record_count(), run.loss.totals().1);
    /// ```
    pub fn record_count(&self) -> u64 {
        let sw = self.swimlane.as_ref().map_or(0, |s| {
            s.aicore_tasks.len()
                + s.aicpu_tasks.len()
                + s.sched_phases.iter().map(Vec::len).sum::<usize>()
                + s.orch_phases.iter().map(Vec::len).sum::<usize>()
        });
        let n = sw
            + self.pmu.as_ref().map_or(0, |p| p.rows.len())
            + self.deps.as_ref().map_or(0, |d| d.tasks.len())
            + self.args.as_ref().map_or(0, |a| a.args.len())
            + self.scopes.as_ref().map_or(0, |s| s.records.len());
        n as u64
    }

    /// Name of a kernel (`func<N>` when unnamed).
    pub fn kernel_name(&self, func_id: Option<i32>) -> String {
        match func_id {
            Some(f) => self.kernels.get(&f).cloned().unwrap_or_else(|| format!("func{f}")),
            None => "unknown".to_string(),
        }
    }

    /// Every AICore task joined with its AICPU record, in (start, core) order.
    ///
    /// One pass builds the indexes (kernel per task id, AICPU record per `(core, reg_task_id)`),
    /// one pass joins, one sort orders: O(N log N) in the records, whatever the task count.
    pub fn tasks(&self) -> Vec<JoinedTask> {
        let Some(sw) = &self.swimlane else { return Vec::new() };
        let funcs = FuncIndex::new(self);
        let cpu: IdMap<(u32, u32), &AicpuTask> =
            sw.aicpu_tasks.iter().map(|t| ((t.core, t.reg_task_id), t)).collect();
        let mut out: Vec<JoinedTask> = sw
            .aicore_tasks
            .iter()
            .map(|t| {
                let c = cpu.get(&(t.core, t.reg_task_id));
                JoinedTask {
                    core: t.core,
                    reg_task_id: t.reg_task_id,
                    task_id: t.task_token_raw,
                    func_id: funcs.get(t.task_token_raw),
                    dispatch: c.map(|c| c.dispatch),
                    receive: t.start.saturating_sub(u64::from(t.receive_to_start)),
                    start: t.start,
                    end: t.end,
                    finish: c.map(|c| c.finish),
                }
            })
            .collect();
        out.sort_by_key(|t| (t.start, t.core, t.reg_task_id));
        out
    }
}

/// The kernel of every task id, resolved as [`RunModel::task_func`] does, built in one pass over
/// the deps tasks and PMU rows.
struct FuncIndex {
    /// First deps task per id: its first active kernel (`None`: no active kernel, fall back).
    deps: IdTable<Option<i32>>,
    /// First PMU row's `func_id` per id.
    pmu: IdTable<i32>,
}

impl FuncIndex {
    fn new(run: &RunModel) -> Self {
        // Heads only: a run's DepGen tasks are built from its log when read.
        let deps = IdTable::first(|| {
            run.deps
                .iter()
                .flat_map(|d| d.tasks.kernels())
                .map(|(id, kernels)| (id, kernels.iter().copied().find(|&k| k >= 0)))
        });
        let pmu = IdTable::first(|| {
            run.pmu.iter().flat_map(|p| &p.rows).map(|r| (r.task_id, r.func_id as i32))
        });
        Self { deps, pmu }
    }

    fn get(&self, task_id: u64) -> Option<i32> {
        self.deps.get(task_id).copied().flatten().or_else(|| self.pmu.get(task_id).copied())
    }
}
