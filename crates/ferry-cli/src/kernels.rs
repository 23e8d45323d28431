//! `ferry run --kernels LIB.so`: custom kernel libraries loaded into the runner before its runs.
use anyhow::Context;
use ferry_runtime::host::DeviceRunner;
use std::path::PathBuf;

/// Loads each library through the runner's AICPU-OS loader (the built-in kernel library's
/// path) and prints what it added. A refused library stops the command with the loader's typed
/// error; nothing of it was added.
///
/// # Errors
/// The first library that does not load, with its path.
pub(crate) fn load(runner: &mut DeviceRunner, libs: &[PathBuf]) -> anyhow::Result<()> {
    for path in libs {
        let added = runner
            .load_kernels_file(path)
            .with_context(|| format!("loading kernel library {}", path.display()))?;
        let names: Vec<String> =
            added.iter().map(|k| format!("{} (id {})", k.name, k.id)).collect();
        let library = added.first().and_then(|k| k.library.clone()).unwrap_or_default();
        crate::stdout::outln!(
            "{:<16} {} from {}: {}",
            "kernels:",
            library,
            path.display(),
            names.join(", ")
        )?;
    }
    Ok(())
}
