//! The most ferry reads of each file of a profile, with or without a manifest.
//!
//! Every file of a profile is opened through the profile directory's handle without following
//! a link, must be a regular file (a FIFO or device is refused before any read), and is read
//! through a cap that the read itself enforces (`ferry_fs::Input`). With a manifest, the cap is
//! the size the run wrote (and a file of another size is refused before it is read); the limits
//! below bound both that size and what is read of a profile without a manifest. Line-oriented
//! files (`pmu.csv`, `scope_stats.jsonl`) also bound each line, so a file without a newline is
//! not taken in as one line.
//!
//! | file | limit |
//! |---|---|
//! | `chip_swimlane_records.json`, `deps.json`, `args_dump/args_dump.json`, `pmu.csv`, `scope_stats/scope_stats.jsonl` | [`MAX_RECORDS_FILE_BYTES`] |
//! | `args_dump/args.bin` (read one payload at a time, never whole) | [`MAX_PAYLOAD_FILE_BYTES`] |
//! | `runs.json`, `summary.json`, `pmu.dfx.json`, `name_map_*.json` | [`MAX_SMALL_FILE_BYTES`] |
//! | `scope_stats/scope_names.json` | [`MAX_SCOPE_NAMES_BYTES`](super::MAX_SCOPE_NAMES_BYTES) |
//! | `ferry-manifest.json` | [`MAX_MANIFEST_BYTES`](super::MANIFEST_MAX_BYTES) |
//! | a line of `pmu.csv` or `scope_stats.jsonl` | [`MAX_LINE_BYTES`] |
use std::io::BufRead;

use super::{
    OutputError, ARGS_BIN_FILE, MANIFEST_FILE, MANIFEST_MAX_BYTES, MAX_SCOPE_NAMES_BYTES,
    SCOPE_NAMES_FILE,
};

/// The largest record file ferry reads: 4 GiB (the 102,400-task graph with every subsystem
/// writes an 88 MB argument dump).
pub const MAX_RECORDS_FILE_BYTES: u64 = 4 << 30;
/// The largest `args.bin` ferry opens: 4 GiB (its payloads are read one at a time).
pub const MAX_PAYLOAD_FILE_BYTES: u64 = 4 << 30;
/// The largest small side file ferry reads (`runs.json`, `summary.json`, the PMU loss sidecar,
/// a name map): 16 MiB.
pub const MAX_SMALL_FILE_BYTES: u64 = 16 << 20;
/// The longest line of a line-oriented file: 1 MiB (a PMU row or a scope record is well under
/// a KiB).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// The most ferry reads of the profile file `rel` (relative to its run's directory; see the
/// limits table in docs/security.md).
///
/// # Examples
/// ```
/// use ferry_profile::{read_limit, MAX_RECORDS_FILE_BYTES, MAX_SMALL_FILE_BYTES};
/// assert_eq!(read_limit("run-002/deps.json"), MAX_RECORDS_FILE_BYTES);
/// assert_eq!(read_limit("runs.json"), MAX_SMALL_FILE_BYTES);
/// ```
pub fn read_limit(rel: &str) -> u64 {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    match name {
        n if n == ARGS_BIN_FILE => MAX_PAYLOAD_FILE_BYTES,
        n if n == MANIFEST_FILE => MANIFEST_MAX_BYTES,
        n if n == SCOPE_NAMES_FILE => MAX_SCOPE_NAMES_BYTES,
        "runs.json" | "summary.json" | "pmu.dfx.json" => MAX_SMALL_FILE_BYTES,
        n if n.starts_with("name_map_") => MAX_SMALL_FILE_BYTES,
        _ => MAX_RECORDS_FILE_BYTES,
    }
}

/// The lines of `r`, each at most [`MAX_LINE_BYTES`] (without its `\n` or `\r\n`), as `file`'s.
pub(crate) struct BoundedLines<R> {
    r: R,
    file: &'static str,
    line: usize,
}

impl<R: BufRead> BoundedLines<R> {
    pub(crate) fn new(r: R, file: &'static str) -> BoundedLines<R> {
        BoundedLines { r, file, line: 0 }
    }
}

impl<R: BufRead> Iterator for BoundedLines<R> {
    type Item = Result<String, OutputError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut buf = Vec::new();
        self.line += 1;
        let got = (&mut self.r).take(MAX_LINE_BYTES as u64 + 1).read_until(b'\n', &mut buf);
        match got {
            Err(e) => return Some(Err(OutputError::io(self.file)(e))),
            Ok(0) => return None,
            Ok(_) => {}
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        } else if buf.len() > MAX_LINE_BYTES {
            return Some(Err(OutputError::Format {
                file: self.file.into(),
                what: format!("line {}: longer than {MAX_LINE_BYTES} bytes", self.line),
            }));
        }
        Some(String::from_utf8(buf).map_err(|_| OutputError::Format {
            file: self.file.into(),
            what: format!("line {}: not UTF-8", self.line),
        }))
    }
}

use std::io::Read as _;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_past_the_bound_is_an_error_not_an_allocation() {
        let long = vec![0u8; MAX_LINE_BYTES + 10];
        let mut it = BoundedLines::new(&long[..], "pmu.csv");
        match it.next() {
            Some(Err(OutputError::Format { what, .. })) => {
                assert!(what.contains("line 1"), "{what}")
            }
            other => panic!("{other:?}"),
        }
        let text = b"a,b\r\nc\n\nlast";
        let lines: Vec<String> =
            BoundedLines::new(&text[..], "pmu.csv").map(|l| l.unwrap()).collect();
        assert_eq!(lines, ["a,b", "c", "", "last"]);
        // A line of exactly the bound is read.
        let mut exact = vec![b'x'; MAX_LINE_BYTES];
        exact.push(b'\n');
        assert_eq!(
            BoundedLines::new(&exact[..], "x").next().unwrap().unwrap().len(),
            MAX_LINE_BYTES
        );
    }
}
