//! `ferry bench dfx`'s report: the JSON object `--json` prints and the text without it.
use std::fmt::Write as _;

use ferry_sim::Arch;
use serde_json::{json, Value};

use crate::AreaReport;

use super::{
    dfx_cpu_split, DfxArea, TARGET_COMMAND, TARGET_IN_RUN, TARGET_NATIVE_BYTES_PER_RECORD,
    TARGET_TRACE_RATIO, TARGET_WRITE_RECORDS_PER_S,
};

impl DfxArea {
    fn row_of(&self, name: &str) -> Option<&super::CostRow> {
        self.rows.iter().find(|r| r.config == name)
    }

    /// `name`'s ratio against DFX off (0 without such a row).
    fn ratio_of(&self, name: &str) -> f64 {
        self.row_of(name).map_or(0.0, |r| r.ratio)
    }

    /// `name`'s median over the rounds of its paired ratios (0 without such a row).
    fn paired_of(&self, name: &str) -> f64 {
        self.row_of(name).map_or(0.0, |r| r.ratio_paired)
    }

    /// Records per second of the files phase.
    fn records_per_s(&self) -> f64 {
        self.wrote.records as f64 / self.files_s.max(1e-9)
    }

    /// Bytes of the native profile per record of the original formats (0 without records).
    fn native_bytes_per_record(&self) -> f64 {
        if self.wrote.records == 0 {
            return 0.0;
        }
        self.native.bytes as f64 / self.wrote.records as f64
    }

