//! A run that never finished, read from its native profile: what `ferry report` says of a
//! directory whose manifest never completed (a run killed, or one whose process ended in a
//! kernel), by the recovery rule of [`crate::recorder`], and its end record
//! ([`crate::run_end`]): what ended the process and, per core, the task that started and never
//! ended.
use std::path::{Path, PathBuf};

use ferry_fs::Dir;
use serde::Serialize;

use crate::recorder::{read_recording, RecordStream, Recording, RecordingError, RECORD_FILE};
use crate::run_end::{read_run_end, EndRecord, EndRecordError, UnfinishedTask, RUN_END_FILE};
use crate::{Manifest, ManifestError, MAX_RECORDS_FILE_BYTES};

/// Why an interrupted run's directory could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InterruptedError {
    /// The directory or its manifest.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The native profile.
    #[error(transparent)]
    Recording(#[from] RecordingError),
    /// The end record.
    #[error(transparent)]
    End(#[from] EndRecordError),
}

/// How an interrupted run ended, as the report's `outcome` says it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InterruptedOutcome {
    /// Always `"interrupted"`.
    pub status: &'static str,
    /// What ended the process (`SIGSEGV (address 0x0) on core 3`, `exit(0) on core 5`), when
    /// its end record says; absent when the process ended without a chance to say (SIGKILL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// The end record: the cause's fields, the faulting core's task, every unfinished task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<EndRecord>,
}

/// One stream's records in an interrupted run's native profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StreamCount {
    /// The stream ([`RecordStream::name`]).
    pub stream: &'static str,
    /// Lanes with records.
    pub lanes: usize,
    /// Records (8-byte words for `dep_gen` and `args`).
    pub records: u64,
}

/// What the native profile of an interrupted run holds: every chunk sealed before the run
/// ended (`ferry report DIR` and its `--json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InterruptedReport {
    /// `{"status": "interrupted"}`.
    pub outcome: InterruptedOutcome,
    /// The run's directory.
    pub dir: PathBuf,
    /// The native profile's path (absent for a run that collected no DFX).
    pub native_profile: Option<PathBuf>,
    /// Sealed chunks recovered.
    pub sealed_chunks: u64,
    /// Records in them.
    pub records: u64,
    /// Bytes after the last sealed chunk (a chunk torn by the end), ignored.
    pub torn_bytes: u64,
    /// Per stream that has records, in stream order.
    pub streams: Vec<StreamCount>,
}

impl InterruptedReport {
    /// The report of `rec`, the native profile `file` of the run in `dir`, and of its end
    /// record `end`.
    pub fn of(
        dir: &Path,
        file: Option<PathBuf>,
        rec: &Recording,
        end: Option<EndRecord>,
    ) -> InterruptedReport {
        let streams = RecordStream::ALL
            .into_iter()
            .filter(|&s| rec.count(s) > 0)
            .map(|s| StreamCount {
                stream: s.name(),
                lanes: rec.per_lane(s).len(),
                records: rec.count(s),
            })
            .collect();
        InterruptedReport {
            outcome: InterruptedOutcome {
                status: "interrupted",
                cause: end.as_ref().map(EndRecord::describe),
                end,
            },
            dir: dir.to_path_buf(),
            native_profile: file,
            sealed_chunks: rec.chunks.len() as u64,
            records: rec.total(),
            torn_bytes: rec.torn_bytes,
            streams,
        }
    }

    /// The per-core unfinished tasks of the end record (none without one).
    pub fn unfinished(&self) -> &[UnfinishedTask] {
        self.outcome.end.as_ref().map_or(&[], |e| &e.unfinished)
    }

    /// The report as text.
    pub fn text(&self) -> String {
        let mut s = format!(
            "run interrupted: the run writing {} never finished (its manifest is incomplete)\n",
            self.dir.display()
        );
        match &self.outcome.end {
            Some(e) => {
                s.push_str(&format!("ended by {}", e.describe()));
                if let Some(t) = &e.task {
                    s.push_str(&format!(" in task {:#x} (kernel `{}`)", t.task, t.kernel));
                }
                s.push('\n');
                s.push_str(&format!(
                    "it had sealed {} chunks, {} records when it ended\n",
                    e.sealed_chunks, e.sealed_records
                ));
            }
            None => s.push_str("ended without an end record (killed: the cause is unknown)\n"),
        }
        for t in self.unfinished() {
            s.push_str(&format!(
                "core {}: task {:#x} ({}) started and never ended\n",
                t.core, t.task, t.kernel
            ));
        }
        let Some(file) = &self.native_profile else {
            s.push_str(
                "no native profile here: the run collected no DFX (with several examples, each \
                 keeps its own in its subdirectory)\n",
            );
            return s;
        };
        s.push_str(&format!(
            "{} holds {} sealed chunks, {} records; {} torn bytes after them ignored\n\n",
            file.display(),
            self.sealed_chunks,
            self.records,
            self.torn_bytes
        ));
        s.push_str(&format!("{:<10} {:>6} {:>12}\n", "stream", "lanes", "records"));
        for c in &self.streams {
            s.push_str(&format!("{:<10} {:>6} {:>12}\n", c.stream, c.lanes, c.records));
        }
        s
    }
}

