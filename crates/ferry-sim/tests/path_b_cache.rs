//! The cache primitives of the launch design's table, one by one, on a handshake slot polled from the
//! custom scheduler's cluster (the Path B hang, docs/design/launch.md): volatile and acquire loads stay stale, `dc civac`
//! writes the stale line back over AICore's report, `dc ivac` does nothing without fix A and
//! refetches with it; coherent clusters see the report at once and the model does no work.
use ferry_abi::handshake::Handshake;
use ferry_abi::launch::AbiRecord;
use ferry_abi::services::{
    DeviceServices, CACHE_OP_CIVAC, CACHE_OP_IVAC, MEM_LOAD_ACQUIRE, MEM_LOAD_PLAIN,
    MEM_LOAD_VOLATILE, MEM_STORE_PLAIN, STATUS_BAD_ADDRESS, STATUS_OK,
};
use ferry_sim::cache::{CacheStats, Cluster};
use ferry_sim::cores::{Chip, CoreConfig};
use ferry_sim::profile::{DeviceProfile, PathBFixes};
use ferry_sim::{Arch, DevicePtr, PlatformBuilder};
use std::sync::mpsc;
use std::sync::Arc;

const DONE: u64 = 4;
const TASK: u64 = 8;
const PCID: u64 = 20;

struct Rig {
    _root: std::path::PathBuf,
    chip: Chip,
    slot: DevicePtr,
}

fn rig(name: &str, f: impl FnOnce(&mut PlatformBuilder)) -> Rig {
    let root =
        std::env::temp_dir().join(format!("ferry-path-b-cache-{}-{name}", std::process::id()));
    let mut b = PlatformBuilder::new(Arch::A2a3);
    b.hbm_bytes(1 << 24).device_root(&root);
    f(&mut b);
    let p = b.build().unwrap();
    let dev = p.device(0).unwrap().clone();
    let chip = Chip::new(dev.clone(), CoreConfig { aicpu_threads: 1, aic: 1, aiv: 0 }).unwrap();
    let slot = dev.malloc(64).unwrap();
    dev.copy_htod(Handshake::zeroed().as_bytes(), slot).unwrap();
    Rig { _root: root, chip, slot }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self._root);
    }
}

fn services(chip: &Chip) -> DeviceServices {
    // SAFETY: the table lives as long as the device, which every test's rig keeps alive.
    unsafe { *chip.device().aicpu_os().services() }
}

fn load(svc: &DeviceServices, addr: u64, kind: u32) -> u32 {
    let mut v = 0u64;
    assert_eq!((svc.mem_load)(svc.ctx, addr, 4, kind, &mut v), STATUS_OK);
    v as u32
}

/// AICore's report, written to memory (not through any AICPU cache).
fn report(rig: &Rig, done: u32, pcid: u32) {
    let dev = rig.chip.device();
    dev.copy_htod(&pcid.to_le_bytes(), rig.slot.add(PCID)).unwrap();
    dev.copy_htod(&done.to_le_bytes(), rig.slot.add(DONE)).unwrap();
}

fn memory_u32(rig: &Rig, off: u64) -> u32 {
    let mut b = [0u8; 4];
    rig.chip.device().copy_dtoh(rig.slot.add(off), &mut b).unwrap();
    u32::from_le_bytes(b)
}

