//! The figures page (`docs/figures.md`): `ferry figures FILE...` renders it from one or more
//! `ferry bench all --json` outputs ([`crate::all`], one per invocation), giving each headline
//! figure as the range over the invocations.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

/// How a figure's number is printed.
#[derive(Clone, Copy)]
enum Fmt {
    /// A ratio, `1.23x`.
    Times,
    /// A fraction, `0.85`.
    Frac,
    /// A percentage already in percent, `0.45 %`.
    Pct,
    /// An integer with thousands separators and a unit.
    Int(&'static str),
    /// One decimal and a unit.
    Dec1(&'static str),
}

impl Fmt {
    fn show(self, x: f64) -> String {
        match self {
            Fmt::Times => format!("{x:.2}x"),
            Fmt::Frac => format!("{x:.3}"),
            Fmt::Pct => format!("{x:.2} %"),
            Fmt::Int(u) => format!("{}{}", thousands(x.round() as i64), unit(u)),
            Fmt::Dec1(u) => format!("{x:.1}{}", unit(u)),
        }
    }
}

fn unit(u: &str) -> String {
    if u.is_empty() {
        String::new()
    } else {
        format!(" {u}")
    }
}

fn thousands(n: i64) -> String {
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// One headline figure: where it is in `bench all`'s JSON and how to read it.
struct Figure {
    /// The `ferry bench` area (a key of `areas`).
    area: &'static str,
    /// JSON pointer inside the area's object.
    pointer: &'static str,
    /// What the number is.
    what: &'static str,
    fmt: Fmt,
    /// The goal it is held to, if any.
    target: &'static str,
}

const FIGURES: &[Figure] = &[
    Figure {
        area: "sim",
        pointer: "/idle_parked_cpu_pct_of_core",
        what: "idle a2a3 chip, threads parked: CPU of one core",
        fmt: Fmt::Pct,
        target: "",
    },
    Figure {
        area: "sim",
        pointer: "/idle_waiting_cpu_pct_of_core",
        what: "idle chip, every core launched and awaiting a dispatch: CPU of one core",
        fmt: Fmt::Pct,
        target: "< 2 %",
    },
    Figure {
        area: "sim",
        pointer: "/handshake_rtt_ns",
        what: "handshake dispatch round trip",
        fmt: Fmt::Int("ns"),
        target: "",
    },
    Figure {
        area: "sim",
        pointer: "/handshake_rtt_vs_baseline",
        what: "handshake round trip over an mpsc ping-pong in the same run",
        fmt: Fmt::Frac,
        target: "",
    },
    Figure {
        area: "sim",
        pointer: "/contention/alone_tasks_per_s",
        what: "the storm alone (a2a3, 4 AICPU threads, 24 cores)",
        fmt: Fmt::Int("tasks/s"),
        target: "",
    },
    Figure {
        area: "sim",
        pointer: "/contention/beside_one/wall_vs_alone",
        what: "storm wall time beside 1 busy loop, over alone",
        fmt: Fmt::Times,
        target: "≤ 2",
    },
    Figure {
        area: "sim",
        pointer: "/contention/beside_all/wall_vs_alone",
        what: "storm wall time beside one busy loop per CPU, over alone",
        fmt: Fmt::Times,
        target: "≤ 3",
    },
    Figure {
        area: "runtime",
        pointer: "/device_orch_tasks_per_s",
        what: "storm through the full path, device-orchestrated",
        fmt: Fmt::Int("tasks/s"),
        target: "",
    },
    Figure {
        area: "runtime",
        pointer: "/host_graph_tasks_per_s",
        what: "storm through the full path, host-built graph",
        fmt: Fmt::Int("tasks/s"),
        target: "",
    },
    Figure {
        area: "runtime",
        pointer: "/device_orch_ns_per_task",
        what: "storm wall time per task, device-orchestrated (median of the rounds)",
        fmt: Fmt::Int("ns"),
        target: "≤ 2000",
    },
    Figure {
        area: "runtime",
        pointer: "/host_graph_ns_per_task",
        what: "storm wall time per task, host-built graph (median of the rounds)",
        fmt: Fmt::Int("ns"),
        target: "≤ 2000",
    },
    Figure {
        area: "runtime",
        pointer: "/dispatch_overhead_ns_per_task",
        what: "dispatch overhead per storm task over a direct kernel call",
        fmt: Fmt::Int("ns"),
        target: "≤ 1500",
    },
    Figure {
        area: "launch",
        pointer: "/changed_ns_per_run",
        what: "launch transaction host time per prepare + publish + launch, changed prefix",
        fmt: Fmt::Int("ns"),
        target: "",
    },
    Figure {
        area: "launch",
        pointer: "/unchanged_ns_per_run",
        what: "launch transaction host time per prepare + publish + launch, unchanged prefix",
        fmt: Fmt::Int("ns"),
        target: "",
    },
    Figure {
        area: "launch",
        pointer: "/runtime/0/speedup",
        what: "vector runs, pipelined over serial, a2a3 host-built",
        fmt: Fmt::Times,
        target: "",
    },
    Figure {
        area: "launch",
        pointer: "/runtime/1/speedup",
        what: "vector runs, pipelined over serial, a2a3 device-orchestrated",
        fmt: Fmt::Times,
        target: "",
    },
    Figure {
        area: "launch",
        pointer: "/runtime/2/speedup",
        what: "vector runs, pipelined over serial, a5 host-built",
        fmt: Fmt::Times,
        target: "",
    },
    Figure {
        area: "launch",
        pointer: "/runtime/0/pipelined_idle_fraction",
        what: "vector runs, pipelined: the chip's idle time between runs over wall time, a2a3 host-built",
        fmt: Fmt::Frac,
        target: "≤ 0.05",
    },
    Figure {
        area: "launch",
        pointer: "/runtime/0/pipelined_of_device_bound",
        what: "vector runs, pipelined runs/s over the device-bound rate, a2a3 host-built",
        fmt: Fmt::Frac,
        target: "≥ 0.9",
    },
    Figure {
        area: "launch",
        pointer: "/runtime/1/pipelined_idle_fraction",
        what: "vector runs, pipelined: the chip's idle time between runs over wall time, a2a3 device-orchestrated",
        fmt: Fmt::Frac,
        target: "≤ 0.05",
    },
    Figure {
        area: "launch",
        pointer: "/runtime/1/pipelined_of_device_bound",
        what: "vector runs, pipelined runs/s over the device-bound rate, a2a3 device-orchestrated",
        fmt: Fmt::Frac,
        target: "≥ 0.9",
    },
    Figure {
        area: "launch",
        pointer: "/runtime/2/pipelined_idle_fraction",
        what: "vector runs, pipelined: the chip's idle time between runs over wall time, a5 host-built",
        fmt: Fmt::Frac,
        target: "≤ 0.05",
    },
    Figure {
        area: "launch",
        pointer: "/runtime/2/pipelined_of_device_bound",
        what: "vector runs, pipelined runs/s over the device-bound rate, a5 host-built",
        fmt: Fmt::Frac,
        target: "≥ 0.9",
    },
    Figure {
        area: "copy",
        pointer: "/gather/0/engine_vs_contiguous",
        what: "4 KiB fragments host→device: gather kernel over one contiguous copy",
        fmt: Fmt::Frac,
        target: "≥ 0.9",
    },
    Figure {
        area: "copy",
        pointer: "/gather/2/engine_vs_contiguous",
        what: "256 KiB fragments: copy path over one contiguous copy",
        fmt: Fmt::Frac,
        target: "≥ 0.8",
    },
    Figure {
        area: "copy_server",
        pointer: "/freeze_ratio",
        what: "server emulator: longest call with Prewarm over without",
        fmt: Fmt::Frac,
        target: "≤ 0.05",
    },
    Figure {
        area: "dfx",
        pointer: "/storm/in_run/ratio",
        what: "storm with all five DFX subsystems: in-run throughput over DFX off",
        fmt: Fmt::Frac,
        target: "≥ 0.9",
    },
    Figure {
        area: "dfx",
        pointer: "/storm/command/ratio",
        what: "the whole `ferry run` storm command with all five and the default output (the native profile), over DFX off",
        fmt: Fmt::Times,
        target: "≤ 1.3",
    },
    Figure {
        area: "dfx",
        pointer: "/storm/write_phase/records_per_s",
        what: "DFX files written per second after the run",
        fmt: Fmt::Int("records/s"),
        target: "≥ 1,000,000",
    },
    Figure {
        area: "dfx",
        pointer: "/storm/trace_phase/ratio",
        what: "trace phase at 50,000 tasks over 5,000 (linear: 10)",
        fmt: Fmt::Dec1(""),
        target: "≤ 12",
    },
    Figure {
        area: "dfx",
        pointer: "/drain/2/vs_memcpy",
        what: "a5 drain (polling) over a streaming memcpy of the same bytes",
        fmt: Fmt::Frac,
        target: "≥ 0.3",
    },
    Figure {
        area: "dfx",
        pointer: "/storm/native_profile/bytes_per_record",
        what: "bytes per DFX record in the native profile",
        fmt: Fmt::Dec1("B"),
        target: "≤ 48",
    },
    Figure {
        area: "dfx",
        pointer: "/storm/write_phase/bytes_per_record",
        what: "bytes per DFX record in the original formats (`ferry export`)",
        fmt: Fmt::Dec1("B"),
        target: "",
    },
];

/// Why a file is not a `ferry bench all --json` output.
#[derive(Debug, thiserror::Error)]
pub enum FiguresError {
    /// The file is not JSON.
    #[error("{file}: not a `ferry bench all --json` output")]
    NotJson {
        /// The file, as given.
        file: String,
        /// What the JSON reader found.
        #[source]
        source: serde_json::Error,
    },
    /// The file is JSON without an `"areas"` object.
    #[error("{file}: no \"areas\" object (is it a `ferry bench all --json` output?)")]
    NoAreas {
        /// The file, as given.
        file: String,
    },
}

/// One invocation of `ferry bench all --json` read back from `file` (its `bytes`), named by
/// the file's name, as [`render`] takes it.
///
/// # Errors
/// [`FiguresError`] when the bytes are not JSON or hold no `"areas"` object.
pub fn invocation(file: &Path, bytes: &[u8]) -> Result<(String, Value), FiguresError> {
    let shown = || file.display().to_string();
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|source| FiguresError::NotJson { file: shown(), source })?;
    if v.get("areas").and_then(Value::as_object).is_none() {
        return Err(FiguresError::NoAreas { file: shown() });
    }
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok((name, v))
}

/// The headline table of one `bench all` object (what `ferry bench all` prints without `--json`).
pub fn render_one(v: &Value) -> String {
    let page = render(&[("this run".to_string(), v.clone())]);
    page.split_once("## Headline figures")
        .map_or(page.clone(), |(_, t)| format!("## Headline figures{t}"))
}

/// The page: how the figures were made, each invocation's machine (`(file name, bench all
/// object)`, see [`invocation`]), then one row per figure.
pub fn render(runs: &[(String, Value)]) -> String {
    let mut s = String::from(
        "# Figures\n\n\
         Every headline figure of ferry, as measured by `ferry bench all --json` (each bench area in a\n\
         process of its own; each figure a ratio against a baseline from the same run where it is a\n\
         ratio, medians of interleaved rounds). This page is rendered from the JSON files beside it\n\
         by `ferry figures docs/figures/*.json -o docs/figures.md`; a test checks that it matches\n\
         them. A figure is given as the range over the invocations; it counts as reproduced when\n\
         every invocation meets its target. `ferry bench <area> --help` says what each area measures.\n\n\
         To measure your machine:\n\n\
         ```sh\n\
         cargo build --release -p ferry-cli\n\
         target/release/ferry bench all --json -o /tmp/1.json\n\
         target/release/ferry bench all --json -o /tmp/2.json\n\
         target/release/ferry figures /tmp/1.json /tmp/2.json\n\
         ```\n\n## Invocations\n\n\
         | file | date (UTC) | CPUs | CPU | load before → after | build |\n|---|---|---|---|---|---|\n",
    );
    for (name, v) in runs {
        let m = &v["machine"];
        let load = |k: &str| {
            m[k].as_array()
                .and_then(|a| a.first())
                .and_then(Value::as_f64)
                .map_or("?".into(), |x| format!("{x:.1}"))
        };
        let _ = writeln!(
            s,
            "| `{name}` | {} | {} | {} | {} → {} | {} {}{} |",
            v["date"].as_str().unwrap_or("?"),
            m["cpus"].as_u64().map_or("?".into(), |n| n.to_string()),
            m["cpu_model"].as_str().unwrap_or("?"),
            load("loadavg_before"),
            load("loadavg_after"),
            v["build"]["profile"].as_str().unwrap_or("?"),
            v["build"]["commit"]
                .as_str()
                .map_or(String::new(), |c| format!("`{}`", &c[..c.len().min(10)])),
            if v["quick"].as_bool() == Some(true) { " (quick)" } else { "" },
        );
    }
    s.push_str(
        "\n## Headline figures\n\n| area | figure | range | each invocation | target | met |\n|---|---|---|---|---|---|\n",
    );
    for f in FIGURES {
        let vals: Vec<Option<f64>> = runs
            .iter()
            .map(|(_, v)| {
                v["areas"].get(f.area).and_then(|a| a.pointer(f.pointer)).and_then(Value::as_f64)
            })
            .collect();
        let got: Vec<f64> = vals.iter().flatten().copied().collect();
        let range =
            match (got.iter().copied().reduce(f64::min), got.iter().copied().reduce(f64::max)) {
                (Some(lo), Some(hi)) if f.fmt.show(lo) == f.fmt.show(hi) => f.fmt.show(lo),
                (Some(lo), Some(hi)) => format!("{} – {}", f.fmt.show(lo), f.fmt.show(hi)),
                _ => "—".to_string(),
            };
        let each: Vec<String> =
            vals.iter().map(|x| x.map_or("—".into(), |x| f.fmt.show(x))).collect();
        let _ = writeln!(
            s,
            "| `{}` | {} | **{range}** | {} | {} | {} |",
            f.area,
            f.what,
            each.join(" / "),
            f.target,
            met(f.target, &vals),
        );
    }
    s
}

/// How many invocations meet `target` (`≤ 3`, `≥ 0.85`, `< 2 %`, `≥ 1,000,000`), as `k/n`;
/// empty without a target. A missing figure does not meet it.
fn met(target: &str, vals: &[Option<f64>]) -> String {
    let t = target.trim();
    let (op, rest) = match t.chars().next() {
        Some(c @ ('≤' | '≥' | '<' | '>')) => (c, &t[c.len_utf8()..]),
        _ => return String::new(),
    };
    let num: String = rest.chars().filter(|c| c.is_ascii_digit() || *c == '.').collect();
    let Ok(bound) = num.parse::<f64>() else { return String::new() };
    let ok = vals
        .iter()
        .filter(|v| {
            v.is_some_and(|x| match op {
                '≤' => x <= bound,
                '≥' => x >= bound,
                '<' => x < bound,
                _ => x > bound,
            })
        })
        .count();
    format!("{ok}/{}", vals.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_their_figures_say() {
        assert_eq!(Fmt::Int("tasks/s").show(1_234_567.4), "1,234,567 tasks/s");
        assert_eq!(Fmt::Times.show(1.234), "1.23x");
        assert_eq!(thousands(-1000), "-1,000");
    }

    #[test]
    fn a_figure_is_the_range_over_invocations_and_a_missing_one_is_a_dash() {
        let run = |x: f64| {
            serde_json::json!({"date": "d", "machine": {"cpus": 2}, "build": {"profile": "release"},
                                  "areas": {"sim": {"contention": {"beside_one": {"wall_vs_alone": x}}}}})
        };
        let page = render(&[("1.json".into(), run(1.5)), ("2.json".into(), run(1.84))]);
        let row = page.lines().find(|l| l.contains("beside 1 busy loop")).unwrap();
        assert!(
            row.contains("**1.50x – 1.84x**")
                && row.contains("1.50x / 1.84x")
                && row.contains("≤ 2"),
            "{row}"
        );
        let missing = page
            .lines()
            .find(|l| l.contains("freeze ratio") || l.contains("longest call"))
            .unwrap();
        assert!(missing.contains("**—**") && missing.contains("— / —"), "{missing}");
        assert!(row.ends_with("| 2/2 |"), "{row}");
        assert!(missing.ends_with("| 0/2 |"), "{missing}");
    }

    #[test]
    fn targets_are_counted_per_invocation() {
        let v = [Some(0.9), Some(0.8), None];
        assert_eq!(met("≥ 0.85", &v), "1/3");
        assert_eq!(met("≤ 0.85", &v), "1/3");
        assert_eq!(met("< 2 %", &[Some(0.5)]), "1/1");
        assert_eq!(met("≥ 1,000,000", &[Some(999_999.0), Some(1e6)]), "1/2");
        assert_eq!(met("", &v), "");
    }
}