    /// The report as one JSON value.
    pub fn json(&self) -> Value {
        let transport = &self.transport;
        let drains: Vec<Value> = transport
            .drain
            .iter()
            .map(|d| {
                let target = if d.svm { 0.5 } else { 0.3 };
                json!({
                    "arch": d.arch, "doorbell": d.doorbell, "gb_per_s": d.gb_per_s,
                    "memcpy_gb_per_s": d.memcpy_gb_per_s, "vs_memcpy": d.vs_memcpy,
                    "target_vs_memcpy": target, "writer_waits": d.writer_waits,
                    // The same bytes handed from one thread to another with no transport (what
                    // this machine moves between two CPUs now; it follows the VM's phases).
                    "cross_core_gb_per_s": d.cross_core_gb_per_s, "vs_cross_core": d.vs_cross_core,
                })
            })
            .collect();
        let poll_vs_bell: Vec<Value> = Arch::ALL
            .into_iter()
            .filter_map(|a| {
                let (p, b) = (transport.drain_of(a, false)?, transport.drain_of(a, true)?);
                Some(json!({ "arch": a.name(), "doorbell_over_polling": b.gb_per_s / p.gb_per_s.max(1e-12), "target": "<= 1.5" }))
            })
            .collect();
        let subsystems: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                json!({
                    "config": r.config, "tasks_per_s": r.tasks_per_s, "ratio_vs_off": r.ratio,
                    "ratio_vs_off_paired": r.ratio_paired,
                    "records": r.records, "dropped": r.dropped, "stall_waits": r.stall_waits,
                    "cpu_ms_per_run": r.cpu.map(|c| json!({
                        "aicpu": c.aicpu_ns / 1e6, "aicore": c.aicore_ns / 1e6,
                        "dfx_host": c.dfx_host_ns / 1e6,
                    })),
                })
            })
            .collect();
        let tps_of = |name: &str| self.row_of(name).map_or(0.0, |r| r.tasks_per_s);
        let (cmd_off, cmd_all, cmd_original, cmd_paired) = self.command;
        let [t_small, t_big] = self.trace_s;
        let wrote = &self.wrote;
        json!({
            "transport": serde_json::to_value(transport).unwrap_or(Value::Null),
            "drain": drains,
            "polling_vs_doorbell": poll_vs_bell,
            "storm": {
                "arch": self.arch.name(),
                "tasks": self.tasks,
                "rounds": self.rounds,
                "in_run_rounds": self.in_run_rounds,
                // More rounds of off and all five alone, adjacent (their medians and paired
                // ratio are over `in_run_rounds + in_run_pairs` samples).
                "in_run_pairs": self.in_run_pairs,
                "statistic": "median of interleaved rounds",
                "policy": "block",
                "path": "device program (Path A) + launch transaction",
                "host_threads": ferry_runtime::host::dfx::HOST_THREADS,
                "device_clock": self.device_clock,
                "in_run": {
                    "off_tasks_per_s": tps_of("off"),
                    "all_tasks_per_s": tps_of("all"),
                    "ratio": self.ratio_of("all"),
                    "ratio_paired": self.paired_of("all"),
                    "target": TARGET_IN_RUN,
                    "with_native_profile": {
                        "ratio": self.ratio_of(super::costs::ALL_RECORDED),
                        "ratio_paired": self.paired_of(super::costs::ALL_RECORDED),
                        "note": "all five recorded into the native profile (profile.ferry) alone while the run runs, the collectors keeping no record, as ferry run --out writes it by default",
                    },
                    "with_every_payload": {
                        "ratio": self.ratio_of("all_dump_args=2"),
                        "ratio_paired": self.paired_of("all_dump_args=2"),
                        "note": "all five with --dump-args 2: every tensor's payload copied (level 3 copies only tensors marked with dump(...), and the storm marks none)",
                    },
                    "dfx_cpu": dfx_cpu_split(&self.rows).map(|d| json!({
                        "records": d.records,
                        "aicpu_ns_per_record": d.aicpu_ns_per_record,
                        "dfx_host_ns_per_record": d.host_ns_per_record,
                        "aicore_ms_added": d.aicore_ms_added,
                        "cpu_off_over_all": d.cpu_ratio,
                        "note": "CPU time of the chip's and the engine's threads during the run (median of the rounds); on 2 cores both runs are CPU-bound",
                    })),
                },
                "command": {
                    "off_s": cmd_off,
                    "all_s": cmd_all,
                    "ratio": cmd_all / cmd_off.max(1e-9),
                    "ratio_paired": cmd_paired,
                    "target": TARGET_COMMAND,
                    "note": "ferry run --example storm with all five and --out DIR: the default output, the native profile alone",
                    "all_with_original_formats_s": cmd_original,
                    "with_original_formats_ratio": cmd_original / cmd_off.max(1e-9),
                },
                "native_profile": {
                    "bytes": self.native.bytes,
                    "chunks": self.native.chunks,
                    "transport_records": self.native.transport_records,
                    "bytes_per_record": self.native_bytes_per_record(),
                    "target": TARGET_NATIVE_BYTES_PER_RECORD,
                    "note": "profile.ferry of the last all-five command, over the records the original formats hold (write_phase.records); DepGen and ArgsDump transport records are 8-byte words",
                },
                "write_phase": {
                    "records": wrote.records,
                    "bytes": wrote.bytes,
                    "bytes_per_record": wrote.bytes_per_record(),
                    "files_s": self.files_s,
                    "records_per_s": self.records_per_s(),
                    "target_records_per_s": TARGET_WRITE_RECORDS_PER_S,
                    "with_traces_s": self.whole_s,
                    "with_traces_records_per_s": wrote.records as f64 / self.whole_s.max(1e-9),
                },
                "trace_phase": {
                    "tasks": self.trace_tasks,
                    "seconds": [t_small, t_big],
                    "ratio": t_big / t_small.max(1e-9),
                    "target": TARGET_TRACE_RATIO,
                },
                "subsystems": subsystems,
            },
        })
    }
}

