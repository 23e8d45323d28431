//! `args_dump/args_dump.json` + `args_dump/args.bin` (`specs/dfx.md` §5.4).
//!
//! Top-level keys: `run_dir`, `bin_format {type, byte_order}`, `dump_args_level`, `total_args`,
//! `before_dispatch`, `after_completion`, `input_args`, `output_args`, `inout_args`,
//! `truncated_args`, `dropped_records`, `dropped_overwrite`, `bin_file` (`"args.bin"` or null),
//! `args[]`, and ferry's `dfx` (loss accounting of the ArgsDump lanes). `args` are sorted by
//! `(task_id, stage, arg_index, role)`. `args.bin` holds the raw little-endian logical-contiguous
//! payloads at each arg's `bin_offset`.

use std::io::{Read, Write};

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::model::LossAccounting;
use super::stream::{unref, InlineList, TickSeq, Ticker};
use super::OutputError;

/// Folder inside the output directory.
pub const ARGS_DIR: &str = "args_dump";
/// Metadata file inside [`ARGS_DIR`].
pub const ARGS_FILE: &str = "args_dump.json";
/// Payload file inside [`ARGS_DIR`].
pub const ARGS_BIN_FILE: &str = "args.bin";

/// The ArgsDump subsystem's output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArgsDump {
    /// Output directory the run wrote (informational).
    pub run_dir: String,
    /// Dump level 0–3.
    pub level: u32,
    /// Argument metadata.
    pub args: Vec<DumpedArg>,
    /// `args.bin`: the payloads, addressed by [`DumpedArg::bin_offset`].
    pub bin: Vec<u8>,
    /// Argument records dropped on the device (arena gate or lane loss).
    pub dropped_records: u64,
    /// Payloads the host found overwritten in the arena.
    pub dropped_overwrite: u64,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One dumped argument.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpedArg {
    /// Task id, written `"0x%016x"`.
    #[serde(with = "super::strnum::hex")]
    pub task_id: u64,
    /// Kernel function ids of the task (−1 unknown).
    pub func_id: InlineList<i32, 3>,
    /// Argument position.
    pub arg_index: u32,
    /// `INPUT`, `OUTPUT`, `INOUT`, `SCALAR`.
    pub role: Cow<'static, str>,
    /// `before_dispatch` or `after_completion`.
    pub stage: Cow<'static, str>,
    /// `tensor` or `scalar`.
    pub kind: Cow<'static, str>,
    /// Element type name.
    pub dtype: Cow<'static, str>,
    /// Scalar value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    /// Whether the view is contiguous.
    pub is_contiguous: bool,
    /// Extents.
    pub shape: InlineList<u64, { ferry_abi::records::ARGS_MAX_DIMS }>,
    /// Element strides.
    pub strides: InlineList<u64, { ferry_abi::records::ARGS_MAX_DIMS }>,
    /// Element offset of the view.
    pub start_offset: u64,
    /// Elements in the view.
    pub numel: u64,
    /// The argument index could not be determined uniquely.
    #[serde(default, skip_serializing_if = "is_false")]
    pub arg_index_ambiguous: bool,
    /// Offset of the payload in `args.bin` (null: no payload).
    pub bin_offset: Option<u64>,
    /// Payload bytes.
    pub bin_size: u64,
    /// The payload was truncated on the device.
    pub truncated: bool,
    /// The payload was overwritten in the arena before the host copied it.
    pub overwritten: bool,
}

/// Sort key of the export: `(task_id, stage rank, arg_index, role rank)`.
type ExportKey = (u64, u8, u32, u8);

/// Role order used by the export sort.
fn role_rank(r: &str) -> u8 {
    match r {
        "INPUT" => 0,
        "OUTPUT" => 1,
        "INOUT" => 2,
        _ => 3,
    }
}

fn stage_rank(s: &str) -> u8 {
    u8::from(s != "before_dispatch")
}

