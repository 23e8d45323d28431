//! A process that is exiting (stopped by a signal) removes its device directories and creates
//! none from then on: once `device_root::remove_own` ran, opening a session and saving a
//! program's image are refused with an I/O error naming the directory, and nothing is written.
//! (Its own test binary: the halt is for the whole process.)
use ferry_sim::aicpu_os::OsError;
use ferry_sim::{Arch, PlatformBuilder};

#[test]
fn after_the_exit_halt_no_device_directory_or_file_is_created() {
    let _bound = ferry_watchdog::bound("the halted device's OS calls");
    // A runner's device root, as the runtime names them under the user's root.
    let parent = std::env::temp_dir().join(format!("ferry-halt-{}", std::process::id()));
    let root = parent.join(ferry_sim::device_root::process_dir_name(0));
    let p = PlatformBuilder::new(Arch::A2a3).hbm_bytes(1 << 20).device_root(&root).build().unwrap();
    let os = p.device(0).unwrap().aicpu_os();
    let session = os.open_session().unwrap();
    assert!(os.process_dir().is_dir(), "a session creates the process directory");
    ferry_sim::device_root::remove_own(&parent);
    assert!(ferry_sim::device_root::halted());
    assert!(!os.process_dir().exists(), "the exit halt removed this process's directory");
    match os.save_so_file("late.so", b"\x7fELF") {
        Err(OsError::Io { path, .. }) => assert_eq!(path, os.process_dir()),
        other => panic!("a save after the halt was not refused: {other:?}"),
    }
    assert!(!os.process_dir().exists(), "nothing was created");
    match os.open_session() {
        Err(OsError::Io { path, .. }) => assert_eq!(path, os.process_dir()),
        other => panic!("a session after the halt was not refused: {other:?}"),
    }
    assert!(!os.process_dir().exists());
    drop(session);
    let _ = std::fs::remove_dir_all(&parent);
}
