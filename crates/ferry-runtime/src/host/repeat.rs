//! Back-to-back runs of one graph through the launch pipeline (`ferry run --repeat N`, the
//! launch bench's runtime series).
//!
//! With `S` launch slots, up to `S` runs are held at once: run k is prepared (tensors, host-built
//! graph and per-run suffix uploaded into its own slot) while run k-1 executes, and run k-S+1's
//! outputs are read back, checked and freed while run k-1 executes too. The chip still runs one
//! run at a time: run k is launched (queued on the streams) while run k-1 executes, and the chip
//! starts it when run k-1 completes. With one slot every step is serial.
use super::{DeviceRunner, LaunchedRun, RunArgs, RunOutput, RunnerDevice};
use crate::error::RunError;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Why a repeated run stopped. Runs are numbered from 0; the earliest failing run is reported
/// (runs are finalized and checked in launch order).
#[derive(Debug, thiserror::Error)]
pub enum RepeatError<E: std::error::Error + 'static> {
    /// Run `run` failed to prepare, launch or finish.
    #[error("run {run} of runs 0..{runs}: {source}")]
    Run {
        /// The failing run (0-based).
        run: u32,
        /// Runs requested.
        runs: u32,
        /// Its failure.
        #[source]
        source: RunError,
    },
    /// Run `run` finished but its outputs did not pass the check.
    #[error("run {run} of runs 0..{runs}: wrong output: {source}")]
    Check {
        /// The failing run (0-based).
        run: u32,
        /// Runs requested.
        runs: u32,
        /// What the check found.
        #[source]
        source: E,
    },
}

impl<E: std::error::Error + 'static> RepeatError<E> {
    /// The failing run (0-based).
    pub fn run(&self) -> u32 {
        match self {
            RepeatError::Run { run, .. } | RepeatError::Check { run, .. } => *run,
        }
    }
}

/// Figures of a repeated run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RepeatReport {
    /// Runs that finished and passed the check.
    pub runs: u32,
    /// Wall time from the first prepare to the last run's check.
    pub elapsed: Duration,
    /// Launch slots the runner pipelines over.
    pub slots: u32,
}

impl RepeatReport {
    /// Runs per second over the whole repetition.
    pub fn runs_per_s(&self) -> f64 {
        f64::from(self.runs) / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl<P: RunnerDevice> DeviceRunner<P> {
    /// Runs callable `id` `runs` times back to back through the launch pipeline, checking each
    /// run's outputs with `check(k, output)` in launch order. `args(k)` gives run k's inputs
    /// (the same graph each time; `ferry run --repeat` passes identical arguments).
    ///
    /// # Errors
    /// The earliest failing run, as [`RepeatError::Run`] (prepare, launch or the run itself)
    /// or [`RepeatError::Check`]. Every run still held is finalized before returning, so the
    /// runner is ready for the next run whatever the outcome.
    pub fn repeat<E: std::error::Error + 'static>(
        &mut self,
        id: u32,
        runs: u32,
        mut args: impl FnMut(u32) -> RunArgs,
        mut check: impl FnMut(u32, &RunOutput) -> Result<(), E>,
    ) -> Result<RepeatReport, RepeatError<E>> {
        let slots = self.config().launch_slots.max(1) as usize;
        let start = Instant::now();
        let mut held: VecDeque<(u32, LaunchedRun<P>)> = VecDeque::with_capacity(slots);
        let mut finish = |r: &mut DeviceRunner<P>, k: u32, l: LaunchedRun<P>| {
            let out =
                r.finalize_run(l).map_err(|source| RepeatError::Run { run: k, runs, source })?;
            check(k, &out).map_err(|source| RepeatError::Check { run: k, runs, source })
        };
        // A failure while finalizing run j comes before every run still held (all later); a
        // failed prepare or launch of run k comes after them (all earlier), which are then
        // checked first.
        let mut failed = None;
        let mut later_held = false;
        for k in 0..runs {
            if held.len() == slots {
                let (j, l) = held.pop_front().expect("held is full");
                if let Err(e) = finish(self, j, l) {
                    (failed, later_held) = (Some(e), true);
                    break;
                }
            }
            match self.prepare(id, args(k)).and_then(|p| self.launch(p)) {
                Ok(l) => held.push_back((k, l)),
                Err(source) => {
                    failed = Some(RepeatError::Run { run: k, runs, source });
                    break;
                }
            }
        }
        let mut earliest_held = None;
        while let Some((j, l)) = held.pop_front() {
            if later_held {
                // After the reported failure: finalized (the runner must be idle), not checked.
                if let Err(e) = self.finalize_run(l) {
                    tracing::warn!(run = j, %e, "a run after the failed one");
                }
            } else if let Err(e) = finish(self, j, l) {
                earliest_held.get_or_insert(e);
            }
        }
        let first = if later_held { failed } else { earliest_held.or(failed) };
        if let Some(e) = first {
            return Err(e);
        }
        Ok(RepeatReport { runs, elapsed: start.elapsed(), slots: slots as u32 })
    }
}
