//! Run configuration: lanes, queues, pools, shards, policy and budgets.

use core::fmt;

use ferry_abi::arch::ArchProfile;
use ferry_abi::dfx::{BufferCountPlacement, DfxLayout, LayoutError, MAX_READY_QUEUES};

use crate::Record;

/// What a writer does when a gate does not open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Policy {
    /// Wait up to the Block budget (the arch's 30-second constant): lossless unless the host is
    /// dead. The default.
    #[default]
    Block,
    /// Wait up to the short Drop bound, then drop the affected records and count them.
    Drop,
}

/// One lane: a free queue and the pool of buffers that circulates through it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneSpec {
    /// Ready queue (AICPU thread) that publishes this lane's buffers, fixed for the run.
    pub ready_queue: u32,
    /// Buffer kind (selects the recycled lane and warm target).
    pub kind: u32,
    /// Buffers seeded for this lane: up to `free_slots` go into its free queue, the rest into the
    /// recycled lane of its shard.
    pub buffers: u32,
}

/// A validated run configuration. Build it with [`DfxBuilder`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DfxConfig {
    /// Ready queues (`MAX_T`).
    pub ready_queues: u32,
    /// Ready-queue depth `RQ` (capacity `RQ − 1`).
    pub ready_depth: u32,
    /// Free-queue slots `SLOT`.
    pub free_slots: u32,
    /// The lanes.
    pub lanes: Vec<LaneSpec>,
    /// Buffers carved but not seeded: the pool the replenish thread "allocates" warm-target
    /// buffers from, and startup replenish fills free queues from.
    pub reserve_buffers: u32,
    /// Bytes per record.
    pub record_size: u32,
    /// Records per buffer.
    pub records_per_buffer: u32,
    /// Where buffers keep their count.
    pub placement: BufferCountPlacement,
    /// Drain (and collector) shards; queue `q` is served by shard `q % shards`.
    pub shards: u32,
    /// Recycled-lane low-water mark per kind (0 = none: origin-only routing, no allocation).
    pub warm_targets: Vec<u32>,
    /// Full-buffer policy.
    pub policy: Policy,
    /// Budget of one Block gate wait, in device cycles.
    pub block_budget_cycles: u64,
    /// Budget of one Drop gate wait, in device cycles.
    pub drop_wait_cycles: u64,
    /// Optional wake-up hints between host and device: the device rings the drain shard of its
    /// queue after each publish and the host rings a lane's writer after a push into its free
    /// queue. Off by default — real hardware has no such signal and the host polls its queues
    /// ([`crate::PollPolicy`]); on, it is measured beside the polling path (`ferry bench dfx`).
    pub doorbell_hint: bool,
}

impl DfxConfig {
    /// The region geometry.
    pub fn layout(&self) -> DfxLayout {
        DfxLayout {
            ready_queues: self.ready_queues,
            ready_depth: self.ready_depth,
            free_slots: self.free_slots,
            lanes: self.lanes.len() as u32,
            buffers: self.total_buffers(),
            record_size: self.record_size,
            records_per_buffer: self.records_per_buffer,
            placement: self.placement,
        }
    }

    /// Bytes the device region must have: the ABI region, then one stall log per lane
    /// ([`crate::device::stall_log_size`]).
    pub fn region_size(&self) -> usize {
        self.layout().region_size() + crate::device::stall_log_size(self.lanes.len() as u32)
    }

    /// Every buffer in the region (lane pools plus reserve).
    pub fn total_buffers(&self) -> u32 {
        self.lanes.iter().map(|l| l.buffers).sum::<u32>() + self.reserve_buffers
    }

    /// Number of buffer kinds (largest lane kind + 1).
    pub fn kinds(&self) -> u32 {
        self.lanes.iter().map(|l| l.kind + 1).max().unwrap_or(1)
    }

