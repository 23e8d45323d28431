//! Test fixtures: a temporary directory holding the DFX sample run's files.
use std::path::PathBuf;

use ferry_profile::{sample::sample_run, write_run, LossPolicy};

/// A directory removed on drop.
pub(crate) struct TestDir {
    pub(crate) path: PathBuf,
}

impl TestDir {
    pub(crate) fn new(tag: &str) -> Self {
        let path = std::env::temp_dir().join(format!("ferry-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self { path }
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The sample run (Block, or Drop with losses) written into a fresh directory.
pub(crate) fn sample_dir(tag: &str, drop: bool) -> TestDir {
    let d = TestDir::new(tag);
    let policy = if drop { LossPolicy::Drop } else { LossPolicy::Block };
    write_run(&d.path, &sample_run(policy)).unwrap();
    d
}
