//! Loom model of the dispatch protocol between an AICPU scheduler and one AICore, with a second
//! dispatch queued behind the running one (`ferry_abi::regs::dispatch_progress`).
//!
//! The registers are atomics (`DATA_MAIN_BASE` written by the AICPU, `COND` by the core), the
//! payload pair two entries of plain memory (loom's `UnsafeCell`: an access that races another
//! without a happens-before edge fails the model). The scheduler follows the runtime's rules:
//! it dispatches to an idle core, queues the next dispatch only once `COND` shows the core took
//! the running one, and reads a dispatch's status line once `COND` says it finished (its FIN, or
//! the queued one's ACK or FIN, which may have overwritten that FIN). Each model checks that the
//! core ran every task once and in order, and that the scheduler read every task's own status.
//! A scheduler that queued before the ACK (the core could miss a dispatch, or read an entry
//! being rewritten) fails here, by a race or a wrong order. (One that took only FINs as ends
//! would still be correct here, only late: `dispatch_progress`'s own test pins that an ACK of
//! the queued dispatch ends the running one.)
//!
//! Run with
//! `RUSTFLAGS="--cfg ferry_loom" cargo test -p ferry-sim --release --test loom_dispatch`.
#![cfg(ferry_loom)]

mod loom_support;

use ferry_abi::regs::{
    cond_ack, cond_fin, dispatch_progress, AICORE_EXIT_SIGNAL, AICPU_IDLE, COND_EXITED, COND_IDLE,
};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::Arc;

/// One entry of the payload pair: the task the AICPU wrote, the status the core wrote.
struct Entry {
    task: UnsafeCell<u32>,
    status: UnsafeCell<u32>,
}

/// The core's register window and payload pair.
struct Core {
    dmb: AtomicU32,
    cond: AtomicU32,
    pair: [Entry; 2],
}

/// The status a core writes for task `t`.
fn status_of(t: u32) -> u32 {
    1000 + t
}

impl Core {
    fn new() -> Self {
        let entry = || Entry { task: UnsafeCell::new(0), status: UnsafeCell::new(0) };
        Core {
            // The window is open: the handshake is not modelled here.
            dmb: AtomicU32::new(AICPU_IDLE),
            cond: AtomicU32::new(COND_IDLE),
            pair: [entry(), entry()],
        }
    }

    fn entry(&self, id: u32) -> &Entry {
        &self.pair[ferry_abi::regs::payload_slot(id)]
    }
}

/// The AICore side (`aicore_execute`'s dispatch loop): returns the tasks it ran, in order.
fn core_loop(c: &Core) -> Vec<u32> {
    let mut last = 0;
    let mut ran = Vec::new();
    loop {
        let v = loop {
            // Acquire: pairs with the AICPU's Release write of `DATA_MAIN_BASE`, so the payload
            // entry it wrote first is visible.
            let v = c.dmb.load(Ordering::Acquire);
            if v != last && v != AICPU_IDLE {
                break v;
            }
            loom::thread::yield_now();
        };
        if v == AICORE_EXIT_SIGNAL {
            // Release: the AICPU's Acquire poll of `COND` sees the core done.
            c.cond.store(COND_EXITED, Ordering::Release);
            return ran;
        }
        last = v;
        // SAFETY: loom's cell pointer is valid for the closure; loom checks that the AICPU's
        // write of this entry happens before (the register's Release/Acquire pair).
        let task = c.entry(v).task.with(|p| unsafe { *p });
        // Release: the AICPU may rewrite the other entry only after this (it queues on ACK).
        c.cond.store(cond_ack(v), Ordering::Release);
        ran.push(task);
        // SAFETY: as above; the AICPU reads this status only after a later `COND` write.
        c.entry(v).status.with_mut(|p| unsafe { *p = status_of(task) });
        // Release: publishes the status line to the AICPU's Acquire read of `COND`.
        c.cond.store(cond_fin(v), Ordering::Release);
    }
}

/// The scheduler side for `n` tasks (task `t` gets dispatch id `t`): returns the statuses it
/// read, in completion order.
fn scheduler_loop(c: &Core, n: u32) -> Vec<u32> {
    let send = |id: u32| {
        // SAFETY: loom's cell pointer is valid for the closure; loom checks that the core's read
        // of this entry's previous task happened before (the rule under test).
        c.entry(id).task.with_mut(|p| unsafe { *p = id });
        // Release: publishes the payload entry to the core's Acquire read of the register.
        c.dmb.store(id, Ordering::Release);
    };
    // SAFETY: as above; the core's write of the status happens before (its `COND` Release).
    let status = |id: u32| c.entry(id).status.with(|p| unsafe { *p });
    let (mut next, mut running, mut pending) = (1u32, None::<u32>, None::<u32>);
    let mut read = Vec::new();
    while read.len() < n as usize {
        if let Some(r) = running {
            // Acquire: pairs with the core's Release stores of `COND`.
            let p = dispatch_progress(c.cond.load(Ordering::Acquire), r, pending);
            if p.running_done {
                read.push(status(r));
                running = pending.take();
                if p.pending_done {
                    read.push(status(running.take().unwrap()));
                }
            }
        }
        if next <= n {
            match running {
                None => {
                    send(next);
                    running = Some(next);
                    next += 1;
                }
                Some(r) if pending.is_none() => {
                    // Acquire: as above.
                    let cond = c.cond.load(Ordering::Acquire);
                    if dispatch_progress(cond, r, None).may_queue {
                        send(next);
                        pending = Some(next);
                        next += 1;
                    }
                }
                Some(_) => {}
            }
        }
        loom::thread::yield_now();
    }
    // Release: the core exits after its last FIN.
    c.dmb.store(AICORE_EXIT_SIGNAL, Ordering::Release);
    // Acquire: pairs with the core's Release store of `COND_EXITED`.
    while c.cond.load(Ordering::Acquire) != COND_EXITED {
        loom::thread::yield_now();
    }
    read
}

/// One model of this file: at most 10,000 branch points per execution.
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    loom_support::model(name, 10_000, f);
}

fn dispatch_n(n: u32) {
    let core = Arc::new(Core::new());
    let c = core.clone();
    let t = loom::thread::spawn(move || core_loop(&c));
    let read = scheduler_loop(&core, n);
    let ran = t.join().unwrap();
    let all: Vec<u32> = (1..=n).collect();
    assert_eq!(ran, all, "the core ran every task once, in order");
    let expected: Vec<u32> = all.iter().map(|&t| status_of(t)).collect();
    assert_eq!(read, expected, "the scheduler read each task's own status, in order");
}

#[test]
fn loom_dispatch_two_tasks() {
    model("loom_dispatch_two_tasks", || dispatch_n(2));
}

#[test]
fn loom_dispatch_three_tasks_reuse_an_entry() {
    model("loom_dispatch_three_tasks_reuse_an_entry", || dispatch_n(3));
}