/// Runs `body` on one AICPU thread of `cluster`: it first loads `aicore_done` (filling its
/// line), then the host writes the report, then `body` polls. Returns what `body` returned.
fn poll_after_report<T: Send + 'static>(
    rig: &Rig,
    cluster: Cluster,
    body: impl Fn(&DeviceServices, u64) -> T + Send + Sync + 'static,
) -> T {
    let (svc, addr) = (services(&rig.chip), rig.slot.0);
    let (loaded_tx, loaded_rx) = mpsc::sync_channel::<()>(1);
    let (go_tx, go_rx) = mpsc::sync_channel::<()>(1);
    let (out_tx, out_rx) = mpsc::sync_channel::<T>(1);
    let go_rx = std::sync::Mutex::new(go_rx);
    let body = Arc::new(body);
    let done = rig
        .chip
        .device()
        .aicpu_os()
        .launch_on_cluster(
            &rig.chip,
            cluster,
            1,
            Arc::new(move |_| {
                assert_eq!(load(&svc, addr + DONE, MEM_LOAD_PLAIN), 0, "pending before the report");
                loaded_tx.send(()).map_err(|e| e.to_string())?;
                go_rx.lock().unwrap().recv().map_err(|e| e.to_string())?;
                out_tx.send(body(&svc, addr)).map_err(|e| e.to_string())
            }),
        )
        .unwrap();
    loaded_rx.recv().unwrap();
    report(rig, 1, 5);
    go_tx.send(()).unwrap();
    let out = out_rx.recv().unwrap();
    done.wait().unwrap();
    out
}

fn stats(rig: &Rig) -> CacheStats {
    rig.chip.device().aicpu_os().cache_stats()
}

#[test]
fn path_b_cache_volatile_and_acquire_loads_stay_stale() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let rig = rig("loads", |_| {});
    let seen = poll_after_report(&rig, Cluster::Custom, |svc, addr| {
        [MEM_LOAD_PLAIN, MEM_LOAD_VOLATILE, MEM_LOAD_ACQUIRE]
            .map(|k| (0..100).map(|_| load(svc, addr + DONE, k)).max().unwrap())
    });
    assert_eq!(seen, [0, 0, 0], "every load kind reads the stale line");
    assert_eq!(memory_u32(&rig, DONE), 1, "memory holds the report");
    let st = stats(&rig);
    assert_eq!(st.line_fills, 1, "{st:?}");
    assert_eq!(st.hits, 300, "{st:?}");
}

#[test]
fn path_b_cache_civac_clobbers_the_aicore_fields_on_the_line() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let rig = rig("civac", |_| {});
    let after = poll_after_report(&rig, Cluster::Custom, |svc, addr| {
        // The AICPU writes its own field on the line (it is now dirty), then spins with civac.
        assert_eq!((svc.mem_store)(svc.ctx, addr + TASK, 8, 0xfeed, MEM_STORE_PLAIN), STATUS_OK);
        assert_eq!((svc.cache_op)(svc.ctx, addr + DONE, CACHE_OP_CIVAC), STATUS_OK);
        load(svc, addr + DONE, MEM_LOAD_ACQUIRE)
    });
    assert_eq!(after, 0, "still stale after civac");
    // The test detects the corruption: AICore's report is gone from memory, the AICPU's field
    // is there.
    assert_eq!(memory_u32(&rig, DONE), 0, "aicore_done clobbered by the stale write-back");
    assert_eq!(memory_u32(&rig, PCID), 0, "physical_core_id clobbered");
    let mut task = [0u8; 8];
    rig.chip.device().copy_dtoh(rig.slot.add(TASK), &mut task).unwrap();
    assert_eq!(u64::from_le_bytes(task), 0xfeed);
    let st = stats(&rig);
    assert_eq!((st.writebacks, st.ignored_ops), (1, 1), "{st:?}");
}

#[test]
fn path_b_cache_ivac_is_a_no_op_without_fix_a_and_refetches_with_it() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let rig_default = rig("ivac-off", |_| {});
    let seen = poll_after_report(&rig_default, Cluster::Custom, |svc, addr| {
        assert_eq!((svc.cache_op)(svc.ctx, addr + DONE, CACHE_OP_IVAC), STATUS_OK, "looks run");
        load(svc, addr + DONE, MEM_LOAD_PLAIN)
    });
    assert_eq!(seen, 0);
    assert_eq!((stats(&rig_default).ignored_ops, stats(&rig_default).invalidations), (1, 0));

    let rig_a = rig("ivac-a", |b| {
        b.path_b_fixes(PathBFixes { el0_cache_maintenance: true, ..PathBFixes::NONE });
    });
    let seen = poll_after_report(&rig_a, Cluster::Custom, |svc, addr| {
        let before = load(svc, addr + DONE, MEM_LOAD_PLAIN);
        assert_eq!((svc.cache_op)(svc.ctx, addr + DONE, CACHE_OP_IVAC), STATUS_OK);
        (before, load(svc, addr + DONE, MEM_LOAD_PLAIN), load(svc, addr + PCID, MEM_LOAD_PLAIN))
    });
    assert_eq!(seen, (0, 1, 5), "stale until invalidated, then the report");
    let st = stats(&rig_a);
    assert_eq!((st.invalidations, st.line_fills, st.ignored_ops), (1, 2, 0), "{st:?}");
}

