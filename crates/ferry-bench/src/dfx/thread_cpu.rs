//! Where a run's CPU time goes, by thread role: the simulated chip's AICPU and AICore threads
//! and the DFX host engine, from the kernel's per-thread accounting (`/proc/self/task/*/
//! schedstat`, Linux).
//!
//! On a machine with fewer cores than the chip has threads, a run is CPU-bound: its throughput
//! follows the CPU time its threads need, so what DFX adds per record on each role says more
//! about its cost than the throughput ratio alone (which also carries the simulator's own
//! scheduling of two dozen threads on two cores).

use std::collections::BTreeMap;

/// The role of a process thread, by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ThreadRole {
    /// A simulated AICPU thread (`aicpu-…`): the orchestrator and the schedulers.
    Aicpu,
    /// A simulated AICore (`aicore-…`).
    Aicore,
    /// A thread of the DFX host engine (`ferry-dfx-…`: drain, collector, replenish).
    DfxHost,
    /// Anything else (the caller, stream workers).
    Other,
}

impl ThreadRole {
    /// The role of a thread named `comm` (the kernel keeps the first 15 bytes of a name).
    pub fn of(comm: &str) -> ThreadRole {
        if comm.starts_with("aicpu-") {
            ThreadRole::Aicpu
        } else if comm.starts_with("aicore-") {
            ThreadRole::Aicore
        } else if comm.starts_with("ferry-dfx-") {
            ThreadRole::DfxHost
        } else {
            ThreadRole::Other
        }
    }
}

/// CPU time by role over an interval, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RoleCpu {
    /// AICPU threads.
    pub aicpu_ns: f64,
    /// AICore threads.
    pub aicore_ns: f64,
    /// DFX host engine threads.
    pub dfx_host_ns: f64,
}

/// The CPU time each live thread of this process has used so far: thread id → (role, ns).
#[derive(Clone, Debug, Default)]
pub struct ThreadCpu {
    threads: BTreeMap<u32, (ThreadRole, u64)>,
}

impl ThreadCpu {
    /// Reads every thread of this process; `None` where the kernel does not say (not Linux, or
    /// `/proc` unreadable). A thread that exits while it is read is left out.
    pub fn snapshot() -> Option<ThreadCpu> {
        let mut threads = BTreeMap::new();
        for e in std::fs::read_dir("/proc/self/task").ok()? {
            let Ok(e) = e else { continue };
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let dir = e.path();
            let (Ok(comm), Ok(stat)) = (
                std::fs::read_to_string(dir.join("comm")),
                std::fs::read_to_string(dir.join("schedstat")),
            ) else {
                continue;
            };
            let Some(ns) = parse_schedstat(&stat) else { continue };
            threads.insert(tid, (ThreadRole::of(comm.trim_end()), ns));
        }
        Some(ThreadCpu { threads })
    }

    /// CPU time by role from `before` to `self`: a thread in both counts its difference, a
    /// thread started since counts all of its time, a thread gone since counts nothing (read
    /// `self` before the threads of interest exit).
    pub fn since(&self, before: &ThreadCpu) -> RoleCpu {
        let mut out = RoleCpu::default();
        for (tid, &(role, ns)) in &self.threads {
            let was = before.threads.get(tid).filter(|(r, _)| *r == role).map_or(0, |&(_, n)| n);
            let d = ns.saturating_sub(was) as f64;
            match role {
                ThreadRole::Aicpu => out.aicpu_ns += d,
                ThreadRole::Aicore => out.aicore_ns += d,
                ThreadRole::DfxHost => out.dfx_host_ns += d,
                ThreadRole::Other => {}
            }
        }
        out
    }
}

/// The first field of a `schedstat` line: nanoseconds on a CPU.
fn parse_schedstat(s: &str) -> Option<u64> {
    s.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_follow_the_thread_names() {
        let _bound = ferry_watchdog::bound("the other thread");
        assert_eq!(ThreadRole::of("aicpu-0-3"), ThreadRole::Aicpu);
        assert_eq!(ThreadRole::of("aicore-1-17"), ThreadRole::Aicore);
        assert_eq!(ThreadRole::of("ferry-dfx-colle"), ThreadRole::DfxHost);
        assert_eq!(ThreadRole::of("ferry-dfx-drain"), ThreadRole::DfxHost);
        assert_eq!(ThreadRole::of("sim-stream-0-1"), ThreadRole::Other);
        assert_eq!(ThreadRole::of("ferry"), ThreadRole::Other);
    }

    #[test]
    fn schedstat_gives_its_first_field() {
        let _bound = ferry_watchdog::bound("the other thread");
        assert_eq!(parse_schedstat("123456 789 10\n"), Some(123_456));
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
    }

    #[test]
    fn intervals_count_new_threads_whole_and_differences_of_the_others() {
        let _bound = ferry_watchdog::bound("the other thread");
        let before = ThreadCpu {
            threads: [(1, (ThreadRole::Aicpu, 100)), (2, (ThreadRole::Aicore, 50))].into(),
        };
        let after = ThreadCpu {
            threads: [
                (1, (ThreadRole::Aicpu, 160)),
                (2, (ThreadRole::Aicore, 80)),
                (3, (ThreadRole::DfxHost, 40)),
                (4, (ThreadRole::Other, 1000)),
            ]
            .into(),
        };
        let d = after.since(&before);
        assert_eq!(d, RoleCpu { aicpu_ns: 60.0, aicore_ns: 30.0, dfx_host_ns: 40.0 });
        // A thread id reused by a thread of another role counts from zero.
        let reused = ThreadCpu { threads: [(2, (ThreadRole::DfxHost, 70))].into() };
        assert_eq!(reused.since(&before).dfx_host_ns, 70.0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_named_thread_that_burns_cpu_is_seen_in_its_role() {
        let _bound = ferry_watchdog::bound("the other thread");
        let before = ThreadCpu::snapshot().expect("Linux has /proc/self/task");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::Builder::new()
            .name("aicore-test-0".into())
            .spawn(move || {
                // A fixed amount of work (tens of ms of CPU), however loaded the machine is.
                let mut x = 0u64;
                for i in 0..40_000_000u64 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                }
                ready_tx.send(()).unwrap();
                // Stay alive until the snapshot is taken.
                let _ = rx.recv();
                x
            })
            .unwrap();
        ready_rx.recv().unwrap();
        let after = ThreadCpu::snapshot().unwrap();
        tx.send(()).unwrap();
        t.join().unwrap();
        let d = after.since(&before);
        // Other tests of this process may run chips meanwhile: only a lower bound holds.
        assert!(d.aicore_ns >= 5e6, "{d:?}");
    }
}
