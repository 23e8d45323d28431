//! `args_dump/args_dump.json` + `args_dump/args.bin` (docs/dfx.md).
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

use super::arg_rows::{ArgRows, ExportKey};
use super::args_bin::ArgsBin;
use super::jsonw::Json;
use super::model::LossAccounting;
use super::stream::{InlineList, Ticker};
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
    /// Argument metadata: rows, or a run's chains decoded when read ([`ArgRows`]).
    pub args: ArgRows,
    /// `args.bin`: the payloads, addressed by [`DumpedArg::bin_offset`].
    pub bin: ArgsBin,
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

impl ArgsDump {
    /// The payload bytes of `arg` in `args.bin` (`None` without payload, out of range, or
    /// when the payload file could not be read).
    pub fn payload(&self, arg: &DumpedArg) -> Option<Cow<'_, [u8]>> {
        self.bin.read(arg.bin_offset?, arg.bin_size).ok().flatten()
    }

    /// Appends `arg` with `payload` (stored at the end of `args.bin`).
    pub fn push(&mut self, mut arg: DumpedArg, payload: Option<&[u8]>) {
        match payload {
            Some(p) => {
                arg.bin_offset = Some(self.bin.len());
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

    /// The arguments in export order (by task, then stage, role and index: `args_dump.json`'s
    /// order), however they are kept: what every listing shows, so a dump read from its file
    /// and one rebuilt from a native profile list alike.
    pub fn in_export_order(&self) -> impl Iterator<Item = Cow<'_, DumpedArg>> + '_ {
        self.sorted().into_iter().filter_map(|i| self.args.get(i))
    }

    /// The indexes of the args in export order ([`export_key`](super::arg_rows::export_key)),
    /// stable. The keys are computed once per arg, not per comparison (they compare strings);
    /// args already in that order (a model read back from a file) are listed as they are,
    /// without the sort.
    fn sorted(&self) -> Vec<usize> {
        let keys: Vec<ExportKey> = self.args.keys();
        if keys.windows(2).all(|w| w[0] <= w[1]) {
            return (0..keys.len()).collect();
        }
        let mut v: Vec<(ExportKey, usize)> = keys.into_iter().zip(0..).collect();
        // (key, index) pairs are unique, so an unstable sort of the pairs is the stable order by
        // key (and faster: the lanes interleave, so there are few sorted runs to merge).
        v.sort_unstable();
        v.into_iter().map(|(_, i)| i).collect()
    }
}

/// The file as serde would write it: the reference the hand-written writer is tested against.
#[cfg(test)]
#[derive(Serialize)]
struct BinFormat<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    byte_order: &'a str,
}

#[cfg(test)]
#[derive(Serialize)]
struct FileOut<'a> {
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
    args: Vec<Cow<'a, DumpedArg>>,
    dfx: &'a LossAccounting,
}

#[derive(Deserialize)]
struct BinFormatIn {
    #[serde(rename = "type")]
    kind: String,
    byte_order: String,
}

#[derive(Deserialize)]
struct FileIn {
    #[serde(default)]
    run_dir: String,
    #[serde(default)]
    bin_format: Option<BinFormatIn>,
    #[serde(default)]
    total_args: Option<u64>,
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

/// How far ahead of the argument being written [`prefetched`] fetches what it reads (twice as far
/// for an index entry of chains, which that read needs first).
const PREFETCH_AHEAD: usize = 8;

/// The arguments `order` lists, each one's memory fetched [`PREFETCH_AHEAD`] arguments before
/// it is read ([`ArgRows::prefetch`]): the export order reads the model's arguments out of order
/// (by task, across the scheduler threads' lanes), and without the hint each argument's first
/// read waited for memory (~40 % of writing `args_dump.json` from rows).
fn prefetched<'a>(
    args: &'a ArgRows,
    order: &'a [usize],
) -> impl Iterator<Item = Cow<'a, DumpedArg>> + 'a {
    order.iter().enumerate().filter_map(move |(i, &k)| {
        if let Some(&far) = order.get(i + 2 * PREFETCH_AHEAD) {
            args.prefetch(far, true);
        }
        if let Some(&next) = order.get(i + PREFETCH_AHEAD) {
            args.prefetch(next, false);
        }
        args.get(k)
    })
}

