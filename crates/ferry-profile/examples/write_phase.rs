//! Times the DFX write phase (`ferry_profile::write_all`) and prints its report: records,
//! files-phase time and rate, bytes per record, trace-phase time, and each file.
//!
//! ```text
//! cargo run -p ferry-profile --release --example write_phase -- OUT_DIR [--from RUN_DIR | --tasks N] [--repeat R]
//! ```
//!
//! `--from` writes the model read back from a run's files (e.g. a `ferry run --out` directory),
//! `--tasks` a storm-shaped synthetic run (`sample::scaled_run`, default 50,000 tasks).

use std::path::PathBuf;

use ferry_profile::{self as output, sample::scaled_run, WriteOptions};

fn main() {
    let mut args = std::env::args().skip(1);
    let mut out: Option<PathBuf> = None;
    let (mut from, mut tasks, mut repeat) = (None, 50_000u32, 1u32);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--from" => from = Some(PathBuf::from(value())),
            "--tasks" => tasks = value().parse().expect("--tasks N"),
            "--repeat" => repeat = value().parse().expect("--repeat R"),
            _ => out = Some(PathBuf::from(&a)),
        }
    }
    let out = out.expect("usage: write_phase OUT_DIR [--from RUN_DIR | --tasks N] [--repeat R]");
    let run = match &from {
        Some(d) => output::read_run(d).expect("reading the run"),
        None => scaled_run(tasks),
    };
    println!("model: {} tasks, {} records", run.tasks().len(), run.record_count());
    for _ in 0..repeat {
        let r = output::write_all(&out, &run, &WriteOptions::default()).expect("writing");
        println!(
            "files {:.3} s ({:.0} records/s, {:.1} bytes/record), traces {:.3} s, {} bytes in {} files",
            r.files_elapsed.as_secs_f64(),
            r.records_per_sec(),
            r.bytes_per_record(),
            r.traces_elapsed.as_secs_f64(),
            r.bytes,
            r.files.len()
        );
        for f in &r.files {
            println!(
                "  {:<32} {:>10} bytes {:>8} records {:>8.1} ms",
                f.path.strip_prefix(&out).unwrap_or(&f.path).display(),
                f.bytes,
                f.records,
                f.elapsed.as_secs_f64() * 1e3
            );
        }
    }
}