    /// Shard serving ready queue `q`.
    pub fn shard_of_queue(&self, q: u32) -> u32 {
        q % self.shards
    }

    /// Gate budget of this run's policy.
    pub fn gate_budget_cycles(&self) -> u64 {
        match self.policy {
            Policy::Block => self.block_budget_cycles,
            Policy::Drop => self.drop_wait_cycles,
        }
    }
}

/// Why a configuration or transport could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// The region geometry is invalid.
    Layout(LayoutError),
    /// A lane names a ready queue that does not exist.
    LaneQueue {
        /// The lane.
        lane: u32,
    },
    /// `shards` is 0 or above the number of ready queues.
    Shards,
    /// The record type does not match the configured record size or is over-aligned.
    RecordType,
    /// The device region is smaller than the layout needs.
    RegionTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The region is not a DFX region of this version.
    BadHeader,
    /// A ready queue already has a writer, or a lane already has an owner.
    AlreadyClaimed,
    /// A lane does not belong to the writer's ready queue.
    ForeignLane {
        /// The lane.
        lane: u32,
    },
    /// A device memory operation failed during setup.
    Memory(crate::mem::MemError),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Layout(e) => write!(f, "invalid dfx layout: {e}"),
            Self::LaneQueue { lane } => write!(f, "lane {lane} names a missing ready queue"),
            Self::Shards => f.write_str("shard count must be between 1 and the ready queue count"),
            Self::RecordType => {
                f.write_str("record type does not match the configured record size")
            }
            Self::RegionTooSmall { need, have } => {
                write!(f, "device region has {have} bytes, layout needs {need}")
            }
            Self::BadHeader => f.write_str("region is not a dfx region of this version"),
            Self::AlreadyClaimed => f.write_str("ready queue or lane already has a writer"),
            Self::ForeignLane { lane } => write!(f, "lane {lane} belongs to another ready queue"),
            Self::Memory(e) => write!(f, "device memory: {e}"),
        }
    }
}

impl std::error::Error for BuildError {}

/// Builder of a [`DfxConfig`].
///
/// # Examples
/// ```
/// use ferry_abi::arch::A2A3;
/// use ferry_dfx::{DfxBuilder, Policy};
/// let cfg = DfxBuilder::new(&A2A3)
///     .ready_queues(2)
///     .lane(0, 0, 4)
///     .lane(1, 0, 4)
///     .records_per_buffer(256)
///     .policy(Policy::Block)
///     .build::<u64>()
///     .unwrap();
/// assert_eq!(cfg.shards, 2);
/// assert_eq!(cfg.block_budget_cycles, 50_000_000 * 30);
/// ```
#[derive(Clone, Debug)]
pub struct DfxBuilder {
    cfg: DfxConfig,
    shards: Option<u32>,
}

impl DfxBuilder {
    /// Defaults for `profile`: one ready queue per AICPU thread, depth 64, 4 free slots, no lanes,
    /// 1024 records per buffer, count after records, Block with the arch's 30-s budget, Drop bound
    /// 1 ms of device clock, no doorbell hint.
    pub fn new(profile: &ArchProfile) -> Self {
        Self {
            cfg: DfxConfig {
                ready_queues: profile.max_aicpu_threads,
                ready_depth: 64,
                free_slots: 4,
                lanes: Vec::new(),
                reserve_buffers: 0,
                record_size: 0,
                records_per_buffer: 1024,
                placement: BufferCountPlacement::AfterRecords,
                shards: 0,
                warm_targets: Vec::new(),
                policy: Policy::Block,
                block_budget_cycles: profile.dfx_backpressure_budget_cycles,
                drop_wait_cycles: profile.clock_hz / 1000,
                doorbell_hint: false,
            },
            shards: None,
        }
    }

    /// Number of ready queues (AICPU threads).
    pub fn ready_queues(&mut self, n: u32) -> &mut Self {
        self.cfg.ready_queues = n;
        self
    }

