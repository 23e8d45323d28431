//! `ferry view` in a real browser: headless Chromium (Debian's `chromium`), driven by
//! `tools/browser/view_check.cjs` through `playwright-core`, over the page of a small run and of
//! the 50,000-task storm with all five subsystems, and of a workload whose scopes have labels.
//! Checks what the page drew (its own state and its canvas pixels) and that wheel zoom, drag pan,
//! key zoom and pan, search and a click change what is drawn; on a failed run's page, that the
//! task whose kernel failed is marked and named. Prints the storm page's size and first-frame
//! time (a figure, not asserted).
mod common;
#[path = "../../ferry-runtime/tests/support/template.rs"]
mod template;

use std::path::Path;
use std::process::Command;

use common::{browser_missing, ferry_ok, need, scratch, tools};
use serde_json::Value;

/// Runs `example` with all five subsystems into `dir/run` and writes its page; returns the page
/// and the run's output.
fn page_of(dir: &Path, example: &str, small: bool) -> (std::path::PathBuf, String) {
    let out = dir.join("run");
    let out_s = out.to_str().unwrap();
    let mut args = vec!["run", "--example", example];
    if small {
        args.push("--small");
    }
    args.extend([
        "--swimlane",
        "4",
        "--pmu",
        "2",
        "--dep-gen",
        "--dump-args",
        "3",
        "--scope-stats",
        "--out",
        out_s,
    ]);
    let run = String::from_utf8_lossy(&ferry_ok(&args).stdout).into_owned();
    ferry_ok(&["view", out_s]);
    (out.join("swimlane.html"), run)
}

fn drive(page: &Path, search: &str) -> Value {
    drive_with(page, search, &[], false)
}

