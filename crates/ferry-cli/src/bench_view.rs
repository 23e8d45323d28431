//! `ferry bench view`: the storm's `ferry view` page as a user gets it (50,000 tasks, all five
//! subsystems): its size, how long `ferry view` takes to write it, and its first frame in
//! headless Chromium (the time from navigation start to the end of the first drawn frame, as the
//! page itself reports it in `window.ferryView.firstFrameMs`), each load in a fresh tab.
//!
//! The browser is driven by `tools/browser/view_check.cjs` (Node with `playwright-core`, Debian's
//! `chromium`; see `tools/README.md`). The figures are absolute (a page size and a time), set
//! beside the targets (8 MiB, 2 s); there is no baseline page to take a ratio against.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use serde_json::json;

/// The page's size target.
const MAX_BYTES: u64 = 8 << 20;
/// The first frame's target.
const MAX_FIRST_FRAME_MS: f64 = 2000.0;
/// The subsystems' flags of the measured run.
const ALL_FIVE: [&str; 8] =
    ["--swimlane", "4", "--pmu", "2", "--dep-gen", "--dump-args", "3", "--scope-stats"];

/// `tools/browser`: `$FERRY_BROWSER_TOOLS`, else the repository's (where ferry was built).
fn tools_dir() -> PathBuf {
    std::env::var_os("FERRY_BROWSER_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/browser"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Runs `exe args…`, returning its wall time in seconds.
fn timed(exe: &Path, args: &[&std::ffi::OsStr]) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let out = Command::new(exe).args(args).output().context("running ferry")?;
    let s = t0.elapsed().as_secs_f64();
    anyhow::ensure!(
        out.status.success(),
        "ferry {:?} failed: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(s)
}

pub(crate) fn run(json: bool, quick: bool) -> anyhow::Result<()> {
    let tools = tools_dir();
    let script = tools.join("view_check.cjs");
    anyhow::ensure!(
        tools.join("node_modules/playwright-core").is_dir() && script.is_file(),
        "ferry bench view needs {} with playwright-core installed (npm ci --prefix {}) and \
         Debian's chromium (apt-get install chromium); FERRY_BROWSER_TOOLS names another folder",
        tools.display(),
        tools.display()
    );
    let exe = std::env::current_exe().context("locating the ferry binary")?;
    let scratch = std::env::temp_dir().join(format!("ferry-bench-view-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let result = measure(&exe, &script, &scratch, json, quick);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn measure(exe: &Path, script: &Path, dir: &Path, json: bool, quick: bool) -> anyhow::Result<()> {
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
    let page = dir.join(crate::view::VIEW_FILE);
    let bytes =
        std::fs::metadata(&page).with_context(|| format!("reading {}", page.display()))?.len();
    let rounds = if quick { 2 } else { 7 };
    let out = Command::new("node")
        .arg(script)
        .arg(&page)
        .args(["--rounds", &rounds.to_string()])
        .output()
        .context("running node (the browser driver)")?;
    anyhow::ensure!(
        out.status.success(),
        "the browser driver failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("reading the browser driver's JSON")?;
    let loads = v["rounds"].as_array().context("the driver reported no rounds")?;
    let mut ff = Vec::new();
    for r in loads {
        let errors = r["errors"].as_array().map_or(0, Vec::len);
        anyhow::ensure!(errors == 0, "the page reported errors: {}", r["errors"]);
        ff.push(r["firstFrameMs"].as_f64().context("a load without a first frame")?);
    }
    let (lo, hi) =
        (ff.iter().copied().fold(f64::INFINITY, f64::min), ff.iter().copied().fold(0.0, f64::max));
    let first = median(ff.clone());
    let view_ms = median(view_s) * 1e3;
    let browser = v["browser"].as_str().unwrap_or("chromium").to_string();
    if json {
        let o = json!({
            "page": "storm, 50000 tasks, all five subsystems (--swimlane 4 --pmu 2 --dep-gen --dump-args 3 --scope-stats)",
            "bytes": bytes,
            "mb": bytes as f64 / 1e6,
            "max_bytes": MAX_BYTES,
            "bytes_met": bytes <= MAX_BYTES,
            "ferry_view_ms": view_ms,
            "first_frame_ms": { "median": first, "min": lo, "max": hi, "rounds": ff },
            "max_first_frame_ms": MAX_FIRST_FRAME_MS,
            "first_frame_met": first <= MAX_FIRST_FRAME_MS,
            "browser": format!("headless Chromium {browser}"),
        });
        crate::stdout::outln!("{o}")?;
        return Ok(());
    }
    crate::stdout::outln!(
        "ferry view of the storm (50,000 tasks, all five subsystems), headless Chromium {browser}:"
    )?;
    crate::stdout::outln!(
        "  page            {:>8.2} MB ({bytes} bytes; target <= {} MiB: {})",
        bytes as f64 / 1e6,
        MAX_BYTES >> 20,
        if bytes <= MAX_BYTES { "met" } else { "NOT met" }
    )?;
    crate::stdout::outln!("  ferry view      {view_ms:>8.0} ms to read the run and write the page (median of {view_rounds})")?;
    crate::stdout::outln!(
        "  first frame     {first:>8.0} ms after navigation start, median of {} fresh loads \
         ({lo:.0}-{hi:.0}; target <= {MAX_FIRST_FRAME_MS:.0} ms: {})",
        ff.len(),
        if first <= MAX_FIRST_FRAME_MS { "met" } else { "NOT met" }
    )?;
    Ok(())
}
