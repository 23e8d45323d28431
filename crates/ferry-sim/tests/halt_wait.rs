//! The exit halt waits for a creation already under way: a device directory created after the
//! halt began, by a creation that had its permission before (`device_root::begin_create`), is
//! still removed, however late the creating thread runs. (Its own test binary: the halt is for
//! the whole process.)
use ferry_sim::device_root;

#[test]
fn the_exit_halt_removes_what_a_creation_under_way_makes_after_it_began() {
    let bound = ferry_watchdog::bound("the exit halt and the creating thread");
    let root = std::env::temp_dir().join(format!("ferry-halt-wait-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let dir = root.join(device_root::process_dir_name(1));
    // A creation that found the process running...
    let creating = device_root::begin_create().expect("the process is running");
    let halt = {
        let root = root.clone();
        std::thread::spawn(move || device_root::remove_own(&root))
    };
    // ...goes on only once the halt has begun, the worst case of a slow creator.
    bound.waiting_for("the halt to begin");
    while !device_root::halted() {
        std::thread::yield_now();
    }
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    drop(creating);
    bound.waiting_for("the halt to remove the process's directories");
    halt.join().unwrap();
    assert!(!dir.exists(), "the halt removed the directory created under way");
    assert!(device_root::begin_create().is_none(), "no creation starts after the halt");
    let _ = std::fs::remove_dir_all(&root);
}
