//! Standard output that ends quietly on a closed pipe.
//!
//! `println!` panics when stdout is a pipe whose reader has gone (`ferry dump list D | head -1`: exit
//! 101 and a panic message). Every command writes its stdout through [`print()`] or [`outln!`]
//! instead, which return the write error; `main` turns an error caused by a broken pipe into a
//! quiet exit 0, as coreutils do when their reader stops early, and reports every other error.

use std::io::{self, Write};

/// Writes `s` to stdout and flushes it.
///
/// # Errors
/// The write error (a broken pipe is recognised by [`is_broken_pipe`]).
pub(crate) fn print(s: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(s.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// `println!` through [`print()`]: evaluates to `anyhow::Result<()>`.
macro_rules! outln {
    () => {
        $crate::stdout::print("\n")
    };
    ($($arg:tt)*) => {
        $crate::stdout::print(&format!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use outln;

/// Whether `e` was caused by writing to a pipe nobody reads any more.
pub(crate) fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_pipe_is_recognised_through_context() {
        let e = anyhow::Error::from(io::Error::from(io::ErrorKind::BrokenPipe)).context("writing");
        assert!(is_broken_pipe(&e));
        let other = anyhow::Error::from(io::Error::from(io::ErrorKind::NotFound));
        assert!(!is_broken_pipe(&other));
    }
}