impl ArgsDump {
    /// The payload bytes of `arg` in `args.bin` (`None` without payload or out of range).
    pub fn payload(&self, arg: &DumpedArg) -> Option<&[u8]> {
        let off = usize::try_from(arg.bin_offset?).ok()?;
        let end = off.checked_add(usize::try_from(arg.bin_size).ok()?)?;
        self.bin.get(off..end)
    }

    /// Appends `arg` with `payload` (stored at the end of `args.bin`).
    pub fn push(&mut self, mut arg: DumpedArg, payload: Option<&[u8]>) {
        match payload {
            Some(p) => {
                arg.bin_offset = Some(self.bin.len() as u64);
                arg.bin_size = p.len() as u64;
                self.bin.extend_from_slice(p);
            }
            None => {
                arg.bin_offset = None;
                arg.bin_size = 0;
            }
        }
        self.args.push(arg);
    }

    /// The args in export order: `(task_id, stage, arg_index, role)`, stable. The ranks are
    /// computed once per arg, not per comparison (they compare strings).
    fn sorted(&self) -> Vec<&DumpedArg> {
        let mut v: Vec<(ExportKey, &DumpedArg)> = self
            .args
            .iter()
            .map(|a| ((a.task_id, stage_rank(&a.stage), a.arg_index, role_rank(&a.role)), a))
            .collect();
        v.sort_by_key(|(k, _)| *k);
        v.into_iter().map(|(_, a)| a).collect()
    }
}

#[derive(Serialize)]
struct BinFormat<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    byte_order: &'a str,
}

#[derive(Serialize)]
#[serde(bound(serialize = "F: Fn(&'a &'a DumpedArg) -> &'a DumpedArg"))]
struct FileOut<'a, 't, F> {
    run_dir: &'a str,
    bin_format: BinFormat<'a>,
    dump_args_level: u32,
    total_args: usize,
    before_dispatch: usize,
    after_completion: usize,
    input_args: usize,
    output_args: usize,
    inout_args: usize,
    truncated_args: usize,
    dropped_records: u64,
    dropped_overwrite: u64,
    bin_file: Option<&'a str>,
    args: TickSeq<'a, 't, &'a DumpedArg, F>,
    dfx: &'a LossAccounting,
}

#[derive(Deserialize)]
struct FileIn {
    #[serde(default)]
    run_dir: String,
    dump_args_level: u32,
    #[serde(default)]
    dropped_records: u64,
    #[serde(default)]
    dropped_overwrite: u64,
    bin_file: Option<String>,
    args: Vec<DumpedArg>,
    #[serde(default)]
    dfx: LossAccounting,
}

/// Writes `args_dump.json` to `w` (the payloads go to `args.bin` separately:
/// [`ArgsDump::bin`]).
///
/// # Errors
///
/// [`OutputError::Json`] when writing fails.
pub fn write_args_json<W: Write>(
    w: W,
    d: &ArgsDump,
    loss: &LossAccounting,
) -> Result<(), OutputError> {
    write_args_json_ticked(w, d, loss, &Ticker::silent())
}

/// [`write_args_json`], one tick per argument. Compact JSON: the original tools parse the file,
/// and pretty-printing made it 1.6 times larger.
pub(crate) fn write_args_json_ticked<W: Write>(
    w: W,
    d: &ArgsDump,
    loss: &LossAccounting,
    tick: &Ticker<'_>,
) -> Result<(), OutputError> {
    let mut c = [0usize; 6];
    for a in &d.args {
        c[0] += usize::from(a.stage == "before_dispatch");
        c[1] += usize::from(a.stage == "after_completion");
        c[2] += usize::from(a.role == "INPUT");
        c[3] += usize::from(a.role == "OUTPUT");
        c[4] += usize::from(a.role == "INOUT");
        c[5] += usize::from(a.truncated);
    }
    let sorted = d.sorted();
    let file = FileOut {
        run_dir: &d.run_dir,
        bin_format: BinFormat { kind: "raw", byte_order: "little" },
        dump_args_level: d.level,
        total_args: d.args.len(),
        before_dispatch: c[0],
        after_completion: c[1],
        input_args: c[2],
        output_args: c[3],
        inout_args: c[4],
        truncated_args: c[5],
        dropped_records: d.dropped_records,
        dropped_overwrite: d.dropped_overwrite,
        bin_file: (!d.bin.is_empty()).then_some(ARGS_BIN_FILE),
        args: TickSeq { items: &sorted, f: unref, tick },
        dfx: loss,
    };
    serde_json::to_writer(w, &file).map_err(OutputError::json(ARGS_FILE))
}

