//! The host-memory backend's AICore cores ([`HostMemoryCores`]): register windows in host
//! memory ([`CoreRegisters`]) and one host thread per core for a launch ([`AicoreLauncher`]).
use super::{lock, HostMemoryError};
use crate::{AicoreLauncher, BackendError, BackendOp, CoreLaunch, CoreRegisters};
use ferry_abi::arch::Arch;
use ferry_abi::regs::RegLayout;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

/// Where the cores' register windows are named: no device memory or alias is there
/// (`super::HBM_BASE`, `super::ALIAS_BASE`).
const REG_BASE: u64 = 0x3000_0000_0000_0000;

/// The AICore cores of a host-memory device: each core's register window (the arch's
/// `RegLayout::block_size` bytes of 32-bit registers) in host memory, and launches that run
/// the executor's body on one host thread per core. Nothing parks on a window here: a core's
/// body polls the registers it waits for ([`read`](Self::read)). Cheap to clone; clones name
/// the same cores.
#[derive(Clone, Debug)]
pub struct HostMemoryCores(Arc<Windows>);

#[derive(Debug)]
struct Windows {
    arch: Arch,
    cores: u32,
    /// Registers per window.
    words: usize,
    regs: Box<[AtomicU32]>,
}

impl HostMemoryCores {
    /// `cores` cores of `arch`'s register layout, every register 0.
    ///
    /// # Errors
    /// [`HostMemoryError::NoSuchCores`] for no core, or more than the arch's physical cores.
    pub fn new(arch: Arch, cores: u32) -> Result<Self, HostMemoryError> {
        let layout = RegLayout::of(arch);
        if cores == 0 || cores > layout.max_physical_cores {
            return Err(HostMemoryError::NoSuchCores {
                asked: cores,
                count: layout.max_physical_cores,
            });
        }
        let words = (layout.block_size / 4) as usize;
        let regs = (0..words * cores as usize).map(|_| AtomicU32::new(0)).collect();
        Ok(Self(Arc::new(Windows { arch, cores, words, regs })))
    }

    /// Register `offset` of core `core`'s window.
    ///
    /// # Panics
    /// As [`CoreRegisters::write_as_aicpu`].
    #[track_caller]
    pub fn read(&self, core: u32, offset: u32) -> u32 {
        // Acquire: pairs with the Release store of `write`, so what the writer wrote to device
        // memory before the register is visible to the reader after it.
        self.reg(core, offset).load(Ordering::Acquire)
    }

    /// The core whose register window is at `base` (one of
    /// [`reg_bases`](CoreRegisters::reg_bases)); `None` for any other address.
    pub fn core_at(&self, base: u64) -> Option<u32> {
        let rel = base.checked_sub(REG_BASE)?;
        let stride = self.0.words as u64 * 4;
        let core = u32::try_from(rel / stride).ok()?;
        (rel % stride == 0 && core < self.0.cores).then_some(core)
    }

    #[track_caller]
    fn reg(&self, core: u32, offset: u32) -> &AtomicU32 {
        let w = &self.0;
        assert!(core < w.cores, "core {core} of {}", w.cores);
        assert!(
            offset % 4 == 0 && ((offset / 4) as usize) < w.words,
            "register offset {offset:#x}"
        );
        &w.regs[core as usize * w.words + (offset / 4) as usize]
    }

    #[track_caller]
    fn write(&self, core: u32, offset: u32, value: u32) {
        // Release: the writer's earlier device-memory writes happen-before a reader's Acquire
        // load (`read`) that sees this value.
        self.reg(core, offset).store(value, Ordering::Release);
    }
}

impl CoreRegisters for HostMemoryCores {
    fn arch(&self) -> Arch {
        self.0.arch
    }

    fn core_count(&self) -> u32 {
        self.0.cores
    }

    /// Core `i`'s window is named `REG_BASE + i × block_size` (module docs, "Addresses").
    fn reg_bases(&self) -> Vec<u64> {
        let stride = self.0.words as u64 * 4;
        (0..u64::from(self.0.cores)).map(|i| REG_BASE + i * stride).collect()
    }

    #[track_caller]
    fn write_as_aicpu(&self, core: u32, offset: u32, value: u32) {
        self.write(core, offset, value);
    }

    #[track_caller]
    fn write_as_core(&self, core: u32, offset: u32, value: u32) {
        self.write(core, offset, value);
    }
}

/// A launch's cores as host threads, named `aicore-<index>`.
impl AicoreLauncher for HostMemoryCores {
    type CoreLaunch = HostMemoryCoreLaunch;

    fn launch_cores<F>(&self, cores: u32, body: F) -> Result<HostMemoryCoreLaunch, BackendError>
    where
        F: Fn(u32) -> Result<(), String> + Send + Sync + 'static,
    {
        if cores == 0 || cores > self.0.cores {
            let e = HostMemoryError::NoSuchCores { asked: cores, count: self.0.cores };
            return Err(BackendError::typed(BackendOp::Launch, e));
        }
        let body = Arc::new(body);
        let threads = (0..cores)
            .map(|i| {
                let body = body.clone();
                std::thread::Builder::new()
                    .name(format!("aicore-{i}"))
                    .spawn(move || body(i))
                    // As `std::thread::spawn`: a process that cannot start a thread is out of
                    // resources, not handed bad input.
                    .expect("starting a core's thread")
            })
            .collect();
        Ok(HostMemoryCoreLaunch { threads: Mutex::new(threads), done: OnceLock::new() })
    }
}