#[test]
fn path_b_cache_coherent_clusters_see_the_report_and_do_no_cache_work() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let fix_c = PathBFixes { same_cluster_affinity: true, ..PathBFixes::NONE };
    for (name, cluster, profile, fixes) in [
        ("main", Cluster::Main, DeviceProfile::Vendor, PathBFixes::NONE),
        ("relaxed", Cluster::Custom, DeviceProfile::Relaxed, PathBFixes::NONE),
        ("fix-c", Cluster::Custom, DeviceProfile::Vendor, fix_c),
    ] {
        let rig = rig(name, |b| {
            b.profile(profile).path_b_fixes(fixes);
        });
        let seen = poll_after_report(&rig, cluster, |svc, addr| {
            // civac on a coherent cluster has nothing to write back: the report survives.
            assert_eq!((svc.cache_op)(svc.ctx, addr + DONE, CACHE_OP_CIVAC), STATUS_OK);
            load(svc, addr + DONE, MEM_LOAD_PLAIN)
        });
        assert_eq!(seen, 1, "{name}");
        assert_eq!(memory_u32(&rig, PCID), 5, "{name}");
        assert!(stats(&rig).is_idle(), "{name}: {:?}", stats(&rig));
    }
    // Fix B: straight to memory as well, each access counted, no line cached.
    let rig_b = rig("fix-b", |b| {
        b.path_b_fixes(PathBFixes { noncacheable_handshake: true, ..PathBFixes::NONE });
    });
    assert_eq!(poll_after_report(&rig_b, Cluster::Custom, |s, a| load(s, a + DONE, 0)), 1);
    let st = stats(&rig_b);
    assert_eq!((st.uncached_accesses, st.line_fills), (2, 0), "{st:?}");
}

#[test]
fn path_b_cache_bad_addresses_are_refused_and_stores_reach_memory() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let rig = rig("bad", |_| {});
    let (svc, addr) = (services(&rig.chip), rig.slot.0);
    let done = rig
        .chip
        .device()
        .aicpu_os()
        .launch_on_cluster(
            &rig.chip,
            Cluster::Custom,
            1,
            Arc::new(move |_| {
                let svc: &DeviceServices = &svc; // the whole (Send + Sync) table, not its fields
                let mut v = 0;
                let bad = [
                    (svc.mem_load)(svc.ctx, 0x1234, 4, 0, &mut v),
                    (svc.mem_load)(svc.ctx, addr + 2, 4, 0, &mut v),
                    (svc.mem_store)(svc.ctx, 0x1234, 8, 1, 0),
                    (svc.cache_op)(svc.ctx, 0x1234, CACHE_OP_IVAC),
                ];
                if bad != [STATUS_BAD_ADDRESS; 4] {
                    return Err(format!("{bad:?}"));
                }
                // A store updates the cached line and reaches memory.
                let _ = (svc.mem_store)(svc.ctx, addr + TASK, 8, 0xabc, MEM_STORE_PLAIN);
                let mut back = 0;
                let _ = (svc.mem_load)(svc.ctx, addr + TASK, 8, 0, &mut back);
                if back != 0xabc {
                    return Err(format!("read back {back:#x}"));
                }
                Ok(())
            }),
        )
        .unwrap();
    done.wait().unwrap();
    let mut task = [0u8; 8];
    rig.chip.device().copy_dtoh(rig.slot.add(TASK), &mut task).unwrap();
    assert_eq!(u64::from_le_bytes(task), 0xabc, "the store reached memory");
    assert_eq!(rig.chip.device().aicpu_os().cache_stats().writebacks, 0, "no civac, no write-back");
}

