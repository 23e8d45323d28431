//! A launch's blocks are claimed from a shared cursor: a helper thread that is held up does
//! not hold a fixed share of the launch back; the other threads claim the blocks it has not.
use ferry_sim::kernel::BLOCK_ITEMS;
use ferry_sim::{Arch, PlatformBuilder};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[test]
fn a_held_up_helper_holds_back_only_the_block_it_claimed() {
    let _bound =
        ferry_watchdog::bound("the launch's blocks: a fixed share waits for a held-up helper");
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(1 << 20).block_workers(2).build().unwrap();
    let d = p.device(0).unwrap();
    let items = 16 * BLOCK_ITEMS;
    let done = AtomicUsize::new(0);
    let seen = Mutex::new(vec![0u32; items]);
    let r = d.run_blocks(items, |range| {
        if std::thread::current().name() == Some("sim-block") {
            // The helper holds its first block until every other block is done: the calling
            // thread must have claimed all of them, however the two threads were scheduled
            // (with a share fixed per thread, the helper's half would wait for ever).
            assert_eq!(range.len(), BLOCK_ITEMS);
            // Acquire: pairs with the Release increments below.
            while done.load(Ordering::Acquire) < items - BLOCK_ITEMS {
                std::thread::yield_now();
            }
        }
        let mut s = seen.lock().unwrap();
        for i in range.clone() {
            s[i] += 1;
        }
        drop(s);
        // Release: pairs with the helper's Acquire load.
        done.fetch_add(range.len(), Ordering::Release);
        Ok(())
    });
    assert_eq!(r, Ok(()));
    assert!(seen.into_inner().unwrap().iter().all(|&n| n == 1), "every item ran once");
}

#[test]
fn a_failing_block_is_the_launchs_error_and_the_other_blocks_still_run() {
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(1 << 20).block_workers(2).build().unwrap();
    let d = p.device(0).unwrap();
    let items = 8 * BLOCK_ITEMS;
    let ran = AtomicUsize::new(0);
    let r = d.run_blocks(items, |range| {
        // Relaxed: a count read after the launch returned (the scope joined every thread).
        ran.fetch_add(range.len(), Ordering::Relaxed);
        if range.start == 3 * BLOCK_ITEMS {
            return Err(format!("block at {}", range.start));
        }
        Ok(())
    });
    assert_eq!(r, Err(format!("block at {}", 3 * BLOCK_ITEMS)));
    // The thread that failed stops claiming; the other claims every block left.
    assert_eq!(ran.into_inner(), items);
}