/// One argument's object, field for field what `DumpedArg`'s `Serialize` writes.
fn put_arg(j: &mut Json, a: &DumpedArg) {
    j.raw(b"{\"task_id\":");
    j.hex16(a.task_id);
    j.raw(b",\"func_id\":");
    j.i64s(a.func_id.iter().map(|&f| i64::from(f)));
    j.raw(b",\"arg_index\":");
    j.u64(a.arg_index.into());
    j.raw(b",\"role\":");
    j.str(&a.role);
    j.raw(b",\"stage\":");
    j.str(&a.stage);
    j.raw(b",\"kind\":");
    j.str(&a.kind);
    j.raw(b",\"dtype\":");
    j.str(&a.dtype);
    if let Some(v) = a.value {
        j.raw(b",\"value\":");
        j.u64(v);
    }
    j.raw(b",\"is_contiguous\":");
    j.bool(a.is_contiguous);
    j.raw(b",\"shape\":");
    j.u64s(a.shape.iter().copied());
    j.raw(b",\"strides\":");
    j.u64s(a.strides.iter().copied());
    j.raw(b",\"start_offset\":");
    j.u64(a.start_offset);
    j.raw(b",\"numel\":");
    j.u64(a.numel);
    if a.arg_index_ambiguous {
        j.raw(b",\"arg_index_ambiguous\":true");
    }
    j.raw(b",\"bin_offset\":");
    match a.bin_offset {
        Some(o) => j.u64(o),
        None => j.raw(b"null"),
    }
    j.raw(b",\"bin_size\":");
    j.u64(a.bin_size);
    j.raw(b",\"truncated\":");
    j.bool(a.truncated);
    j.raw(b",\"overwritten\":");
    j.bool(a.overwritten);
    j.raw(b"}");
}

/// [`write_args_json`], one tick per argument. Compact JSON: the original tools parse the file,
/// and pretty-printing made it 1.6 times larger. Written by hand ([`Json`]): the same bytes as
/// serializing the file with serde_json, ~4x faster.
pub(crate) fn write_args_json_ticked<W: Write>(
    mut w: W,
    d: &ArgsDump,
    loss: &LossAccounting,
    tick: &Ticker<'_>,
) -> Result<(), OutputError> {
    let io = OutputError::io(ARGS_FILE);
    let c = d.args.counts();
    let sorted = d.sorted();
    let mut j = Json::new();
    j.raw(b"{\"run_dir\":");
    j.str(&d.run_dir);
    j.raw(b",\"bin_format\":{\"type\":\"raw\",\"byte_order\":\"little\"},\"dump_args_level\":");
    j.u64(d.level.into());
    let header: [(&[u8], u64); 9] = [
        (b",\"total_args\":", d.args.len() as u64),
        (b",\"before_dispatch\":", c[0] as u64),
        (b",\"after_completion\":", c[1] as u64),
        (b",\"input_args\":", c[2] as u64),
        (b",\"output_args\":", c[3] as u64),
        (b",\"inout_args\":", c[4] as u64),
        (b",\"truncated_args\":", c[5] as u64),
        (b",\"dropped_records\":", d.dropped_records),
        (b",\"dropped_overwrite\":", d.dropped_overwrite),
    ];
    for (k, v) in header {
        j.raw(k);
        j.u64(v);
    }
    j.raw(b",\"bin_file\":");
    if d.bin.is_empty() {
        j.raw(b"null");
    } else {
        j.str(ARGS_BIN_FILE);
    }
    j.raw(b",\"args\":");
    j.records(&mut w, prefetched(&d.args, &sorted), tick, |j, a| put_arg(j, &a)).map_err(&io)?;
    j.raw(b",\"dfx\":");
    j.serde(loss).map_err(OutputError::json(ARGS_FILE))?;
    j.raw(b"}");
    j.finish_into(&mut w).map_err(&io)
}