/// Reads `args_dump.json`; `bin` supplies `args.bin` when the file names one (`None`: no payload
/// file was found).
///
/// # Errors
///
/// [`OutputError::Json`] on malformed JSON, [`OutputError::Format`] when an arg's payload lies
/// outside `args.bin` or the file names a bin that is missing.
pub fn read_args<R: Read>(
    r: R,
    bin: Option<Vec<u8>>,
) -> Result<(ArgsDump, LossAccounting), OutputError> {
    let f: FileIn = serde_json::from_reader(r).map_err(OutputError::json(ARGS_FILE))?;
    let bin = match (&f.bin_file, bin) {
        (Some(_), Some(b)) => b,
        (Some(name), None) => {
            return Err(OutputError::Format {
                file: ARGS_FILE.into(),
                what: format!("bin_file {name:?} is missing"),
            })
        }
        (None, _) => Vec::new(),
    };
    let d = ArgsDump {
        run_dir: f.run_dir,
        level: f.dump_args_level,
        args: f.args,
        bin,
        dropped_records: f.dropped_records,
        dropped_overwrite: f.dropped_overwrite,
    };
    for a in &d.args {
        if a.bin_offset.is_some() && d.payload(a).is_none() {
            return Err(OutputError::Format {
                file: ARGS_FILE.into(),
                what: format!(
                    "task 0x{:016x} arg {}: payload {:?}+{} lies outside args.bin ({} bytes)",
                    a.task_id,
                    a.arg_index,
                    a.bin_offset,
                    a.bin_size,
                    d.bin.len()
                ),
            });
        }
    }
    Ok((d, f.dfx))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(task: u64, idx: u32, role: &'static str, stage: &'static str) -> DumpedArg {
        DumpedArg {
            task_id: task,
            func_id: [3].into(),
            arg_index: idx,
            role: role.into(),
            stage: stage.into(),
            kind: "tensor".into(),
            dtype: "FLOAT32".into(),
            is_contiguous: true,
            shape: [2].into(),
            strides: [1].into(),
            numel: 2,
            ..Default::default()
        }
    }

    #[test]
    fn export_is_sorted_and_counts_roles() {
        let mut d = ArgsDump { level: 2, ..Default::default() };
        d.push(arg(2, 0, "OUTPUT", "after_completion"), Some(&[1, 2, 3, 4, 5, 6, 7, 8]));
        d.push(arg(1, 1, "INPUT", "before_dispatch"), Some(&[9; 8]));
        d.push(arg(2, 0, "INPUT", "before_dispatch"), None);
        let mut out = Vec::new();
        write_args_json(&mut out, &d, &LossAccounting::default()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["args"][0]["task_id"], "0x0000000000000001");
        assert_eq!(v["args"][1]["stage"], "before_dispatch");
        assert_eq!(v["args"][2]["role"], "OUTPUT");
        assert_eq!((v["input_args"].as_u64(), v["output_args"].as_u64()), (Some(2), Some(1)));
        assert_eq!(v["bin_file"], "args.bin");
        assert!(v["args"][1]["bin_offset"].is_null());
        let (back, _) = read_args(&out[..], Some(d.bin.clone())).unwrap();
        assert_eq!(back.payload(&back.args[2]), Some(&[1u8, 2, 3, 4, 5, 6, 7, 8][..]));
        // A truncated args.bin is caught.
        assert!(matches!(read_args(&out[..], Some(vec![0; 4])), Err(OutputError::Format { .. })));
        assert!(matches!(read_args(&out[..], None), Err(OutputError::Format { .. })));
    }
}