/// The line fills of the cached launch now running (what a late AICore start waits for): they
/// count while the launch's threads run, read 0 before, and start over at 0 once its last
/// thread has left, so the next launch counts its own.
#[test]
fn path_b_cache_launch_line_fills_count_per_launch_and_reset_when_it_ends() {
    let bound = ferry_watchdog::bound("the cached AICPU thread");
    let rig = rig("launch-fills", |_| {});
    let dev = rig.chip.device().clone();
    let lines = dev.malloc(4 * 64).unwrap();
    dev.copy_htod(&[0u8; 4 * 64], lines).unwrap();
    let os = dev.aicpu_os();
    assert_eq!(os.launch_line_fills(), 0, "no cached launch runs");
    for touched in [3u64, 1] {
        let svc = services(&rig.chip);
        let (filled_tx, filled_rx) = mpsc::sync_channel::<()>(1);
        let (go_tx, go_rx) = mpsc::sync_channel::<()>(1);
        let go_rx = std::sync::Mutex::new(go_rx);
        let done = os
            .launch_on_cluster(
                &rig.chip,
                Cluster::Custom,
                1,
                Arc::new(move |_| {
                    for i in 0..touched {
                        load(&svc, lines.0 + 64 * i, MEM_LOAD_PLAIN);
                    }
                    filled_tx.send(()).map_err(|e| e.to_string())?;
                    go_rx.lock().unwrap().recv().map_err(|e| e.to_string())
                }),
            )
            .unwrap();
        bound.waiting_for("the cached thread to fill its lines");
        filled_rx.recv().unwrap();
        assert_eq!(os.launch_line_fills(), touched, "the running launch's fills");
        go_tx.send(()).unwrap();
        bound.waiting_for("the cached launch to end");
        done.wait().unwrap();
        assert_eq!(os.launch_line_fills(), 0, "reset once the launch's last thread left");
    }
    let st = stats(&rig);
    assert_eq!(st.line_fills, 4, "the device's total keeps counting");
    assert!(!st.is_idle(), "the model did work: {st:?}");
}

/// Outside a launch (a host thread calling the services) every access is checked against live
/// memory: a word of a freed allocation is refused, never read through a pointer kept from an
/// earlier access.
#[test]
fn path_b_cache_outside_a_launch_a_freed_word_is_refused() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let rig = rig("outside", |_| {});
    let svc = services(&rig.chip);
    let dev = rig.chip.device().clone();
    let buf = dev.malloc(64).unwrap();
    let mut v = 0;
    assert_eq!((svc.mem_load)(svc.ctx, buf.0, 4, MEM_LOAD_PLAIN, &mut v), STATUS_OK);
    dev.free(buf).unwrap();
    let refused = (svc.mem_load)(svc.ctx, buf.0, 4, MEM_LOAD_PLAIN, &mut v);
    assert_eq!(refused, STATUS_BAD_ADDRESS, "a freed word is refused");
    assert!(stats(&rig).is_idle(), "a host thread's access does no cache work");
}