impl AreaReport for DfxArea {
    /// The report as `ferry bench dfx --json` prints it (pretty-printed).
    fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.json()).unwrap_or_default()
    }

    fn to_text(&self) -> String {
        let (t, mut s) = (&self.transport, String::new());
        let (tasks, rounds) = (self.tasks, self.rounds);
        let (in_run_rounds, in_run_pairs) = (self.in_run_rounds, self.in_run_pairs);
        let _ = writeln!(
            s,
            "DFX transport (a2a3 hot path {:.1} ns/record, switch {:.0} ns):",
            t.hot_path_ns_per_record, t.switch_ns
        );
        for d in &t.drain {
            let _ = writeln!(
                s,
                "  drain {:<5} {:<8} {:>6.2} GB/s = {:.2} of a streaming memcpy of the same {} MiB, \
                 {:.2} of a bare copy between two threads",
                d.arch,
                if d.doorbell { "doorbell" } else { "polling" },
                d.gb_per_s,
                d.vs_memcpy,
                d.working_set_bytes >> 20,
                d.vs_cross_core
            );
        }
        let _ = writeln!(
            s,
            "{} storm, {tasks} tasks, all five subsystems, median of {rounds} interleaved rounds \
             ({in_run_rounds} in the run, then {in_run_pairs} more of off and all five alone):",
            self.arch.name()
        );
        let _ = writeln!(
            s,
            "  in run:      {:.2} of DFX off (target >= {TARGET_IN_RUN}); median of the rounds' own \
             ratios {:.2}; recording the native profile {:.2} (rounds' own {:.2}); with every \
             payload (--dump-args 2) {:.2}",
            self.ratio_of("all"),
            self.paired_of("all"),
            self.ratio_of(super::costs::ALL_RECORDED),
            self.paired_of(super::costs::ALL_RECORDED),
            self.ratio_of("all_dump_args=2")
        );
        let (cmd_off, cmd_all, cmd_original, cmd_paired) = self.command;
        let _ = writeln!(
            s,
            "  command:     {:.2} s vs {:.2} s off = {:.2}x (target <= {TARGET_COMMAND}; rounds' own \
             ratios {:.2}x); with --original-formats {:.2} s = {:.2}x",
            cmd_all,
            cmd_off,
            cmd_all / cmd_off.max(1e-9),
            cmd_paired,
            cmd_original,
            cmd_original / cmd_off.max(1e-9)
        );
        let _ = writeln!(
            s,
            "  native:      {} bytes, {} chunks, {:.1} bytes/record (target <= {TARGET_NATIVE_BYTES_PER_RECORD}; \
             the original formats {:.1})",
            self.native.bytes,
            self.native.chunks,
            self.native_bytes_per_record(),
            self.wrote.bytes_per_record()
        );
        let wrote = &self.wrote;
        let _ = writeln!(
            s,
            "  write phase: {} records, {:.1} bytes/record, files {:.2} M records/s (target >= 1); \
             with the Perfetto trace {:.3} s = {:.2} M records/s",
            wrote.records,
            wrote.bytes_per_record(),
            self.records_per_s() / 1e6,
            self.whole_s,
            wrote.records as f64 / self.whole_s.max(1e-9) / 1e6
        );
        let ([t_small, t_big], [n_small, n_big]) = (self.trace_s, self.trace_tasks);
        let _ = writeln!(
            s,
            "  trace phase: {:.3} s at {} tasks, {:.3} s at {} tasks = {:.1}x (target <= {TARGET_TRACE_RATIO})",
            t_small,
            n_small,
            t_big,
            n_big,
            t_big / t_small.max(1e-9)
        );
        if let Some(d) = dfx_cpu_split(&self.rows) {
            let _ = writeln!(
                s,
                "  DFX CPU:     {:.0} ns/record on the AICPU threads + {:.0} ns/record on the host \
                 engine ({} records); AICore threads +{:.1} ms; run CPU off/all {:.2}",
                d.aicpu_ns_per_record,
                d.host_ns_per_record,
                d.records,
                d.aicore_ms_added,
                d.cpu_ratio
            );
        }
        for r in &self.rows {
            let _ = writeln!(
                s,
                "  {:<12} {:>10.0} tasks/s  ratio {:>5.2} (paired {:>4.2})  {:>9} records, {} dropped, \
                 {} gate waits",
                r.config,
                r.tasks_per_s,
                r.ratio,
                r.ratio_paired,
                r.records,
                r.dropped,
                r.stall_waits
            );
        }
        s.pop();
        s
    }
}
