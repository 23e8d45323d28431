//! `ferry bench view`: the storm's `ferry view` page as a user gets it (50,000 tasks, all five
//! subsystems): its size, how long `ferry view` takes to write it, and its first frame in
//! headless Chromium (the time from navigation start to the end of the first drawn frame, as the
//! page itself reports it in `window.ferryView.firstFrameMs`), each load in a fresh tab.
//!
//! The browser is driven by `tools/browser/view_check.cjs` (Node with `playwright-core`, Debian's
//! `chromium`; see `tools/README.md`). The figures are absolute (a page size and a time), set
//! beside the targets (8 MiB, 2 s); there is no baseline page to take a ratio against.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::json;

/// The page's size target.
const MAX_BYTES: u64 = 8 << 20;
/// The first frame's target.
const MAX_FIRST_FRAME_MS: f64 = 2000.0;
/// The subsystems' flags of the measured run.
const ALL_FIVE: [&str; 8] =
    ["--swimlane", "4", "--pmu", "2", "--dep-gen", "--dump-args", "3", "--scope-stats"];

/// `tools/browser`: `$FERRY_BROWSER_TOOLS`, else the repository's as seen from `crate_dir` (a
/// crate of it: the `ferry` binary passes its own manifest directory, where it was built).
pub fn tools_dir(crate_dir: &Path) -> std::path::PathBuf {
    std::env::var_os("FERRY_BROWSER_TOOLS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| crate_dir.join("../../tools/browser"))
}

/// Why `ferry bench view` failed.
#[derive(Debug, thiserror::Error)]
pub enum ViewBenchError {
    /// The browser tools are not installed.
    #[error(
        "ferry bench view needs {tools} with playwright-core installed (npm ci --prefix {tools}) \
         and Debian's chromium (apt-get install chromium); FERRY_BROWSER_TOOLS names another \
         folder"
    )]
    NoTools {
        /// The folder looked in.
        tools: String,
    },
    /// A process could not be started, or a file read.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The browser driver printed no JSON.
    #[error("reading the browser driver's JSON")]
    Json(#[source] serde_json::Error),
    /// A process failed, or the page or the driver reported a problem.
    #[error("{0}")]
    Failed(String),
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Runs `exe args…`, returning its wall time in seconds.
fn timed(exe: &Path, args: &[&std::ffi::OsStr]) -> Result<f64, ViewBenchError> {
    let t0 = Instant::now();
    let out = Command::new(exe)
        .args(args)
        .output()
        .map_err(|source| ViewBenchError::Io { what: "running ferry".into(), source })?;
    let s = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(ViewBenchError::Failed(format!(
            "ferry {:?} failed: {}",
            args,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(s)
}

/// What `ferry bench view` measured.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewReport {
    /// The page's size in bytes.
    pub bytes: u64,
    /// Median milliseconds `ferry view` took to read the run and write the page.
    pub view_ms: f64,
    /// `ferry view` runs behind that median.
    pub view_rounds: u32,
    /// Each fresh load's first frame, milliseconds after navigation start.
    pub first_frames_ms: Vec<f64>,
    /// The browser's version as the driver reports it.
    pub browser: String,
}

/// `ferry bench view`: runs the storm with all five subsystems through `exe` (the `ferry`
/// binary) into a scratch directory, times `exe view` on it, and loads the page in headless
/// Chromium through `tools`' `view_check.cjs` (`tools`: the repository's `tools/browser`, with
/// `playwright-core` installed; see [`tools_dir`]). `quick`: fewer rounds.
///
/// # Errors
/// [`ViewBenchError`] when the tools are missing, or a run, the page or the browser fails.
pub fn measure(exe: &Path, tools: &Path, quick: bool) -> Result<ViewReport, ViewBenchError> {
    let script = tools.join("view_check.cjs");
    if !(tools.join("node_modules/playwright-core").is_dir() && script.is_file()) {
        return Err(ViewBenchError::NoTools { tools: tools.display().to_string() });
    }
    let scratch = std::env::temp_dir().join(format!("ferry-bench-view-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let result = measure_in(exe, &script, &scratch, quick);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn measure_in(
    exe: &Path,
    script: &Path,
    dir: &Path,
    quick: bool,
) -> Result<ViewReport, ViewBenchError> {
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    let mut args: Vec<&std::ffi::OsStr> = vec![os("run"), os("--example"), os("storm")];
    args.extend(ALL_FIVE.iter().map(|s| os(s)));
    args.extend([os("--out"), dir.as_os_str()]);
    timed(exe, &args)?;
    let view_rounds = if quick { 1 } else { 3 };
    let mut view_s = Vec::new();
    for _ in 0..view_rounds {
        view_s.push(timed(exe, &[os("view"), dir.as_os_str()])?);
    }
    let page = dir.join(ferry_profile::VIEW_FILE);
    let bytes = std::fs::metadata(&page)
        .map_err(|source| ViewBenchError::Io {
            what: format!("reading {}", page.display()),
            source,
        })?
        .len();
    let rounds = if quick { 2 } else { 7 };
    let out = Command::new("node")
        .arg(script)
        .arg(&page)
        .args(["--rounds", &rounds.to_string()])
        .output()
        .map_err(|source| ViewBenchError::Io {
            what: "running node (the browser driver)".into(),
            source,
        })?;
    if !out.status.success() {
        return Err(ViewBenchError::Failed(format!(
            "the browser driver failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(ViewBenchError::Json)?;
    let failed = |m: &str| ViewBenchError::Failed(m.to_string());
    let loads = v["rounds"].as_array().ok_or_else(|| failed("the driver reported no rounds"))?;
    let mut ff = Vec::new();
    for r in loads {
        let errors = r["errors"].as_array().map_or(0, Vec::len);
        if errors != 0 {
            return Err(failed(&format!("the page reported errors: {}", r["errors"])));
        }
        ff.push(r["firstFrameMs"].as_f64().ok_or_else(|| failed("a load without a first frame"))?);
    }
    Ok(ViewReport {
        bytes,
        view_ms: median(view_s) * 1e3,
        view_rounds,
        first_frames_ms: ff,
        browser: v["browser"].as_str().unwrap_or("chromium").to_string(),
    })
}

impl ViewReport {
    /// The fastest and the slowest first frame.
    fn range(&self) -> (f64, f64) {
        let ff = &self.first_frames_ms;
        (ff.iter().copied().fold(f64::INFINITY, f64::min), ff.iter().copied().fold(0.0, f64::max))
    }

    /// The median first frame.
    pub fn first_frame_ms(&self) -> f64 {
        median(self.first_frames_ms.clone())
    }
}

impl crate::AreaReport for ViewReport {
    /// One JSON object, beside the targets.
    fn to_json(&self) -> String {
        let ((lo, hi), first, bytes) = (self.range(), self.first_frame_ms(), self.bytes);
        json!({
            "page": "storm, 50000 tasks, all five subsystems (--swimlane 4 --pmu 2 --dep-gen --dump-args 3 --scope-stats)",
            "bytes": bytes,
            "mb": bytes as f64 / 1e6,
            "max_bytes": MAX_BYTES,
            "bytes_met": bytes <= MAX_BYTES,
            "ferry_view_ms": self.view_ms,
            "first_frame_ms": { "median": first, "min": lo, "max": hi, "rounds": self.first_frames_ms },
            "max_first_frame_ms": MAX_FIRST_FRAME_MS,
            "first_frame_met": first <= MAX_FIRST_FRAME_MS,
            "browser": format!("headless Chromium {}", self.browser),
        })
        .to_string()
    }

    /// The figures beside the targets.
    fn to_text(&self) -> String {
        let ((lo, hi), first, bytes) = (self.range(), self.first_frame_ms(), self.bytes);
        let (browser, view_ms, view_rounds) = (&self.browser, self.view_ms, self.view_rounds);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "ferry view of the storm (50,000 tasks, all five subsystems), headless Chromium {browser}:"
        );
        let _ = writeln!(
            s,
            "  page            {:>8.2} MB ({bytes} bytes; target <= {} MiB: {})",
            bytes as f64 / 1e6,
            MAX_BYTES >> 20,
            if bytes <= MAX_BYTES { "met" } else { "NOT met" }
        );
        let _ = writeln!(s, "  ferry view      {view_ms:>8.0} ms to read the run and write the page (median of {view_rounds})");
        let _ = write!(
            s,
            "  first frame     {first:>8.0} ms after navigation start, median of {} fresh loads \
             ({lo:.0}-{hi:.0}; target <= {MAX_FIRST_FRAME_MS:.0} ms: {})",
            self.first_frames_ms.len(),
            if first <= MAX_FIRST_FRAME_MS { "met" } else { "NOT met" }
        );
        s
    }
}