/// [`drive`], then each of `queries` typed into the search box in turn; with `failed`, first a
/// click on the page's failed-task button.
fn drive_with(page: &Path, search: &str, queries: &[&str], failed: bool) -> Value {
    let mut cmd = Command::new("node");
    cmd.arg(tools().join("browser/view_check.cjs")).arg(page).args(["--search", search]);
    if !queries.is_empty() {
        cmd.args(["--queries", &queries.join(",")]);
    }
    if failed {
        cmd.arg("--failed");
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "view_check failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn width(s: &Value) -> f64 {
    s["visible"]["end"].as_f64().unwrap() - s["visible"]["start"].as_f64().unwrap()
}

/// The checks both pages share.
fn check_interaction(v: &Value, hit_task: Option<&str>, run_dir: &Path) {
    assert_eq!(v["errors"], serde_json::json!([]), "page errors: {v:#}");
    assert_eq!(v["requests"], serde_json::json!([]), "the page asked the network for something");
    assert!(v["error"].is_null(), "{}", v["error"]);
    let init = &v["initial"];
    let span = init["span"].as_f64().unwrap();
    assert_eq!((init["visible"]["start"].as_f64(), width(init)), (Some(0.0), span));
    assert!(init["rects"].as_u64().unwrap() > 0 && init["pixels"]["ink"].as_u64().unwrap() > 1000);
    // Idle cores are folded, not drawn as rows.
    let rows: Vec<&str> =
        v["rows"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    let folded: Vec<&str> =
        v["folded"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    assert!(!folded.is_empty() && rows.iter().all(|r| !folded.contains(r)), "{rows:?} {folded:?}");

    let digest = |s: &Value| s["pixels"]["digest"].as_u64().unwrap();
    let start = |s: &Value| s["visible"]["start"].as_f64().unwrap();
    let (wz, dp, kz, kp, reset) =
        (&v["wheelZoom"], &v["dragPan"], &v["keyZoomOut"], &v["keyPan"], &v["reset"]);
    assert!(width(wz) < 0.5 * span, "the wheel did not zoom in: {}", wz["visible"]);
    assert_ne!(digest(wz), digest(init), "zoom drew the same pixels");
    assert!((width(dp) - width(wz)).abs() < 1e-6 * span, "a drag changed the zoom");
    assert!(start(dp) > start(wz), "dragging left did not move the view later in time");
    assert_ne!(digest(dp), digest(wz), "pan drew the same pixels");
    assert!(width(kz) > 1.5 * width(dp), "'-' did not zoom out: {}", kz["visible"]);
    assert!(start(kp) > start(kz), "ArrowRight did not pan: {}", kp["visible"]);
    assert_eq!(width(reset), span);
    assert_eq!(digest(reset), digest(init), "the same view drew different pixels");
    assert_eq!(reset["rects"], init["rects"]);

    let s = &v["search"];
    assert!(s["searchHits"].as_u64().unwrap() > 0, "no hit for the search: {s}");
    assert!(s["hitRects"].as_u64().unwrap() > 0);
    assert_ne!(digest(s), digest(reset), "search drew the same pixels");
    let first = &v["firstHit"];
    let sel = &first["selected"];
    let task = sel["task"].as_str().expect("Enter selected the first hit");
    if let Some(t) = hit_task {
        assert_eq!(task, t);
    }
    assert!(width(first) < span, "the first hit is not zoomed to");
    assert!(v["cleared"]["selected"].is_null());
    // A click where the page drew that task selects it again and shows its details.
    let click = &v["click"]["selected"];
    assert_eq!(click["task"], sel["task"], "the click picked another slice: {click}");
    assert!(!click["args"].as_array().unwrap().is_empty(), "no arguments: {click}");
    assert!(click["pmu"]["pmu_total_cycles"].as_f64().unwrap() > 0.0, "no PMU counters: {click}");
    // Its edges are the graph's: which edges a run records depends on its timing (a predecessor
    // that finished before its successor was submitted leaves none), so compare with `ferry deps`.
    let listed = ferry_ok(&["deps", run_dir.to_str().unwrap(), "--json", "--task", task]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    // An id, or (the listing's predecessors) an edge naming its task.
    let ids = |x: &Value| {
        let list = x.as_array().unwrap_or_else(|| panic!("not a list: {x}"));
        let id = |i: &Value| i.as_str().or_else(|| i["task_id"].as_str()).map(str::to_string);
        let mut ids: Vec<String> = list.iter().map(|i| id(i).expect("an id")).collect();
        ids.sort();
        ids
    };
    let row = &listed["task_list"][0];
    assert_eq!(
        (ids(&click["preds"]), ids(&click["succs"])),
        (ids(&row["preds"]), ids(&row["succs"])),
        "the page's edges are not the graph's: {click} vs {row}"
    );
    let details = v["click"]["details"].as_str().unwrap();
    for part in ["Arguments", "PMU counters", "Predecessors", "Successors", task] {
        assert!(details.contains(part), "{part} missing from the details:\n{details}");
    }
    assert_eq!(v["searchCleared"]["searchHits"], 0);
    assert_eq!(v["searchCleared"]["hitRects"], 0);
}

#[test]
fn small_runs_page_zooms_pans_searches_and_shows_a_task() {
    let _bound = ferry_watchdog::bound("the ferry binary and the headless browser");
    let test = "small_runs_page_zooms_pans_searches_and_shows_a_task";
    let missing = browser_missing();
    if need(missing.is_none(), test, missing.as_deref().unwrap_or("")).is_none() {
        return;
    }
    let d = scratch("view-small");
    let (page, run) = page_of(&d, "vector", true);
    let v = drive(&page, "mul");
    check_interaction(&v, None, page.parent().unwrap());
    // A run that did not fail marks nothing.
    assert!(v["failed"].is_null() && v["failedBar"].is_null(), "{}", v["failed"]);
    assert_eq!(
        (v["initial"]["failedMarks"].as_u64(), &v["initial"]["failedPixel"]),
        (Some(0), &Value::Null)
    );
    // The kernel search finds exactly the mul tasks the run reports ("per kernel: …, mul N, …").
    let muls: u64 = run
        .split(['\n', ','])
        .find_map(|p| p.trim().strip_prefix("mul ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no mul count in the run's output:\n{run}"));
    assert_eq!(v["search"]["searchHits"], muls, "{}", v["search"]);
    // The scope occupancy plot is there, named per ring and metric.
    assert!(
        v["series"].as_array().unwrap().iter().any(|s| s == "ring1 task window"),
        "{}",
        v["series"]
    );
    assert_eq!(v["firstHit"]["selected"]["name"], "mul");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_workloads_scopes_row_is_named_by_its_scope_labels() {
    let test = "a_workloads_scopes_row_is_named_by_its_scope_labels";
    let missing = browser_missing();
    if need(missing.is_none(), test, missing.as_deref().unwrap_or("")).is_none() {
        return;
    }
    let d = scratch("view-scopes");
    let out = d.join("run");
    let out_s = out.to_str().unwrap();
    let wl = tools().join("../examples/workloads/diamond.toml");
    ferry_ok(&[
        "run",
        "--workload",
        wl.to_str().unwrap(),
        "--swimlane",
        "4",
        "--scope-stats",
        "--out",
        out_s,
    ]);
    ferry_ok(&["view", out_s]);
    let v = drive(&out.join("swimlane.html"), "diamond");
    assert_eq!(v["errors"], serde_json::json!([]), "page errors: {v:#}");
    assert!(v["error"].is_null(), "{}", v["error"]);
    let rows: Vec<&str> =
        v["rows"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    assert!(rows.contains(&"scopes"), "no scopes row: {rows:?}");
    // The label finds the diamond's 64 scopes (and no task), drawn over the dimmed rows.
    let s = &v["search"];
    assert_eq!((s["searchSlices"].as_u64(), s["searchHits"].as_u64()), (Some(64), Some(0)), "{s}");
    assert!(s["hitRects"].as_u64().unwrap() > 0, "{s}");
    // Enter goes to the first scope; a click where it is drawn selects it again.
    let first = &v["firstHit"]["selected"];
    assert_eq!((first["name"].as_str(), first["row"].as_str()), (Some("diamond"), Some("scopes")));
    assert_eq!(v["click"]["selected"]["name"], "diamond", "{}", v["click"]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn storm_page_is_compact_stays_bounded_and_finds_a_task_by_id() {
    let _bound = ferry_watchdog::bound("the ferry binary and the headless browser");
    let test = "storm_page_is_compact_stays_bounded_and_finds_a_task_by_id";
    let missing = browser_missing();
    if need(missing.is_none(), test, missing.as_deref().unwrap_or("")).is_none() {
        return;
    }
    let d = scratch("view-storm");
    let (page, _) = page_of(&d, "storm", false);
    // A task id in every form a user meets names that one task, shown as every command shows it.
    let v = drive_with(&page, "0x0000000000001234", &["0x40", "40", "0x0000000000000040"], false);
    check_interaction(&v, Some("0x1234"), page.parent().unwrap());
    assert_eq!(v["tasks"], 50_000);
    assert_eq!(v["search"]["searchHits"], 1, "a task id names one task");
    // The page's report is `ferry report`'s, once.
    let run_dir = page.parent().unwrap().to_str().unwrap();
    let report = String::from_utf8_lossy(&ferry_ok(&["report", run_dir]).stdout).into_owned();
    assert_eq!(v["report"].as_str().unwrap().trim_end(), report.trim_end());
    for q in v["queries"].as_array().unwrap() {
        assert_eq!(
            (q["searchHits"].as_u64(), q["selected"].as_str()),
            (Some(1), Some("0x40")),
            "{q}"
        );
    }
    // Busy means busy: every drawn row carries its busy fraction, and no pixel of a core row is
    // drawn more opaque than the time the core was busy in it: checked on the AICore row whose
    // busiest visible pixel is the least busy, wherever the view shows a good part of the run (a
    // palette colour drawn solid is at least 137 dark, so a row whose busiest pixel is under half
    // busy is never drawn solid). How busy the row and that pixel are depends on the run's
    // timing, which the host's scheduler decides (a core thread preempted inside a task keeps
    // the task open, so under load a quiet core can have a pixel busy throughout), so nothing
    // here asserts how busy they are: the bound follows the row's own peak. Zoomed into a burst,
    // a pixel the core was busy for all of is solid, as it should be.
    let busy: Vec<f64> =
        v["busy"].as_array().unwrap().iter().map(|b| b.as_f64().unwrap()).collect();
    assert_eq!(busy.len(), v["rows"].as_array().unwrap().len());
    let span = v["initial"]["span"].as_f64().unwrap();
    for step in ["initial", "wheelZoom", "keyZoomOut", "reset"] {
        if width(&v[step]) < 0.4 * span {
            continue;
        }
        let lb = &v[step]["leastBusy"];
        let (b, peak) = (lb["busy"].as_f64().unwrap(), lb["peak"].as_f64().unwrap());
        let seen = lb["visibleBusy"].as_f64().unwrap();
        let mean = lb["pixelMean"].as_f64().unwrap();
        let ink = lb["maxInk"].as_u64().unwrap();
        // Fractions of time; the pixel columns tile the visible range, so their mean busy
        // fraction is the row's over that range, and the busiest pixel is at least that busy
        // (not at least the row's over the whole run: a view of part of the run, or wider than
        // it, spreads the row's busy time differently).
        let eps = 1e-6;
        assert!((-eps..=1.0 + eps).contains(&b), "{step}: the row is {b} busy: {lb}");
        assert!((-eps..=1.0 + eps).contains(&seen), "{step}: {seen} busy in view: {lb}");
        assert!(
            (mean - seen).abs() <= eps,
            "{step}: the pixel columns' mean {mean} is not the row's {seen} in view: {lb}"
        );
        assert!(
            (seen - eps..=1.0 + eps).contains(&peak),
            "{step}: peak {peak} below the row's {seen} in view: {lb}"
        );
        // The faintest shade is 0.12 opaque; a pixel is never more opaque than it was busy.
        let allowed = (255.0 * peak.max(0.12)).ceil() as u64 + 3;
        assert!(
            ink <= allowed,
            "{step}: a row whose busiest pixel is {:.1} % busy is drawn with ink {ink} (at most \
             {allowed}): {lb}",
            peak * 100.0
        );
        assert!(ink > 0, "{step}: the row is not drawn at all: {lb}");
    }
    let bytes = v["bytes"].as_u64().unwrap();
    assert!(bytes <= 8 << 20, "the storm's page is {bytes} bytes (at most 8 MiB)");
    // Level of detail: the whole run draws far fewer rectangles than it has slices.
    let (rects, slices) = (v["initial"]["rects"].as_u64().unwrap(), v["slices"].as_u64().unwrap());
    assert!(slices > 150_000 && rects * 4 < slices, "{rects} rectangles for {slices} slices");
    println!(
        "{test}: storm page {:.2} MB, first frame {:.0} ms after navigation start ({} rectangles for {slices} slices, {})",
        bytes as f64 / 1e6,
        v["firstFrameMs"].as_f64().unwrap(),
        rects,
        v["browser"].as_str().unwrap_or("chromium")
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A kernel fault (the template library's `saxpy` given an `x` shorter than its output, in the
/// workload's second task): the page of the failed run's profile names the task in the bar as
/// every command names it, draws a red marker on its slice at the whole run's zoom, and the
/// bar's button goes to it.
#[test]
fn a_failed_runs_page_marks_the_task_whose_kernel_failed() {
    let _bound = ferry_watchdog::bound("the ferry binary and the headless browser");
    let test = "a_failed_runs_page_marks_the_task_whose_kernel_failed";
    let missing = browser_missing();
    if need(missing.is_none(), test, missing.as_deref().unwrap_or("")).is_none() {
        return;
    }
    let lib = template::template_lib().to_str().unwrap();
    let d = scratch("view-failed");
    let wl = d.join("short.toml");
    std::fs::write(
        &wl,
        "[workload]\nname = \"short\"\nverify = \"host-reference\"\n\
         [[tensor]]\nname = \"x\"\nshape = [512]\n[[tensor]]\nname = \"y\"\nshape = [1024]\n\
         [[tensor]]\nname = \"out\"\nshape = [1024]\n\
         [[graph]]\nkernel = \"clamp\"\nargs = [{ tensor = \"out\", role = \"inout\" }]\n\
         scalars = [{ f32 = 0.0 }, { f32 = 1.0 }]\n\
         [[graph]]\nkernel = \"saxpy\"\nargs = [{ tensor = \"x\", role = \"input\" }, \
         { tensor = \"y\", role = \"input\" }, { tensor = \"out\", role = \"output\" }]\n\
         scalars = [{ f32 = 2.0 }]\n",
    )
    .unwrap();
    let out = d.join("run");
    let out_s = out.to_str().unwrap();
    let o = common::ferry()
        .args(["run", "--small", "--variant", "host", "--kernels", lib, "--workload"])
        .args([wl.to_str().unwrap(), "--swimlane", "4", "--dep-gen", "--out", out_s])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    ferry_ok(&["view", out_s]);
    let v = drive_with(&out.join("swimlane.html"), "0x1", &[], true);
    assert_eq!(v["errors"], serde_json::json!([]), "page errors: {v:#}");
    assert!(v["error"].is_null(), "{}", v["error"]);
    assert_eq!(v["failed"]["label"], "task 0x1 (saxpy)", "{v:#}");
    assert_eq!(v["failedBar"], "failed: task 0x1 (saxpy)");
    // Drawn over the whole run: a marker in the marker's red where the page says it is.
    let init = &v["initial"];
    assert!(init["failedMarks"].as_u64().unwrap() >= 1, "{init}");
    assert_eq!(init["failedPixel"]["rgb"], serde_json::json!([255, 0, 0]), "{init}");
    assert!(init["failedPixel"]["row"].as_str().unwrap().starts_with("core"), "{init}");
    // The button goes to the task: selected, zoomed to, still marked.
    let click = &v["failedClick"];
    assert_eq!(click["selected"]["task"], "0x1", "{click}");
    assert_eq!(click["selected"]["name"], "saxpy", "{click}");
    // Zoomed to the task (a task that spans most of a short run leaves the whole run in view).
    assert!(width(click) <= width(init), "{click}");
    assert_eq!(click["failedPixel"]["rgb"], serde_json::json!([255, 0, 0]), "{click}");
    // The id the bar shows finds that one task.
    assert_eq!(v["search"]["searchHits"], 1, "{}", v["search"]);
    assert_eq!(v["firstHit"]["selected"]["task"], "0x1");
    let _ = std::fs::remove_dir_all(&d);
}
