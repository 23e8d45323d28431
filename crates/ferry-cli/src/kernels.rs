//! `ferry run --kernels LIB.so`: what a custom kernel library added, printed as it loads.
use ferry_runtime::host::RegisteredKernel;
use std::path::Path;

/// Prints the kernels the library at `path` added: `kernels: <library> from <path>: <name (id)>…`.
///
/// # Errors
/// Writing stdout.
pub(crate) fn print_loaded(path: &Path, added: &[RegisteredKernel]) -> anyhow::Result<()> {
    let names: Vec<String> = added.iter().map(|k| format!("{} (id {})", k.name, k.id)).collect();
    let library = added.first().and_then(|k| k.library.clone()).unwrap_or_default();
    crate::stdout::outln!(
        "{:<16} {} from {}: {}",
        "kernels:",
        library,
        path.display(),
        names.join(", ")
    )
}
