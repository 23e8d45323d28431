//! `pmu.csv` (docs/dfx.md) and its loss accounting sidecar `pmu.dfx.json`.
//!
//! Header: `thread_id,core_id,task_id,func_id,core_type,pmu_total_cycles,<named counters in slot
//! order>,event_type`; `task_id` is `0x` + 16 zero-padded hex digits, `core_type` 0 (AIC) / 1
//! (AIV). The CSV stays exactly the original's so existing readers (which check the header prefix
//! and parse every data row) keep working; the PMU lanes' loss accounting therefore goes into the
//! sidecar, written atomically right after the CSV.

use std::io::{BufRead, Write};

use super::stream::{put_hex16, put_i64, put_u64, InlineList, Ticker};
use super::OutputError;

/// File name inside the output directory.
pub const PMU_FILE: &str = "pmu.csv";
/// Loss accounting sidecar of [`PMU_FILE`].
pub const PMU_LOSS_FILE: &str = "pmu.dfx.json";
/// The fixed leading columns of the header.
pub const PMU_HEADER_PREFIX: [&str; 6] =
    ["thread_id", "core_id", "task_id", "func_id", "core_type", "pmu_total_cycles"];

/// Counter names of an event type, in slot order (a2a3: 8 slots; a5 adds 2). Unknown types fall
/// back to type 2 (pipe utilisation), as the original does.
///
/// # Examples
/// ```
/// use ferry_profile::pmu_counter_names;
/// assert_eq!(pmu_counter_names("a2a3", 2)[0], "vec_busy_cycles");
/// assert_eq!(pmu_counter_names("a5", 2).len(), 10);
/// ```
pub fn pmu_counter_names(arch: &str, event_type: u32) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = match event_type {
        1 => vec![
            "cube_fp16_ops",
            "cube_int8_ops",
            "vec_fp32_ops",
            "vec_fp16_ops",
            "vec_int32_ops",
            "vec_misc_ops",
            "scalar_ops",
            "elements_processed",
        ],
        4 => vec![
            "ub_read_bytes",
            "ub_write_bytes",
            "gm_read_bytes",
            "gm_write_bytes",
            "l1_read_bytes",
            "l1_write_bytes",
            "mte_requests",
            "bus_stall_cycles",
        ],
        5 => vec![
            "l0a_read_bytes",
            "l0a_write_bytes",
            "l0b_read_bytes",
            "l0b_write_bytes",
            "l0c_read_bytes",
            "l0c_write_bytes",
            "l0_bank_conflicts",
            "l0_requests",
        ],
        6 => vec![
            "bank_group_conflict",
            "bank_conflict",
            "vec_resource_conflict",
            "cube_resource_conflict",
            "mte_resource_conflict",
            "scalar_wait_cycles",
            "pipe_barrier_cycles",
            "sync_wait_cycles",
        ],
        7 => vec![
            "ub_read_requests",
            "ub_write_requests",
            "ub_read_bytes",
            "ub_write_bytes",
            "ub_bank_conflicts",
            "ub_vec_read_bytes",
            "ub_vec_write_bytes",
            "ub_stall_cycles",
        ],
        8 => vec![
            "l2_read_hit",
            "l2_read_miss",
            "l2_write_hit",
            "l2_write_miss",
            "l2_victims",
            "l2_read_bytes",
            "l2_write_bytes",
            "l2_requests",
        ],
        _ => vec![
            "vec_busy_cycles",
            "cube_busy_cycles",
            "scalar_busy_cycles",
            "mte1_busy_cycles",
            "mte2_busy_cycles",
            "mte3_busy_cycles",
            "icache_miss",
            "icache_req",
        ],
    };
    if arch == "a5" {
        v.extend(["fixpipe_busy_cycles", "issued_instructions"]);
    }
    v
}

/// The PMU subsystem's rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PmuTable {
    /// Event type the counters were programmed with.
    pub event_type: u32,
    /// Counter names in slot order (the header's middle columns).
    pub counter_names: Vec<String>,
    /// One row per task, at completion.
    pub rows: Vec<PmuRow>,
}

/// One `pmu.csv` row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PmuRow {
    /// AICPU thread that recorded the row.
    pub thread_id: u32,
    /// Core that ran the task.
    pub core_id: u32,
    /// Task id.
    pub task_id: u64,
    /// Kernel function id.
    pub func_id: u32,
    /// 0 AIC, 1 AIV.
    pub core_type: i32,
    /// Total cycles.
    pub pmu_total_cycles: u64,
    /// One value per counter name (inline up to the device's
    /// [`PMU_MAX_COUNTERS`](ferry_abi::records::PMU_MAX_COUNTERS): a storm's 50,000 rows make no
    /// allocation each).
    pub counters: InlineList<u64, { ferry_abi::records::PMU_MAX_COUNTERS }>,
}

impl PmuTable {
    /// A table for `event_type` with the arch's counter names.
    pub fn new(arch: &str, event_type: u32) -> Self {
        Self {
            event_type,
            counter_names: pmu_counter_names(arch, event_type)
                .into_iter()
                .map(String::from)
                .collect(),
            rows: Vec::new(),
        }
    }
}

/// Writes `pmu.csv` to `w`.
///
/// # Errors
///
/// [`OutputError::Io`] on a write failure, [`OutputError::Format`] when a row's counter count
/// differs from the header's.
pub fn write_pmu<W: Write>(w: W, t: &PmuTable) -> Result<(), OutputError> {
    write_pmu_ticked(w, t, &Ticker::silent())
}