/// A launch on [`HostMemoryCores`]: its cores' threads, joined by the first
/// [`wait`](CoreLaunch::wait), whose result later waits repeat.
#[derive(Debug)]
pub struct HostMemoryCoreLaunch {
    threads: Mutex<Vec<JoinHandle<Result<(), String>>>>,
    done: OnceLock<Result<(), HostMemoryError>>,
}

impl CoreLaunch for HostMemoryCoreLaunch {
    fn wait(&self) -> Result<(), BackendError> {
        let r = self.done.get_or_init(|| {
            let threads = std::mem::take(&mut *lock(&self.threads));
            let mut first = Ok(());
            for (i, t) in threads.into_iter().enumerate() {
                let r = match t.join() {
                    Ok(r) => r,
                    Err(_) => Err("the core's body panicked".to_string()),
                };
                if let (Err(message), Ok(())) = (r, &first) {
                    first = Err(HostMemoryError::Kernel { name: format!("aicore {i}"), message });
                }
            }
            first
        });
        r.clone().map_err(|e| BackendError::typed(BackendOp::Execute, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_runs_the_body_once_per_core_and_types_its_failures() {
        let _bound = ferry_watchdog::bound("the host backend's core threads");
        let c = HostMemoryCores::new(Arch::A5, 3).unwrap();
        let main = RegLayout::of(Arch::A5).data_main_base as u32;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, cores) = (seen.clone(), c.clone());
        // Each core reports through its own window, as the executor's status does.
        let l = c
            .launch_cores(3, move |i| {
                lock(&s).push(i);
                cores.write_as_core(i, main, i + 10);
                Ok(())
            })
            .unwrap();
        l.wait().unwrap();
        let mut ran = lock(&seen).clone();
        ran.sort_unstable();
        assert_eq!(ran, [0, 1, 2]);
        assert_eq!((0..3).map(|i| c.read(i, main)).collect::<Vec<_>>(), [10, 11, 12]);
        assert!(l.wait().is_ok(), "a second wait repeats the first");

        let failed = c
            .launch_cores(2, |i| if i == 1 { Err("core 1 refused".into()) } else { Ok(()) })
            .unwrap();
        let e = failed.wait().unwrap_err();
        assert_eq!(e.op(), BackendOp::Execute);
        assert!(
            matches!(e.source_as(), Some(HostMemoryError::Kernel { message, .. }) if message == "core 1 refused"),
            "{e:?}"
        );
        assert_eq!(failed.wait().unwrap_err(), e, "a second wait repeats the first");

        for n in [0, 4] {
            let e = c.launch_cores(n, |_| Ok(())).unwrap_err();
            assert_eq!(e.op(), BackendOp::Launch);
            let want = HostMemoryError::NoSuchCores { asked: n, count: 3 };
            assert_eq!(e.source_as(), Some(&want));
        }
    }

    #[test]
    fn windows_are_per_core_and_checked() {
        let c = HostMemoryCores::new(Arch::A2a3, 2).unwrap();
        assert_eq!((c.arch(), c.core_count()), (Arch::A2a3, 2));
        let cond = RegLayout::of(Arch::A2a3).cond as u32;
        c.write_as_aicpu(1, cond, 5);
        assert_eq!((c.read(0, cond), c.read(1, cond)), (0, 5));
        let last = RegLayout::of(Arch::A2a3).block_size as u32 - 4;
        c.write_as_core(0, last, 1);
        assert_eq!((c.read(0, last), c.read(1, 0)), (1, 0), "the last register is the core's own");
        assert!(std::panic::catch_unwind(|| c.read(2, 0)).is_err(), "no core 2");
        assert!(std::panic::catch_unwind(|| c.read(0, last + 4)).is_err(), "past the window");
        assert!(std::panic::catch_unwind(|| c.read(0, 2)).is_err(), "unaligned");
        assert_eq!(
            HostMemoryCores::new(Arch::A2a3, 0).unwrap_err(),
            HostMemoryError::NoSuchCores { asked: 0, count: 75 }
        );
    }

    #[test]
    fn each_window_has_a_base_that_names_its_core() {
        let c = HostMemoryCores::new(Arch::A5, 3).unwrap();
        let bases = c.reg_bases();
        assert_eq!(bases.len(), 3);
        let block = RegLayout::of(Arch::A5).block_size;
        for (i, &b) in bases.iter().enumerate() {
            assert_eq!(c.core_at(b), Some(i as u32));
            assert_eq!(c.core_at(b + 4), None, "inside a window is not a base");
        }
        assert_eq!(bases[1] - bases[0], block, "one window apart");
        assert_eq!(c.core_at(bases[2] + block), None, "past the last core");
        assert_eq!(c.core_at(bases[0] - block), None, "before the first");
        assert_eq!(c.core_at(0), None);
    }
}