    /// Ready-queue depth `RQ`.
    pub fn ready_depth(&mut self, n: u32) -> &mut Self {
        self.cfg.ready_depth = n;
        self
    }

    /// Free-queue slots `SLOT` (power of two, at most 8).
    pub fn free_slots(&mut self, n: u32) -> &mut Self {
        self.cfg.free_slots = n;
        self
    }

    /// Adds a lane published through `ready_queue`, of `kind`, seeded with `buffers` buffers.
    pub fn lane(&mut self, ready_queue: u32, kind: u32, buffers: u32) -> &mut Self {
        self.cfg.lanes.push(LaneSpec { ready_queue, kind, buffers });
        self
    }

    /// Unseeded buffers for startup replenish and warm targets.
    pub fn reserve_buffers(&mut self, n: u32) -> &mut Self {
        self.cfg.reserve_buffers = n;
        self
    }

    /// Records per buffer.
    pub fn records_per_buffer(&mut self, n: u32) -> &mut Self {
        self.cfg.records_per_buffer = n;
        self
    }

    /// Where buffers keep their count.
    pub fn placement(&mut self, p: BufferCountPlacement) -> &mut Self {
        self.cfg.placement = p;
        self
    }

    /// Drain/collector shards (default `min(ready_queues, 4)`).
    pub fn shards(&mut self, n: u32) -> &mut Self {
        self.shards = Some(n);
        self
    }

    /// Recycled-lane warm target of `kind`.
    pub fn warm_target(&mut self, kind: u32, target: u32) -> &mut Self {
        let k = kind as usize;
        if self.cfg.warm_targets.len() <= k {
            self.cfg.warm_targets.resize(k + 1, 0);
        }
        self.cfg.warm_targets[k] = target;
        self
    }

    /// Full-buffer policy.
    pub fn policy(&mut self, p: Policy) -> &mut Self {
        self.cfg.policy = p;
        self
    }

    /// Budget of one Block gate wait, in device cycles.
    pub fn block_budget_cycles(&mut self, c: u64) -> &mut Self {
        self.cfg.block_budget_cycles = c;
        self
    }

    /// Bound of one Drop gate wait, in device cycles.
    pub fn drop_wait_cycles(&mut self, c: u64) -> &mut Self {
        self.cfg.drop_wait_cycles = c;
        self
    }

    /// The optional host↔device wake-up hints ([`DfxConfig::doorbell_hint`]; default off).
    pub fn doorbell_hint(&mut self, on: bool) -> &mut Self {
        self.cfg.doorbell_hint = on;
        self
    }

    /// Validates and returns the configuration for records of type `R`.
    ///
    /// # Errors
    /// [`BuildError`] naming the first invalid setting.
    pub fn build<R: Record>(&mut self) -> Result<DfxConfig, BuildError> {
        let mut cfg = self.cfg.clone();
        cfg.record_size = size_of::<R>() as u32;
        if align_of::<R>() > 64 || size_of::<R>() % 8 != 0 {
            return Err(BuildError::RecordType);
        }
        if cfg.ready_queues as usize > MAX_READY_QUEUES || cfg.ready_queues == 0 {
            return Err(BuildError::Layout(LayoutError::ReadyQueues));
        }
        cfg.shards = self.shards.unwrap_or(cfg.ready_queues.min(4));
        if cfg.shards == 0 || cfg.shards > cfg.ready_queues {
            return Err(BuildError::Shards);
        }
        for (i, l) in cfg.lanes.iter().enumerate() {
            if l.ready_queue >= cfg.ready_queues {
                return Err(BuildError::LaneQueue { lane: i as u32 });
            }
        }
        cfg.layout().validate().map_err(BuildError::Layout)?;
        let kinds = cfg.kinds() as usize;
        cfg.warm_targets.resize(kinds.max(cfg.warm_targets.len()), 0);
        Ok(cfg)
    }
}