/// Reads `args_dump.json`; `bin` supplies `args.bin` when the file names one (`None`: no payload
/// file was found).
///
/// Every argument is checked against the format ([`validate_arg`]) and every payload against
/// `args.bin`'s length, so what a reader gets is consistent: a closed set of roles, stages, kinds
/// and dtypes, `numel` = the product of `shape`, `numel` × the dtype's size = the payload's size
/// (at most, for a payload truncated on the device), `total_args` = the arguments listed, and a
/// little-endian raw payload file.
///
/// # Errors
///
/// [`OutputError::Json`] on malformed JSON, [`OutputError::Format`] when an argument breaks one
/// of the rules above, an arg's payload lies outside `args.bin`, or the file names a bin that is
/// missing.
pub fn read_args<R: Read>(
    r: R,
    bin: Option<ArgsBin>,
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
        (None, _) => ArgsBin::default(),
    };
    let len = bin.len();
    let (mut d, loss) = from_file(f, Some(len))?;
    d.bin = bin;
    Ok((d, loss))
}

/// Reads `args_dump.json` without its payloads: every argument is checked as by [`read_args`],
/// each payload against `bin_len` (the size of `args.bin`; `None` when it is not there, and
/// then payload ranges are not checked: none is read), and [`ArgsDump::bin`] stays empty (so
/// [`ArgsDump::payload`] finds none). For analyses that need the metadata only, without reading
/// a payload file that may be gigabytes.
///
/// # Errors
///
/// As [`read_args`], but a missing `args.bin` is no error.
pub fn read_args_meta<R: Read>(
    r: R,
    bin_len: Option<u64>,
) -> Result<(ArgsDump, LossAccounting), OutputError> {
    let f: FileIn = serde_json::from_reader(r).map_err(OutputError::json(ARGS_FILE))?;
    from_file(f, Some(bin_len.unwrap_or(u64::MAX)))
}

fn from_file(f: FileIn, bin_len: Option<u64>) -> Result<(ArgsDump, LossAccounting), OutputError> {
    let bad = |what: String| OutputError::Format { file: ARGS_FILE.into(), what };
    if let Some(name) = f.bin_file.as_deref().filter(|n| *n != ARGS_BIN_FILE) {
        return Err(bad(format!("bin_file {name:?}: ferry writes only {ARGS_BIN_FILE:?}")));
    }
    if let Some(b) = &f.bin_format {
        if b.kind != "raw" || b.byte_order != "little" {
            return Err(bad(format!(
                "bin_format {{type {:?}, byte_order {:?}}}: only raw little-endian payloads are \
                 supported",
                b.kind, b.byte_order
            )));
        }
    }
    if let Some(n) = f.total_args.filter(|&n| n != f.args.len() as u64) {
        return Err(bad(format!("total_args {n} but {} args listed", f.args.len())));
    }
    super::model::check_loss(&f.dfx, ARGS_FILE)?;
    let bin_len = if f.bin_file.is_some() { bin_len.unwrap_or(0) } else { 0 };
    for a in &f.args {
        validate_arg(a, bin_len)
            .map_err(|what| bad(format!("task {:#x} arg {}: {what}", a.task_id, a.arg_index)))?;
    }
    let d = ArgsDump {
        run_dir: f.run_dir,
        level: f.dump_args_level,
        args: f.args.into(),
        bin: ArgsBin::default(),
        dropped_records: f.dropped_records,
        dropped_overwrite: f.dropped_overwrite,
    };
    Ok((d, f.dfx))
}

/// Roles a dumped argument may have.
pub const ARG_ROLES: [&str; 4] = ["INPUT", "OUTPUT", "INOUT", "SCALAR"];
/// Stages a dumped argument may be recorded at.
pub const ARG_STAGES: [&str; 2] = ["before_dispatch", "after_completion"];
/// The dtype name a record with an unknown dtype code is written with.
pub const DTYPE_UNKNOWN: &str = "UNKNOWN";

