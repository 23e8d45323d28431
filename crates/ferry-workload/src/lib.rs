//! Workload files: a user's own task graph for ferry, without touching ferry's sources.
//!
//! A workload is a TOML file (format: `docs/workloads.md`) that declares tensors, a graph of
//! tasks (kernels by name, views with roles, typed scalars, SPMD blocks), scopes with scratch
//! tensors, repeats with loop variables and small integer expressions, and what the outputs must
//! be (checksums, values, or the host reference). [`Workload::load`] parses and checks it — every
//! refusal is a [`WorkloadError`] naming the line — and compiles it to the program the runtime's
//! workload interpreter (`ferry_runtime::device::workload`) runs, on the host (host-built
//! variant) or on the device (the `orch-workload` orchestration object).
//!
//! | type | what |
//! |---|---|
//! | [`Workload`] | a checked, compiled workload: tensors, program, callable, verification |
//! | [`KernelCatalog`] | the seam kernel names resolve through ([`BuiltinKernels`], and the runner's `KernelRegistry`) |
//! | [`WorkloadError`] | `file:line:col: message` |
//!
//! # Example
//! ```
//! use ferry_workload::{BuiltinKernels, Workload};
//! let text = r#"
//! [workload]
//! name = "tiny"
//! verify = "host-reference"
//! [[tensor]]
//! name = "x"
//! shape = [8]
//! init = { iota = { start = 0.0, step = 1.0 } }
//! [[graph]]
//! kernel = "add_scalar"
//! args = [{ tensor = "x", role = "inout" }]
//! scalars = [{ f32 = 1.0 }]
//! "#;
//! let wl = Workload::parse(text, "tiny.toml", std::path::Path::new("."), &BuiltinKernels, false)?;
//! assert_eq!(wl.tasks(), 1);
//! # Ok::<(), ferry_workload::WorkloadError>(())
//! ```
#![forbid(unsafe_code)]

mod catalog;
mod compile;
mod error;
mod expand;
mod expr;
mod orch_ref;
mod schema;
mod typed;
mod verify;
mod views;

pub use catalog::{BuiltinKernels, KernelCatalog, KernelInfo, ScalarType};
/// Most scalars an `[orchestration]` table passes its function.
pub const MAX_ORCH_SCALARS: usize = 64;
pub use compile::{MAX_TASKS, MAX_TENSORS, MAX_TENSOR_ELEMENTS, MAX_TOTAL_ELEMENTS};
pub use error::WorkloadError;
pub use expr::{MAX_EXPR_CHARS, MAX_NESTING};
pub use verify::VerifyError;

use compile::{Ctx, InitPlan, Ir};
use error::Lines;
use ferry_abi::records::DType;
use ferry_runtime::host::{Callable, RunArgs, TensorInit, Variant};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why `ferry_fs` refused a file, without its path (the caller's message names it).
fn fs_reason(e: &ferry_fs::FsError) -> String {
    match e {
        ferry_fs::FsError::NotAFile { kind, .. } => format!("it is {kind}, not a regular file"),
        e => e.to_string(),
    }
}

/// Largest workload file read.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// How outputs are checked.
#[derive(Clone, Debug, PartialEq)]
enum Check {
    Checksum { tensor: u32, want: f64, tol: f64, at: usize },
    Values { tensor: u32, want: Vec<f64>, tol: f64, at: usize },
}

/// One `[[tensor]]`: its name, elements, dtype and initial contents.
#[derive(Debug)]
struct TensorDef {
    name: String,
    elems: u64,
    dtype: DType,
    init: InitPlan,
}

impl TensorDef {
    /// Words it occupies on the device.
    fn words(&self) -> u64 {
        typed::words_for(self.dtype, self.elems)
    }
}

/// A checked, compiled workload.
#[derive(Debug)]
pub struct Workload {
    name: String,
    description: Option<String>,
    lines: Lines,
    tensors: Vec<TensorDef>,
    ir: Ir,
    program: Vec<u32>,
    scopes: Vec<ScopeName>,
    scratch_bytes: u64,
    host_reference: Option<f64>,
    outputs: Vec<u32>,
    checks: Vec<Check>,
    /// `[orchestration]`: the library function that builds the graph, and its run scalars.
    orchestration: Option<(String, Vec<u64>)>,
}

/// A scope of a workload's graph as ScopeStats records it, with the name the file gives it.
///
/// The interpreter opens each scope at the site `workload:<word>`, `word` being the index of the
/// scope's opcode in the compiled program; every expansion of one `scope = "..."` entry (inside
/// a repeat) shares its site, as every pass through one `PTO2_SCOPE` shares its `__LINE__`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeName {
    /// The site, as the scope records carry it (`workload:17`).
    pub site: String,
    /// The scope's label in the file (`scope = "diamond"`).
    pub name: String,
    /// Where the file opens the scope: `diamond.toml:30` (the file's basename and line).
    pub at: String,
}