/// [`write_pmu`], one tick per row. Each row is formatted into one reused line buffer (no
/// allocation, no `core::fmt`) and written with one call.
pub(crate) fn write_pmu_ticked<W: Write>(
    mut w: W,
    t: &PmuTable,
    tick: &Ticker<'_>,
) -> Result<(), OutputError> {
    let io = OutputError::io(PMU_FILE);
    let mut line: Vec<u8> = Vec::with_capacity(256);
    for (i, name) in PMU_HEADER_PREFIX
        .iter()
        .copied()
        .chain(t.counter_names.iter().map(String::as_str))
        .enumerate()
    {
        if i > 0 {
            line.push(b',');
        }
        line.extend_from_slice(name.as_bytes());
    }
    line.extend_from_slice(b",event_type\n");
    w.write_all(&line).map_err(&io)?;
    for r in &t.rows {
        if r.counters.len() != t.counter_names.len() {
            return Err(OutputError::Format {
                file: PMU_FILE.into(),
                what: format!(
                    "task {:#x} has {} counters, the header {}",
                    r.task_id,
                    r.counters.len(),
                    t.counter_names.len()
                ),
            });
        }
        line.clear();
        put_u64(&mut line, r.thread_id.into());
        line.push(b',');
        put_u64(&mut line, r.core_id.into());
        line.push(b',');
        put_hex16(&mut line, r.task_id);
        line.push(b',');
        put_u64(&mut line, r.func_id.into());
        line.push(b',');
        put_i64(&mut line, r.core_type.into());
        line.push(b',');
        put_u64(&mut line, r.pmu_total_cycles);
        for &c in &r.counters {
            line.push(b',');
            put_u64(&mut line, c);
        }
        line.push(b',');
        put_u64(&mut line, t.event_type.into());
        line.push(b'\n');
        w.write_all(&line).map_err(&io)?;
        tick.tick(1);
    }
    Ok(())
}

/// Reads `pmu.csv`.
///
/// # Errors
///
/// [`OutputError::Format`] naming the line on a bad header, a short row or a non-number.
pub fn read_pmu<R: BufRead>(r: R) -> Result<PmuTable, OutputError> {
    let bad = |line: usize, what: String| OutputError::Format {
        file: PMU_FILE.into(),
        what: format!("line {line}: {what}"),
    };
    let mut lines = super::limits::BoundedLines::new(r, PMU_FILE);
    let header = match lines.next() {
        Some(h) => h?,
        None => return Err(bad(1, "empty file".into())),
    };
    let cols: Vec<&str> = header.trim_end().split(',').collect();
    if cols.len() < 7 || cols[..6] != PMU_HEADER_PREFIX || cols[cols.len() - 1] != "event_type" {
        return Err(bad(1, format!("unexpected header {header:?}")));
    }
    let n = cols.len() - 7;
    let mut t = PmuTable {
        event_type: 0,
        counter_names: cols[6..6 + n].iter().map(|s| s.to_string()).collect(),
        rows: Vec::new(),
    };
    for (i, line) in lines.enumerate() {
        let ln = i + 2;
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.trim_end().split(',').collect();
        if f.len() != cols.len() {
            return Err(bad(ln, format!("{} fields, the header has {}", f.len(), cols.len())));
        }
        let int = |s: &str| s.parse::<u64>().map_err(|e| bad(ln, format!("{s:?}: {e}")));
        let task_hex = f[2]
            .strip_prefix("0x")
            .ok_or_else(|| bad(ln, format!("task_id {:?} lacks 0x", f[2])))?;
        let task_id =
            u64::from_str_radix(task_hex, 16).map_err(|e| bad(ln, format!("{:?}: {e}", f[2])))?;
        let small = |s: &str| -> Result<u32, OutputError> {
            u32::try_from(int(s)?).map_err(|_| bad(ln, format!("{s} does not fit 32 bits")))
        };
        t.rows.push(PmuRow {
            thread_id: small(f[0])?,
            core_id: small(f[1])?,
            task_id,
            func_id: small(f[3])?,
            core_type: f[4].parse::<i32>().map_err(|e| bad(ln, format!("{:?}: {e}", f[4])))?,
            pmu_total_cycles: int(f[5])?,
            counters: f[6..6 + n].iter().map(|s| int(s)).collect::<Result<_, _>>()?,
        });
        t.event_type = small(f[f.len() - 1])?;
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "thread_id,core_id,task_id,func_id,core_type,pmu_total_cycles,vec_busy_cycles,cube_busy_cycles,scalar_busy_cycles,mte1_busy_cycles,mte2_busy_cycles,mte3_busy_cycles,icache_miss,icache_req,event_type\n2,5,0x0000000200000a00,0,1,18432,1024,0,512,0,256,128,3,448,2\n";

    #[test]
    fn spec_example_round_trips_byte_for_byte() {
        let t = read_pmu(EXAMPLE.as_bytes()).unwrap();
        assert_eq!(t.event_type, 2);
        assert_eq!(t.rows[0].task_id, 0x0000_0002_0000_0a00);
        assert_eq!(t.counter_names, pmu_counter_names("a2a3", 2));
        let mut out = Vec::new();
        write_pmu(&mut out, &t).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), EXAMPLE);
    }

    #[test]
    fn malformed_rows_name_their_line() {
        let bad = EXAMPLE.replace("0x0000000200000a00", "12");
        let e = read_pmu(bad.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        assert!(read_pmu("a,b\n".as_bytes()).is_err());
        let short = format!("{EXAMPLE}1,2,0x0,3\n");
        assert!(read_pmu(short.as_bytes()).unwrap_err().to_string().contains("line 3"));
    }
}
