//! `scope_stats/scope_stats.jsonl` (docs/dfx.md): NDJSON, schema version 6.
//!
//! Line 1 is the header (`version`, `fatal`, `dropped`, `total`, `task_window_max`, `heap_max`,
//! `dep_pool_max`, `tensormap_max`, and ferry's `dfx` loss accounting); every further line is one
//! scope begin or end record.

use std::io::{BufRead, Write};

use ferry_abi::records::{ScopeStatsRecord, SCOPE_PHASE_BEGIN, SCOPE_RINGS};
use serde::{Deserialize, Serialize};

use super::model::LossAccounting;
use super::scope_names::ScopeNames;
use super::stream::Ticker;
use super::OutputError;

/// Folder inside the output directory.
pub const SCOPES_DIR: &str = "scope_stats";
/// File inside [`SCOPES_DIR`].
pub const SCOPES_FILE: &str = "scope_stats.jsonl";
/// Schema version written and read.
pub const SCOPES_VERSION: u32 = 6;

/// The ScopeStats subsystem's output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScopeStats {
    /// The orchestrator latched a fatal error.
    pub fatal: bool,
    /// Records dropped on the device.
    pub dropped: u64,
    /// Records produced on the device.
    pub total: u64,
    /// Task window capacity per ring.
    pub task_window_max: [i64; SCOPE_RINGS],
    /// Heap capacity per ring (bytes).
    pub heap_max: [u64; SCOPE_RINGS],
    /// Dep pool capacity per ring.
    pub dep_pool_max: [i64; SCOPE_RINGS],
    /// Tensormap capacity.
    pub tensormap_max: i64,
    /// `heap_max` is the run's own scratch reservation, not a ring shared with later work
    /// (ferry's header key `heap_max_source: "run_reservation"`). ferry's runner reserves
    /// exactly the scratch a run asks for, and a scope that would overflow it fails with a
    /// typed submit error instead of stalling the orchestrator, so a run that sizes its arena
    /// to its need fills it by construction: its heap fill is shown but is no risk (the
    /// ≥ 80 % danger threshold of docs/dfx.md is about a ring the orchestrator waits
    /// on). `false` for the original runtime's files.
    pub heap_reserved: bool,
    /// Begin/end records in device order.
    pub records: Vec<ScopeRow>,
    /// What the scope sites are called (`scope_names.json` beside the records; empty when
    /// the run named none).
    pub names: ScopeNames,
}

impl ScopeStats {
    /// The name of `site`, else the site itself.
    pub fn label<'a>(&'a self, site: &'a str) -> &'a str {
        self.names.get(site).map_or(site, |l| l.name.as_str())
    }
}

/// Begin or end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScopePhase {
    /// Scope entered.
    #[default]
    Begin,
    /// Scope left.
    End,
}

/// One scope record line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeRow {
    /// `file:line` of the scope site.
    pub site: String,
    /// Begin or end.
    pub phase: ScopePhase,
    /// Nesting depth.
    pub depth: i32,
    /// Ring (`min(depth, 3)`).
    pub ring: i32,
    /// Task window tail.
    pub task_window_start: i64,
    /// Task window head.
    pub task_window_end: i64,
    /// Heap tail (monotonic bytes).
    pub heap_start: u64,
    /// Heap head (monotonic bytes).
    pub heap_end: u64,
    /// Dep pool tail.
    pub dep_pool_start: i64,
    /// Dep pool head.
    pub dep_pool_end: i64,
    /// Live tensormap entries.
    pub tensormap: i64,
}

impl ScopeRow {
    /// From the device record.
    pub fn from_record(r: &ScopeStatsRecord) -> Self {
        Self {
            site: format!("{}:{}", r.site_file().unwrap_or("?"), r.site_line),
            phase: if r.phase == SCOPE_PHASE_BEGIN { ScopePhase::Begin } else { ScopePhase::End },
            depth: r.depth.into(),
            ring: r.ring_id.into(),
            task_window_start: r.task_start.into(),
            task_window_end: r.task_end.into(),
            heap_start: r.heap_start,
            heap_end: r.heap_end,
            dep_pool_start: r.dep_pool_start.into(),
            dep_pool_end: r.dep_pool_end.into(),
            tensormap: r.tensormap_used.into(),
        }
    }
}

#[derive(Deserialize)]
struct Header {
    version: u32,
    fatal: bool,
    dropped: u64,
    total: u64,
    task_window_max: [i64; SCOPE_RINGS],
    heap_max: [u64; SCOPE_RINGS],
    dep_pool_max: [i64; SCOPE_RINGS],
    tensormap_max: i64,
    #[serde(default)]
    heap_max_source: Option<String>,
    #[serde(default)]
    dfx: LossAccounting,
}

/// [`Header`] as written, borrowing the loss accounting.
#[derive(Serialize)]
struct HeaderOut<'a> {
    version: u32,
    fatal: bool,
    dropped: u64,
    total: u64,
    task_window_max: [i64; SCOPE_RINGS],
    heap_max: [u64; SCOPE_RINGS],
    dep_pool_max: [i64; SCOPE_RINGS],
    tensormap_max: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    heap_max_source: Option<&'static str>,
    dfx: &'a LossAccounting,
}