/// The native profile and end record of the run in `dir` when that run never finished: `dir`'s
/// manifest is incomplete and the directory holds [`RECORD_FILE`] or [`RUN_END_FILE`]. `None`
/// otherwise (a finished run, a directory without a manifest or without either file: the usual
/// readers apply). The files are opened through the directory's handle without following a
/// link, and read no further than [`MAX_RECORDS_FILE_BYTES`] and the end record's size.
///
/// # Errors
/// [`InterruptedError::Manifest`] when the files' place cannot be looked at,
/// [`InterruptedError::Recording`] for a native profile that cannot be read,
/// [`InterruptedError::End`] for an end record that cannot be read.
pub fn open_interrupted(dir: &Path) -> Result<Option<InterruptedReport>, InterruptedError> {
    // A directory or manifest that cannot be read is the usual readers' to refuse, in their
    // words: only the native profile of an unfinished run is read here.
    let Ok(handle) = Dir::open(dir) else { return Ok(None) };
    let Ok(Some(m)) = Manifest::read_in(&handle) else { return Ok(None) };
    if m.complete {
        return Ok(None);
    }
    let has = |rel| handle.stat(rel).map(|m| m.is_some()).map_err(ManifestError::from);
    let (native, end) = (has(RECORD_FILE)?, has(RUN_END_FILE)?);
    if !native && !end {
        return Ok(None);
    }
    let rec = match native {
        true => read_recording(&handle, RECORD_FILE, MAX_RECORDS_FILE_BYTES)?,
        false => Recording::default(),
    };
    let end = read_run_end(&handle)?;
    let file = native.then(|| handle.join(RECORD_FILE));
    Ok(Some(InterruptedReport::of(dir, file, &rec, end)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::{FsyncPolicy, Recorder};
    use crate::OutDir;

    fn tmpdir(tag: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("ferry-interrupted-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// A run whose manifest never completed reads as interrupted with what it sealed; the
    /// same directory once committed does not.
    #[test]
    fn an_unfinished_run_with_a_native_profile_is_interrupted() {
        let d = tmpdir("unfinished");
        let mut out = OutDir::claim(&d, &[]).unwrap();
        out.begin("r", &["ferry".into()], "a2a3", &[RECORD_FILE.into()]).unwrap();
        let rec = Recorder::create(out.dir(), RECORD_FILE, FsyncPolicy::Never).unwrap();
        rec.append(RecordStream::DepGen, 0, 0, &[1u64, 2, 3]);
        rec.append(RecordStream::Args, 2, 0, &[4u64]);
        // What the writer thread sealed so far (a killed run's reader comes after the process).
        rec.flush();
        let r = open_interrupted(&d).unwrap().expect("interrupted");
        assert_eq!((r.sealed_chunks, r.records, r.torn_bytes), (2, 4, 0));
        assert_eq!(r.outcome.status, "interrupted");
        let names: Vec<_> = r.streams.iter().map(|s| (s.stream, s.records)).collect();
        assert_eq!(names, [("dep_gen", 3), ("args", 1)]);
        assert!(r.text().contains("run interrupted"), "{}", r.text());
        out.record(RECORD_FILE, rec.finish().unwrap());
        out.commit().unwrap();
        assert!(open_interrupted(&d).unwrap().is_none());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// An end record names the cause and the faulting core's task, and each core's unfinished
    /// task, with or without a native profile; an empty one (a killed process) names none.
    #[test]
    fn an_end_record_names_the_cause_and_the_unfinished_tasks() {
        use crate::run_end::{EndCause, EndWriter, MAX_RUN_END_BYTES};
        use std::io::Write;
        let d = tmpdir("end");
        let mut out = OutDir::claim(&d, &[]).unwrap();
        out.begin("r", &["ferry".into()], "a2a3", &[RUN_END_FILE.into()]).unwrap();
        let mut f = out.dir().create_new(RUN_END_FILE).unwrap();
        let r = open_interrupted(&d).unwrap().expect("interrupted");
        assert_eq!((r.outcome.cause.as_deref(), r.native_profile.as_ref()), (None, None));
        assert!(r.text().contains("cause is unknown"), "{}", r.text());
        let mut buf = vec![0u8; MAX_RUN_END_BYTES];
        let mut w = EndWriter::new(&mut buf, EndCause::Signal { signal: libc::SIGSEGV, code: 1 });
        w.fault(Some(4), Some(0), false);
        assert!(w.push(2, 0, 0x7, b"add"));
        assert!(w.push(4, 256, 0x9, b"segv"));
        let n = w.finish();
        f.write_all(&buf[..n]).unwrap();
        let r = open_interrupted(&d).unwrap().expect("interrupted");
        assert_eq!(r.outcome.cause.as_deref(), Some("SIGSEGV (address 0x0) on core 4"));
        let text = r.text();
        assert!(text.contains("in task 0x9 (kernel `segv`)"), "{text}");
        assert!(text.contains("core 2: task 0x7 (add) started and never ended"), "{text}");
        assert!(text.contains("core 4: task 0x9 (segv) started and never ended"), "{text}");
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["outcome"]["end"]["task"]["kernel"], "segv", "{j}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Without a manifest, or without the native profile, the usual readers apply; a link
    /// planted under the native profile's name is refused, not followed.
    #[test]
    fn other_directories_are_not_interrupted_runs() {
        let d = tmpdir("other");
        assert!(open_interrupted(&d).unwrap().is_none(), "no directory: the usual readers say so");
        std::fs::create_dir_all(&d).unwrap();
        assert!(open_interrupted(&d).unwrap().is_none());
        let mut out = OutDir::claim(&d, &[]).unwrap();
        out.begin("r", &["ferry".into()], "a2a3", &[]).unwrap();
        assert!(open_interrupted(&d).unwrap().is_none());
        std::os::unix::fs::symlink("/etc/passwd", d.join(RECORD_FILE)).unwrap();
        let e = open_interrupted(&d).unwrap_err();
        assert!(e.to_string().contains("native profile"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