/// Checks one argument against the format and a payload file of `bin_len` bytes: role, stage,
/// kind and dtype from their closed sets; at most [`ARGS_MAX_DIMS`] extents with as many strides;
/// `numel` the product of the extents (a scalar: 1); a scalar with a value and no payload; a
/// payload inside the file whose size is `numel` × the dtype's size (at most, when truncated).
///
/// # Errors
///
/// What is wrong, as text (the caller names the file and the argument).
///
/// [`ARGS_MAX_DIMS`]: ferry_abi::records::ARGS_MAX_DIMS
pub fn validate_arg(a: &DumpedArg, bin_len: u64) -> Result<(), String> {
    use ferry_abi::records::{DType, ARGS_MAX_DIMS};
    if !ARG_ROLES.contains(&&*a.role) {
        return Err(format!("role {:?} is not one of {}", a.role, ARG_ROLES.join(", ")));
    }
    if !ARG_STAGES.contains(&&*a.stage) {
        return Err(format!("stage {:?} is not one of {}", a.stage, ARG_STAGES.join(", ")));
    }
    let dtype = DType::from_name(&a.dtype);
    if dtype.is_none() && a.dtype != DTYPE_UNKNOWN {
        return Err(format!("unknown dtype {:?}", a.dtype));
    }
    if a.shape.len() > ARGS_MAX_DIMS || a.strides.len() > ARGS_MAX_DIMS {
        return Err(format!(
            "{} extents and {} strides (at most {ARGS_MAX_DIMS})",
            a.shape.len(),
            a.strides.len()
        ));
    }
    match &*a.kind {
        "scalar" => {
            if a.value.is_none() || a.bin_offset.is_some() || a.numel != 1 {
                return Err("a scalar needs a value, numel 1 and no payload".into());
            }
            return Ok(());
        }
        "tensor" => {}
        k => return Err(format!("kind {k:?} is neither tensor nor scalar")),
    }
    if a.role == "SCALAR" {
        return Err("a tensor with role SCALAR".into());
    }
    if a.strides.len() != a.shape.len() {
        return Err(format!("{} extents but {} strides", a.shape.len(), a.strides.len()));
    }
    let product = a.shape.iter().try_fold(1u64, |p, &e| p.checked_mul(e));
    if product != Some(a.numel) {
        return Err(format!("numel {} is not the product of shape {:?}", a.numel, a.shape));
    }
    let Some(off) = a.bin_offset else {
        return if a.bin_size == 0 {
            Ok(())
        } else {
            Err(format!("bin_size {} without a bin_offset", a.bin_size))
        };
    };
    if off.checked_add(a.bin_size).is_none_or(|end| end > bin_len) {
        return Err(format!(
            "payload {off}+{} lies outside {ARGS_BIN_FILE} ({bin_len} bytes)",
            a.bin_size
        ));
    }
    if let Some(dt) = dtype {
        let want = a.numel.checked_mul(dt.size() as u64);
        let ok = match want {
            Some(w) if a.truncated => a.bin_size <= w,
            Some(w) => a.bin_size == w,
            None => false,
        };
        if !ok {
            return Err(format!(
                "{} payload bytes for {} {} elements{}",
                a.bin_size,
                a.numel,
                dt.name(),
                if a.truncated { " (truncated: at most their size)" } else { "" }
            ));
        }
    }
    Ok(())
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

    /// The export order, worked out here on its own (not with the writer's `sorted`, whose
    /// already-sorted shortcut the tests must catch if it lies): stable, by task, then stage
    /// (before dispatch first), argument index, role (`INPUT`, `OUTPUT`, `INOUT`, others).
    fn reference_order(d: &ArgsDump) -> Vec<Cow<'_, DumpedArg>> {
        let rank = |r: &str| ["INPUT", "OUTPUT", "INOUT"].iter().position(|x| *x == r).unwrap_or(3);
        let mut v: Vec<Cow<'_, DumpedArg>> = d.args.iter().collect();
        v.sort_by_key(|a| (a.task_id, a.stage != "before_dispatch", a.arg_index, rank(&a.role)));
        v
    }

    /// What serde_json writes for the whole file (the reference of the hand-written writer).
    fn serde_bytes(d: &ArgsDump, loss: &LossAccounting) -> Vec<u8> {
        let c = d.args.counts();
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
            args: reference_order(d),
            dfx: loss,
        };
        serde_json::to_vec(&file).unwrap()
    }

    fn any_arg() -> impl proptest::strategy::Strategy<Value = DumpedArg> {
        use proptest::prelude::*;
        let text = prop_oneof![
            Just(Cow::Borrowed("INOUT")),
            Just(Cow::Borrowed("before_dispatch")),
            "[a-z\"\\\\\u{0}-\u{1f}\u{e9}]{0,6}".prop_map(Cow::Owned),
        ];
        let dims = proptest::collection::vec(any::<u64>(), 0..5);
        (
            (any::<u64>(), proptest::collection::vec(any::<i32>(), 0..5), any::<u32>()),
            (text.clone(), text.clone(), text.clone(), text),
            (proptest::option::of(any::<u64>()), any::<bool>(), dims.clone(), dims),
            (any::<u64>(), any::<u64>(), any::<bool>(), proptest::option::of(any::<u64>())),
            (any::<u64>(), any::<bool>(), any::<bool>()),
        )
            .prop_map(|(a, b, c, d, e)| DumpedArg {
                task_id: a.0,
                func_id: a.1.into_iter().collect(),
                arg_index: a.2,
                role: b.0,
                stage: b.1,
                kind: b.2,
                dtype: b.3,
                value: c.0,
                is_contiguous: c.1,
                shape: c.2.into_iter().collect(),
                strides: c.3.into_iter().collect(),
                start_offset: d.0,
                numel: d.1,
                arg_index_ambiguous: d.2,
                bin_offset: d.3,
                bin_size: e.0,
                truncated: e.1,
                overwritten: e.2,
            })
    }

    proptest::proptest! {
        /// The hand-written file is byte for byte what serde_json writes for it, whatever the
        /// fields hold (strings that need escapes, empty and long lists, absent options).
        #[test]
        fn the_written_file_is_serde_jsons(
            args in proptest::collection::vec(any_arg(), 0..12),
            run_dir in "[a-z/\"\u{7}]{0,8}",
            bin in proptest::bool::ANY,
            dropped in proptest::num::u64::ANY,
            presorted in proptest::bool::ANY,
        ) {
            // Half the cases come in the file's order already (a model read back from a
            // file): the writer lists them without sorting.
            let args = if presorted {
                let d = ArgsDump { args: args.into(), ..Default::default() };
                reference_order(&d).into_iter().map(Cow::into_owned).collect()
            } else {
                args
            };
            let d = ArgsDump {
                run_dir,
                level: 3,
                args: args.into(),
                bin: if bin { vec![1, 2, 3] } else { Vec::new() }.into(),
                dropped_records: dropped,
                dropped_overwrite: dropped / 3,
            };
            let loss = LossAccounting::default();
            let mut got = Vec::new();
            write_args_json(&mut got, &d, &loss).unwrap();
            proptest::prop_assert_eq!(
                String::from_utf8(got).unwrap(),
                String::from_utf8(serde_bytes(&d, &loss)).unwrap()
            );
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
        assert_eq!(
            back.payload(&back.args.get(2).unwrap()).as_deref(),
            Some(&[1u8, 2, 3, 4, 5, 6, 7, 8][..])
        );
        // A truncated args.bin is caught.
        assert!(matches!(
            read_args(&out[..], Some(vec![0; 4].into())),
            Err(OutputError::Format { .. })
        ));
        assert!(matches!(read_args(&out[..], None), Err(OutputError::Format { .. })));
    }
}