/// `heap_max_source` of a [`ScopeStats::heap_reserved`] header.
pub const HEAP_MAX_RUN_RESERVATION: &str = "run_reservation";

/// Writes `scope_stats.jsonl` to `w`.
///
/// # Errors
///
/// [`OutputError::Json`] / [`OutputError::Io`] when writing fails.
pub fn write_scopes<W: Write>(
    w: W,
    s: &ScopeStats,
    loss: &LossAccounting,
) -> Result<(), OutputError> {
    write_scopes_ticked(w, s, loss, &Ticker::silent())
}

/// [`write_scopes`], one tick per record.
pub(crate) fn write_scopes_ticked<W: Write>(
    mut w: W,
    s: &ScopeStats,
    loss: &LossAccounting,
    tick: &Ticker<'_>,
) -> Result<(), OutputError> {
    let h = HeaderOut {
        version: SCOPES_VERSION,
        fatal: s.fatal,
        dropped: s.dropped,
        total: s.total,
        task_window_max: s.task_window_max,
        heap_max: s.heap_max,
        dep_pool_max: s.dep_pool_max,
        tensormap_max: s.tensormap_max,
        heap_max_source: s.heap_reserved.then_some(HEAP_MAX_RUN_RESERVATION),
        dfx: loss,
    };
    serde_json::to_writer(&mut w, &h).map_err(OutputError::json(SCOPES_FILE))?;
    w.write_all(b"\n").map_err(OutputError::io(SCOPES_FILE))?;
    for r in &s.records {
        serde_json::to_writer(&mut w, r).map_err(OutputError::json(SCOPES_FILE))?;
        w.write_all(b"\n").map_err(OutputError::io(SCOPES_FILE))?;
        tick.tick(1);
    }
    Ok(())
}

/// Reads `scope_stats.jsonl`.
///
/// # Errors
///
/// [`OutputError::Format`] naming the line on an empty file, another schema version or a
/// malformed line.
pub fn read_scopes<R: BufRead>(r: R) -> Result<(ScopeStats, LossAccounting), OutputError> {
    let bad = |line: usize, what: String| OutputError::Format {
        file: SCOPES_FILE.into(),
        what: format!("line {line}: {what}"),
    };
    let mut lines = super::limits::BoundedLines::new(r, SCOPES_FILE);
    let first = match lines.next() {
        Some(l) => l?,
        None => return Err(bad(1, "empty file".into())),
    };
    let h: Header = serde_json::from_str(&first).map_err(|e| bad(1, e.to_string()))?;
    if h.version != SCOPES_VERSION {
        return Err(bad(1, format!("schema version {}, expected {SCOPES_VERSION}", h.version)));
    }
    super::model::check_loss(&h.dfx, SCOPES_FILE)?;
    let mut s = ScopeStats {
        fatal: h.fatal,
        dropped: h.dropped,
        total: h.total,
        task_window_max: h.task_window_max,
        heap_max: h.heap_max,
        dep_pool_max: h.dep_pool_max,
        tensormap_max: h.tensormap_max,
        heap_reserved: h.heap_max_source.as_deref() == Some(HEAP_MAX_RUN_RESERVATION),
        records: Vec::new(),
        names: ScopeNames::new(),
    };
    for (i, l) in lines.enumerate() {
        let l = l?;
        if l.trim().is_empty() {
            continue;
        }
        s.records.push(serde_json::from_str(&l).map_err(|e| bad(i + 2, e.to_string()))?);
    }
    Ok((s, h.dfx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_spec_example() {
        let text = "{\"version\": 6, \"fatal\": false, \"dropped\": 0, \"total\": 4, \"task_window_max\": [8, 4, 0, 0], \"heap_max\": [268435456, 268435456, 0, 0], \"dep_pool_max\": [1024, 1024, 0, 0], \"tensormap_max\": 65536}\n{\"site\": \"orch.cpp:77\", \"phase\": \"begin\", \"depth\": 1, \"ring\": 1, \"task_window_start\": 0, \"task_window_end\": 0, \"heap_start\": 0, \"heap_end\": 0, \"dep_pool_start\": 1, \"dep_pool_end\": 1, \"tensormap\": 0}\n";
        let (s, _) = read_scopes(text.as_bytes()).unwrap();
        assert_eq!(s.total, 4);
        assert_eq!(s.records[0].site, "orch.cpp:77");
        assert_eq!(s.records[0].phase, ScopePhase::Begin);
        let v5 = text.replacen("\"version\": 6", "\"version\": 5", 1);
        assert!(read_scopes(v5.as_bytes()).unwrap_err().to_string().contains("line 1"));
        let broken = format!("{text}{{\"site\": 3}}\n");
        assert!(read_scopes(broken.as_bytes()).unwrap_err().to_string().contains("line 3"));
    }

    #[test]
    fn device_record_converts() {
        let mut r = ScopeStatsRecord { site_line: 77, depth: 1, ring_id: 1, ..Default::default() };
        r.set_site_file("orch.cpp");
        let row = ScopeRow::from_record(&r);
        assert_eq!(row.site, "orch.cpp:77");
        assert_eq!(row.phase, ScopePhase::Begin);
    }
}