/// Deterministic values in `[-1, 1)`: the built-in examples' generator (a workload's
/// `random = { seed }` init, so the example workloads get the examples' inputs bit for bit).
pub use ferry_runtime::examples::random;

/// Refuses nesting the deserializer would recurse through before serde sees it: a table header
/// with more dotted parts, or more open brackets and braces at once, than any valid workload
/// needs (a graph nests at most `MAX_DEPTH` bodies), so a hostile file cannot exhaust the stack.
fn prescan(text: &str, lines: &Lines) -> Result<(), WorkloadError> {
    const MAX_OPEN: usize = 2 * ferry_runtime::device::workload::MAX_DEPTH + 8;
    let mut open = 0usize;
    let (mut in_str, mut in_comment) = (None::<u8>, false);
    let b = text.as_bytes();
    let mut line_start = 0;
    for (i, &c) in b.iter().enumerate() {
        match (in_str, c) {
            (_, b'\n') => {
                in_comment = false;
                if in_str == Some(b'"') || in_str == Some(b'\'') {
                    // Basic and literal strings end at the line (multi-line ones are tracked
                    // approximately: they do not change the bracket count).
                    in_str = None;
                }
                let header = text[line_start..i].trim_start();
                if header.starts_with('[') {
                    let dots = header.split('#').next().unwrap_or("").matches('.').count();
                    if dots > ferry_runtime::device::workload::MAX_DEPTH + 1 {
                        return Err(lines.at(
                            line_start,
                            format!(
                                "table header nests deeper than {} bodies",
                                ferry_runtime::device::workload::MAX_DEPTH
                            ),
                        ));
                    }
                }
                line_start = i + 1;
            }
            _ if in_comment => {}
            (None, b'#') => in_comment = true,
            (None, b'"' | b'\'') => in_str = Some(c),
            (Some(q), _) if c == q && (i == 0 || b[i - 1] != b'\\') => in_str = None,
            (None, b'[' | b'{') => {
                open += 1;
                if open > MAX_OPEN {
                    return Err(
                        lines.at(i, format!("more than {MAX_OPEN} nested brackets and braces"))
                    );
                }
            }
            (None, b']' | b'}') => open = open.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

impl Workload {
    /// Reads and checks the workload at `path` (`small`: apply its `[small]` overrides).
    ///
    /// # Errors
    /// [`WorkloadError`] naming the line of the first problem.
    pub fn load(
        path: &Path,
        catalog: &dyn KernelCatalog,
        small: bool,
    ) -> Result<Workload, WorkloadError> {
        let file = path.display().to_string();
        let io = |m: String| WorkloadError::Io { file: file.clone(), message: m };
        // A regular file (a FIFO or a device is refused before any read) of at most
        // MAX_FILE_BYTES, a bound the read itself enforces.
        let bytes = match ferry_fs::read_input(path, MAX_FILE_BYTES) {
            Ok(b) => b,
            Err(ferry_fs::FsError::TooLarge { size: Some(len), .. }) => {
                return Err(io(format!("{len} bytes, more than the {MAX_FILE_BYTES}-byte limit")))
            }
            Err(ferry_fs::FsError::TooLarge { size: None, .. }) => {
                return Err(io(format!("grew past the {MAX_FILE_BYTES}-byte limit while read")))
            }
            Err(ferry_fs::FsError::Io { source, .. }) => return Err(io(source.to_string())),
            Err(e) => return Err(io(fs_reason(&e))),
        };
        let text = String::from_utf8(bytes).map_err(|e| {
            io(format!("not UTF-8 text (byte {} is not valid UTF-8)", e.utf8_error().valid_up_to()))
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Workload::parse(&text, &file, base, catalog, small)
    }

    /// Checks the workload `text` (named `file` in errors; `file` inits relative to `base`).
    ///
    /// # Errors
    /// [`WorkloadError`] naming the line of the first problem.
    pub fn parse(
        text: &str,
        file: &str,
        base: &Path,
        catalog: &dyn KernelCatalog,
        small: bool,
    ) -> Result<Workload, WorkloadError> {
        let lines = Lines::new(file, text);
        prescan(text, &lines)?;
        let f: schema::File = toml::from_str(text).map_err(|e| {
            let at = e.span().map_or(0, |s| s.start);
            lines.at(at, e.message().trim().to_string())
        })?;
        let meta = f.workload.get_ref();
        let name = meta.name.get_ref().clone();
        if name.is_empty()
            || name.len() > 63
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(lines.at(
                meta.name.span().start,
                "workload name must be 1-63 characters of A-Z a-z 0-9 - _ .",
            ));
        }
        let mut params = BTreeMap::new();
        let mut fparams = BTreeMap::new();
        let mut put = |k: &String, v: &toml::Spanned<schema::Param>| -> Result<(), WorkloadError> {
            let at = v.span().start;
            if !compile::is_ident(k) {
                return Err(lines.at(at, format!("parameter name `{k}` is not an identifier")));
            }
            match *v.get_ref() {
                schema::Param::Int(i) => {
                    let u = u64::try_from(i)
                        .map_err(|_| lines.at(at, format!("parameter `{k}` is negative")))?;
                    params.insert(k.clone(), u);
                    fparams.insert(k.clone(), i as f64);
                }
                schema::Param::Float(x) => {
                    params.remove(k);
                    fparams.insert(k.clone(), x);
                }
            }
            Ok(())
        };
        for (k, v) in &f.params {
            put(k, v)?;
        }
        if small {
            for (k, v) in &f.small {
                if !f.params.contains_key(k) {
                    return Err(lines.at(
                        v.span().start,
                        format!("[small] overrides `{k}`, which [params] does not declare"),
                    ));
                }
                put(k, v)?;
            }
        }
        let tnames = BTreeMap::new();
        let ctx0 = Ctx::new(&lines, &params, &fparams, &tnames, catalog, &[]);
        let mut tensors = Vec::new();
        let mut names = BTreeMap::new();
        let mut total_elems = 0u64;
        if f.tensor.len() > MAX_TENSORS {
            return Err(lines.at(0, format!("more than {MAX_TENSORS} tensors")));
        }
        for t in &f.tensor {
            let d = t.get_ref();
            let at = d.name.span().start;
            let n = d.name.get_ref();
            if !compile::is_ident(n) || names.contains_key(n) {
                return Err(lines.at(at, format!("tensor name `{n}` is not a fresh identifier")));
            }
            let dtype = match &d.dtype {
                None => DType::Float32,
                Some(dt) => DType::from_short_name(dt.get_ref()).ok_or_else(|| {
                    let names: Vec<&str> = DType::ALL.iter().map(|d| d.short_name()).collect();
                    lines.at(
                        dt.span().start,
                        format!(
                            "dtype `{}` is not supported (one of {})",
                            dt.get_ref(),
                            names.join(", ")
                        ),
                    )
                })?,
            };
            let mut elems = 1u64;
            for dim in d.shape.get_ref() {
                let v = ctx0.constant(dim, "shape")?;
                elems = elems.checked_mul(v).filter(|&e| e <= MAX_TENSOR_ELEMENTS).ok_or_else(
                    || {
                        lines.at(
                            d.shape.span().start,
                            format!("tensor `{n}` has more than {MAX_TENSOR_ELEMENTS} elements"),
                        )
                    },
                )?;
            }
            if d.shape.get_ref().is_empty() {
                return Err(lines.at(d.shape.span().start, "shape needs at least one dimension"));
            }
            let init = compile::init_plan(&lines, d.init.as_ref(), base)?;
            if let InitPlan::File(p) = &init {
                let iat = d.init.as_ref().map_or(at, |i| i.span().start);
                let len = match ferry_fs::open_input(p, u64::MAX) {
                    Ok(f) => f.len(),
                    Err(ferry_fs::FsError::Io { source, .. }) => {
                        return Err(lines.at(iat, format!("init file {}: {source}", p.display())))
                    }
                    Err(e) => {
                        return Err(
                            lines.at(iat, format!("init file {}: {}", p.display(), fs_reason(&e)))
                        )
                    }
                };
                let want = elems * dtype.size() as u64;
                if len != want {
                    return Err(lines.at(iat, format!(
                        "init file {} has {len} bytes, tensor `{n}` needs {want} ({elems} little-endian {})", p.display(), dtype.short_name()
                    )));
                }
            }
            total_elems += elems;
            if total_elems > MAX_TOTAL_ELEMENTS {
                return Err(lines.at(
                    d.shape.span().start,
                    format!("the tensors together exceed {MAX_TOTAL_ELEMENTS} elements"),
                ));
            }
            names.insert(n.clone(), tensors.len() as u32);
            tensors.push(TensorDef { name: n.clone(), elems, dtype, init });
        }
        let scratch_bytes = match &meta.scratch_bytes {
            Some(s) => {
                let b = ctx0.constant(s, "scratch_bytes")?;
                if b > 4 * MAX_TOTAL_ELEMENTS {
                    return Err(lines.at(
                        s.span().start,
                        format!("scratch_bytes {b} exceeds {}", 4 * MAX_TOTAL_ELEMENTS),
                    ));
                }
                b
            }
            None => 0,
        };
        let run_types: Vec<(DType, u64)> = tensors.iter().map(|t| (t.dtype, t.elems)).collect();
        let mut ctx = Ctx::new(&lines, &params, &fparams, &names, catalog, &run_types);
        let mut total = 0;
        let nodes = ctx.body(&f.graph, 1, 0, &mut total)?;
        let (vars, scratch_slots) = ctx.slots();
        let ir = Ir { nodes, tasks: total, vars, scratch_slots };
        let lookup = |s: &toml::Spanned<String>| {
            names.get(s.get_ref()).copied().ok_or_else(|| {
                lines.at(s.span().start, format!("unknown tensor `{}`", s.get_ref()))
            })
        };
        let host_reference = match &meta.verify {
            None => None,
            Some(v) if v.get_ref() == "host-reference" => {
                Some(meta.tolerance.as_ref().map_or(0.0, |t| *t.get_ref()))
            }
            Some(v) => {
                return Err(lines.at(
                    v.span().start,
                    format!("verify `{}`: the only mode is \"host-reference\"", v.get_ref()),
                ))
            }
        };
        if let Some(t) = &meta.tolerance {
            if !(*t.get_ref() >= 0.0 && t.get_ref().is_finite()) {
                return Err(lines.at(t.span().start, "tolerance must be a finite number >= 0"));
            }
        }
        let outputs = match &meta.outputs {
            Some(o) => o.iter().map(lookup).collect::<Result<Vec<_>, _>>()?,
            None => (0..tensors.len() as u32).collect(),
        };
        let mut checks = Vec::new();
        for e in &f.expect {
            let d = e.get_ref();
            let at = e.span().start;
            let tensor = lookup(&d.tensor)?;
            let tol = d.tolerance.unwrap_or(0.0);
            match (&d.checksum, &d.values) {
                (Some(c), None) => checks.push(Check::Checksum { tensor, want: *c, tol, at }),
                (None, Some(v)) => {
                    if v.len() as u64 != tensors[tensor as usize].elems {
                        return Err(lines.at(
                            at,
                            format!(
                                "{} expected values for {} elements",
                                v.len(),
                                tensors[tensor as usize].elems
                            ),
                        ));
                    }
                    checks.push(Check::Values { tensor, want: v.clone(), tol, at })
                }
                _ => {
                    return Err(
                        lines.at(at, "an [[expect]] needs exactly one of `checksum` or `values`")
                    )
                }
            }
        }
        if host_reference.is_none() && checks.is_empty() {
            return Err(lines.at(
                f.workload.span().start,
                "nothing to verify: set verify = \"host-reference\" or add an [[expect]]",
            ));
        }
        let orchestration = match &f.orchestration {
            None => None,
            Some(o) => {
                let d = o.get_ref();
                if !f.graph.is_empty() {
                    return Err(lines.at(
                        o.span().start,
                        "a workload's graph is its [[graph]] entries or an [orchestration] \
                         function, not both",
                    ));
                }
                let fname = d.function.get_ref();
                let ok = !fname.is_empty()
                    && fname.len() <= ferry_abi::orch_lib::MAX_FUNCTION_NAME
                    && fname.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if !ok {
                    return Err(lines.at(
                        d.function.span().start,
                        format!(
                            "function `{fname}`: 1..={} ASCII letters, digits or `_`",
                            ferry_abi::orch_lib::MAX_FUNCTION_NAME
                        ),
                    ));
                }
                if d.scalars.len() > MAX_ORCH_SCALARS {
                    return Err(lines.at(
                        o.span().start,
                        format!("more than {MAX_ORCH_SCALARS} orchestration scalars"),
                    ));
                }
                let scalars = d
                    .scalars
                    .iter()
                    .map(|n| ctx0.constant(n, "scalar"))
                    .collect::<Result<Vec<u64>, _>>()?;
                Some((fname.clone(), scalars))
            }
        };
        let (program, words) = compile::emit(&ir, tensors.len() as u32);
        let scopes = words
            .into_iter()
            .map(|s| ScopeName {
                site: format!("{}:{}", ferry_runtime::device::workload::SITE_FILE, s.word),
                name: s.name,
                at: match lines.at(s.at, "") {
                    WorkloadError::At { file, line, .. } => {
                        let base = std::path::Path::new(&file)
                            .file_name()
                            .map_or_else(|| file.clone(), |b| b.to_string_lossy().into_owned());
                        format!("{base}:{line}")
                    }
                    _ => String::new(),
                },
            })
            .collect();
        let description = meta.description.clone();
        let wl = Workload {
            name,
            description,
            lines,
            tensors,
            ir,
            program,
            scopes,
            scratch_bytes,
            host_reference,
            outputs,
            checks,
            orchestration,
        };
        let (sizes, elems) = wl.sizes();
        expand::Walk::new(&wl.lines, &sizes, &elems, wl.scratch_bytes, &wl.ir)
            .run(&wl.ir, &mut expand::NoVisit)?;
        Ok(wl)
    }

    /// Where task `seq` of a run comes from (`seq` counts tasks in submission order from 0, as
    /// a run's faults number them): `file:line:col` of its graph entry; `None` past the last
    /// task. Walks the graph up to that task (linear in `seq`), so an error path can afford it.
    pub fn task_location(&self, seq: u64) -> Option<String> {
        struct Find {
            want: u64,
            seen: u64,
            at: Option<usize>,
        }
        impl expand::Visit for Find {
            fn scope_begin(&mut self, _: &[(u32, u64)]) {}
            fn scope_end(&mut self) {}
            fn task(&mut self, t: &expand::Concrete<'_>) -> Result<(), String> {
                if self.seen == self.want {
                    self.at = Some(t.node.at);
                    return Err(String::new()); // found: stop the walk
                }
                self.seen += 1;
                Ok(())
            }
        }
        let mut f = Find { want: seq, seen: 0, at: None };
        let (sizes, elems) = self.sizes();
        let _ = expand::Walk::new(&self.lines, &sizes, &elems, self.scratch_bytes, &self.ir)
            .run(&self.ir, &mut f);
        match self.lines.at(f.at?, "") {
            WorkloadError::At { file, line, col, .. } => Some(format!("{file}:{line}:{col}")),
            _ => None,
        }
    }

    /// The scopes of the graph, in program order (one per `scope = "..."` entry, whatever its
    /// repeat count): the host-side table that names the scope records of a run.
    pub fn scopes(&self) -> &[ScopeName] {
        &self.scopes
    }

    /// The workload's name (the DFX case name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The `description` line, if any.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// Tasks the workload expands to.
    pub fn tasks(&self) -> u64 {
        self.ir.tasks
    }

    /// The compiled program (the interpreter's words).
    pub fn program(&self) -> &[u32] {
        &self.program
    }

    /// Tensor names, by `TensorId`.
    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|t| t.name.as_str())
    }

    /// A run's tensors as the files `--out DIR` holds: `(<name>.<dtype>, bytes)` per returned
    /// tensor, its elements packed little-endian in its dtype (`acc.int32`, `y.bf16`, `x.f32`).
    pub fn output_files(&self, out: &ferry_runtime::host::RunOutput) -> Vec<(String, Vec<u8>)> {
        self.tensors
            .iter()
            .zip(&out.tensors)
            .filter_map(|(t, words)| {
                let mut bytes: Vec<u8> =
                    words.as_deref()?.iter().flat_map(|x| x.to_le_bytes()).collect();
                bytes.truncate((t.elems * t.dtype.size() as u64) as usize);
                Some((format!("{}.{}", t.name, t.dtype.short_name()), bytes))
            })
            .collect()
    }

    /// Tensor dtypes, by `TensorId`.
    pub fn tensor_dtypes(&self) -> impl Iterator<Item = DType> + '_ {
        self.tensors.iter().map(|t| t.dtype)
    }

    /// Tensor elements (the product of each shape), by `TensorId`: a returned tensor's words
    /// hold this many elements of its dtype, padded to a whole word.
    pub fn tensor_elems(&self) -> impl Iterator<Item = u64> + '_ {
        self.tensors.iter().map(|t| t.elems)
    }

    /// Each run tensor's words on the device and its elements.
    fn sizes(&self) -> (Vec<u64>, Vec<u64>) {
        self.tensors.iter().map(|t| (t.words(), t.elems)).unzip()
    }

    /// The primary output (the first of `outputs`), whose checksum a run reports.
    pub fn primary_output(&self) -> Option<usize> {
        self.outputs.first().map(|&t| t as usize)
    }

    /// The orchestration library function that builds the graph (`[orchestration]`), if the
    /// workload names one instead of `[[graph]]` entries.
    pub fn orchestration_function(&self) -> Option<&str> {
        self.orchestration.as_ref().map(|(f, _)| f.as_str())
    }

    /// The callable running an `[orchestration]` workload's function of `library`.
    ///
    /// # Errors
    /// [`OrchLoadError::UnknownFunction`](ferry_runtime::host::OrchLoadError); a workload
    /// without `[orchestration]` is the library's unknown function `""`.
    pub fn library_callable(
        &self,
        library: &std::sync::Arc<ferry_runtime::host::LoadedOrchLibrary>,
        variant: Variant,
    ) -> Result<Callable, ferry_runtime::host::OrchLoadError> {
        Callable::library(library, self.orchestration_function().unwrap_or(""), variant)
    }

    /// The callable running the workload with `variant` (its orchestration object is the
    /// workload interpreter).
    pub fn callable(&self, variant: Variant) -> Callable {
        Callable::new(self.name.clone(), variant, ferry_runtime::device::workload::interpret)
            .with_object(&ferry_programs::ORCH_WORKLOAD)
    }

    /// The tensors' initial contents as the words the device holds (each tensor's elements
    /// packed little-endian in its dtype; files are read here, their sizes were checked at load).
    ///
    /// # Errors
    /// A file that cannot be read or changed size since the check.
    pub fn initial_words(&self) -> Result<Vec<Vec<u32>>, WorkloadError> {
        self.tensors
            .iter()
            .map(|t| {
                let (n, d) = (t.elems as usize, t.dtype);
                let from = |v: f64| typed::from_value(d, v);
                Ok(match &t.init {
                    InitPlan::Zeros => typed::pack(d, n, std::iter::repeat(0)),
                    InitPlan::Constant(c) => {
                        typed::pack(d, n, std::iter::repeat(from(f64::from(*c))))
                    }
                    InitPlan::Iota(s, step) => {
                        typed::pack(d, n, (0..n).map(|i| from(s + step * i as f64)))
                    }
                    InitPlan::Random(seed) => {
                        let r = random(n, *seed).into_iter().map(f64::from);
                        match d {
                            _ if d.is_float() => typed::pack(d, n, r.map(from)),
                            _ if d.is_signed_int() => typed::pack(d, n, r.map(|x| from(x * 64.0))),
                            _ => typed::pack(d, n, r.map(|x| from((x + 1.0) * 64.0))),
                        }
                    }
                    InitPlan::File(p) => {
                        let bytes = (t.elems * d.size() as u64) as usize;
                        let io = |m: String| WorkloadError::Io {
                            file: p.display().to_string(),
                            message: m,
                        };
                        // A regular file, read no further than the checked size, whatever it
                        // grew to since the check.
                        let b = match ferry_fs::read_input(p, bytes as u64) {
                            Ok(b) => b,
                            Err(ferry_fs::FsError::TooLarge { .. }) => {
                                return Err(io(format!(
                                    "tensor `{}`: more than the {bytes} bytes expected",
                                    t.name
                                )))
                            }
                            Err(ferry_fs::FsError::Io { source, .. }) => {
                                return Err(io(source.to_string()))
                            }
                            Err(e) => return Err(io(fs_reason(&e))),
                        };
                        if b.len() != bytes {
                            return Err(io(format!(
                                "tensor `{}`: {} bytes, {bytes} expected",
                                t.name,
                                b.len()
                            )));
                        }
                        let mut padded = b;
                        padded.resize(padded.len().div_ceil(4) * 4, 0);
                        padded
                            .chunks_exact(4)
                            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                            .collect()
                    }
                })
            })
            .collect()
    }

    /// The run's arguments: the tensors, then the program tensor; scalar 0 names it.
    ///
    /// # Errors
    /// As [`initial_words`](Self::initial_words).
    pub fn run_args(&self) -> Result<RunArgs, WorkloadError> {
        let mut tensors: Vec<TensorInit> = self
            .initial_words()?
            .into_iter()
            .map(|w| TensorInit::Data(w.into_iter().map(f32::from_bits).collect()))
            .collect();
        if let Some((_, scalars)) = &self.orchestration {
            // The function receives the tensors in file order and the `scalars` list.
            return Ok(RunArgs {
                tensors,
                scalars: scalars.clone(),
                scratch_bytes: self.scratch_bytes,
            });
        }
        tensors.push(TensorInit::Data(self.program.iter().map(|&w| f32::from_bits(w)).collect()));
        Ok(RunArgs {
            tensors,
            scalars: vec![self.tensors.len() as u64],
            scratch_bytes: self.scratch_bytes,
        })
    }

    /// The file the workload was read from (as errors name it).
    pub fn file(&self) -> PathBuf {
        PathBuf::from(&self.lines.file)
    }
}