/// A service access moves exactly its width: a 4-byte load reads one word and a 4-byte store
/// leaves the next word alone; 8-byte accesses move both.
#[test]
fn path_b_cache_loads_and_stores_move_exactly_their_width() {
    let _bound = ferry_watchdog::bound("the simulated chip's threads");
    let rig = rig("width", |_| {});
    let svc = services(&rig.chip);
    let dev = rig.chip.device().clone();
    let buf = dev.malloc(64).unwrap();
    dev.copy_htod(&0x2222_2222_1111_1111u64.to_le_bytes(), buf).unwrap();
    let mut v = 0;
    assert_eq!((svc.mem_load)(svc.ctx, buf.0, 4, MEM_LOAD_PLAIN, &mut v), STATUS_OK);
    assert_eq!(v, 0x1111_1111);
    assert_eq!((svc.mem_load)(svc.ctx, buf.0, 8, MEM_LOAD_PLAIN, &mut v), STATUS_OK);
    assert_eq!(v, 0x2222_2222_1111_1111);
    assert_eq!((svc.mem_store)(svc.ctx, buf.0, 4, 0x3333_3333, MEM_STORE_PLAIN), STATUS_OK);
    let mut back = [0u8; 8];
    dev.copy_dtoh(buf, &mut back).unwrap();
    assert_eq!(u64::from_le_bytes(back), 0x2222_2222_3333_3333, "the next word is untouched");
    assert_eq!((svc.mem_store)(svc.ctx, buf.0, 8, 0x5555_5555_4444_4444, 0), STATUS_OK);
    dev.copy_dtoh(buf, &mut back).unwrap();
    assert_eq!(u64::from_le_bytes(back), 0x5555_5555_4444_4444);
}

/// Runs `body` on one AICPU thread of the cached cluster (with fix A's invalidate) and waits.
fn run_cached(rig: &Rig, body: impl Fn(&DeviceServices) + Send + Sync + 'static) {
    let svc = services(&rig.chip);
    let done = rig
        .chip
        .device()
        .aicpu_os()
        .launch_on_cluster(
            &rig.chip,
            Cluster::Custom,
            1,
            Arc::new(move |_| {
                body(&svc);
                Ok(())
            }),
        )
        .unwrap();
    done.wait().unwrap();
}

/// A thread's line cache holds `LINES_PER_THREAD` lines and evicts the oldest fill first; an
/// invalidated line leaves the eviction order too, so the next eviction still takes the oldest
/// line that is cached.
#[test]
fn path_b_cache_lines_are_evicted_oldest_first_at_capacity_and_after_an_invalidate() {
    let _bound = ferry_watchdog::bound("the cached AICPU thread");
    let rig = rig("evict", |b| {
        b.path_b_fixes(PathBFixes { el0_cache_maintenance: true, ..PathBFixes::NONE });
    });
    const N: u64 = ferry_sim::cache::LINES_PER_THREAD as u64;
    let dev = rig.chip.device().clone();
    let base = dev.malloc((N + 2) * 64).unwrap();
    dev.copy_htod(&vec![0u8; ((N + 2) * 64) as usize], base).unwrap();
    let at = move |i: u64| base.0 + 64 * i;
    run_cached(&rig, move |svc| {
        for i in 0..N {
            load(svc, at(i), MEM_LOAD_PLAIN); // full: N fills
        }
        load(svc, at(0), MEM_LOAD_PLAIN); // hit: every line fits
        load(svc, at(N), MEM_LOAD_PLAIN); // fill, evicting line 0 (the oldest)
        load(svc, at(1), MEM_LOAD_PLAIN); // hit
        load(svc, at(0), MEM_LOAD_PLAIN); // fill, evicting line 1
    });
    let st = stats(&rig);
    assert_eq!((st.line_fills, st.hits), (N + 2, 2), "{st:?}");

    run_cached(&rig, move |svc| {
        for i in 0..N {
            load(svc, at(i), MEM_LOAD_PLAIN); // full again
        }
        assert_eq!((svc.cache_op)(svc.ctx, at(5), CACHE_OP_IVAC), STATUS_OK); // one free slot
        load(svc, at(N), MEM_LOAD_PLAIN); // fill into the free slot: nothing evicted
        load(svc, at(N + 1), MEM_LOAD_PLAIN); // fill, evicting line 0
        load(svc, at(1), MEM_LOAD_PLAIN); // hit
        load(svc, at(0), MEM_LOAD_PLAIN); // fill
    });
    let st2 = stats(&rig);
    let (fills, hits) = (st2.line_fills - st.line_fills, st2.hits - st.hits);
    assert_eq!((fills, hits, st2.invalidations), (N + 3, 1, 1), "{st2:?}");
}
