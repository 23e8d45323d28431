//! Atomic file replacement: temp file in the target's directory, fsync, rename, fsync the directory.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Removes the temp file unless disarmed (covers errors and panics inside the write closure).
struct TempGuard {
    path: Option<PathBuf>,
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            // Best effort: the temp name is ours alone, and a leftover is harmless to readers (it
            // never has the target's name).
            let _ = fs::remove_file(p);
        }
    }
}

/// The temp path used while writing `path` (`.<name>.tmp.<pid>` beside it).
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp.{}", std::process::id()))
}

/// Writes `path` atomically: `write` fills a temp file beside it, which is flushed, fsynced and
/// renamed over `path`, then the directory is fsynced. Creates missing parent directories.
///
/// If `write` fails (or panics), the temp file is removed and `path` keeps its previous content
/// (or stays absent): a reader never sees a half-written file.
///
/// # Errors
///
/// Any I/O error of the steps above, or the error `write` returned.
///
/// # Examples
/// ```
/// let dir = std::env::temp_dir().join(format!("ferry-atomic-doc-{}", std::process::id()));
/// let p = dir.join("out.txt");
/// ferry_dfx::output::write_atomic(&p, |w| w.write_all(b"ok")).unwrap();
/// assert_eq!(std::fs::read(&p).unwrap(), b"ok");
/// let err = ferry_dfx::output::write_atomic(&p, |w| {
///     w.write_all(b"half")?;
///     Err(std::io::Error::other("aborted"))
/// });
/// assert!(err.is_err());
/// assert_eq!(std::fs::read(&p).unwrap(), b"ok"); // untouched
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn write_atomic<F>(path: &Path, write: F) -> io::Result<()>
where
    F: FnOnce(&mut dyn Write) -> io::Result<()>,
{
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&dir)?;
    let tmp = temp_path(path);
    let file = File::create(&tmp)?;
    let mut guard = TempGuard { path: Some(tmp.clone()) };
    let mut w = BufWriter::new(file);
    write(&mut w)?;
    w.flush()?;
    let file = w.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)?;
    guard.path = None;
    // Make the rename itself durable. Opening a directory read-only and fsyncing it is the POSIX
    // way; where the platform refuses, the data is still complete, only the rename's durability
    // is weaker, so that failure is not reported.
    if let Ok(d) = File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ferry-atomic-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn entries(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A writer that accepts `n` bytes and then fails, as a full disk would.
    struct FailAfter<'a> {
        inner: &'a mut dyn Write,
        left: usize,
    }

    impl Write for FailAfter<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.left == 0 {
                return Err(io::Error::other("disk full"));
            }
            let n = buf.len().min(self.left);
            self.left -= n;
            self.inner.write(&buf[..n])
        }
        fn flush(&mut self) -> io::Result<()> {
            self.inner.flush()
        }
    }

    #[test]
    fn failing_mid_write_leaves_no_file_and_no_temp() {
        let d = tmpdir("fail");
        let p = d.join("pmu.csv");
        let big = vec![b'x'; 100_000];
        let r = write_atomic(&p, |w| {
            let mut f = FailAfter { inner: w, left: 50_000 };
            f.write_all(&big)
        });
        assert!(r.is_err());
        assert!(entries(&d).is_empty(), "{:?}", entries(&d));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn failing_rewrite_keeps_the_previous_file() {
        let d = tmpdir("keep");
        let p = d.join("deps.json");
        write_atomic(&p, |w| w.write_all(b"{\"v\":1}")).unwrap();
        let r = write_atomic(&p, |w| {
            w.write_all(b"{\"v\":")?;
            Err(io::Error::other("aborted"))
        });
        assert_eq!(r.unwrap_err().to_string(), "aborted");
        assert_eq!(fs::read(&p).unwrap(), b"{\"v\":1}");
        assert_eq!(entries(&d), vec!["deps.json".to_string()]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn panicking_writer_leaves_no_temp() {
        let d = tmpdir("panic");
        let p = d.join("sub").join("scope_stats.jsonl");
        let r = std::panic::catch_unwind(|| {
            let _ = write_atomic(&p, |w| {
                w.write_all(b"{}")?;
                panic!("writer panicked mid-file");
            });
        });
        assert!(r.is_err());
        assert!(!p.exists());
        assert!(entries(&d.join("sub")).is_empty());
        fs::remove_dir_all(&d).unwrap();
    }
}
