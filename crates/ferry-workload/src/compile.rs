//! Semantic checks and lowering: the parsed file becomes an [`Ir`] (names resolved, expressions
//! parsed, kernels looked up, the task total counted before any expansion), which [`emit`]
//! turns into the interpreter's program.
use crate::catalog::{KernelCatalog, KernelInfo, ScalarType};
use crate::error::{Lines, WorkloadError};
use crate::expr::{self, Expr};
use crate::schema::{self, Item, Num};
use ferry_abi::records::DType;
use ferry_runtime::device::ffi::arg_role_word;
use ferry_runtime::device::workload as w;
use ferry_runtime::Role;
use std::collections::BTreeMap;
use toml::Spanned;

/// Most tasks a workload may expand to (checked before expansion).
pub const MAX_TASKS: u64 = w::MAX_TASKS;
/// Most elements of one tensor (checked before anything is allocated): 1 GiB of `f32`.
pub const MAX_TENSOR_ELEMENTS: u64 = 1 << 28;
/// Most elements of all tensors together, and most scratch bytes / 4: 1 GiB of `f32`.
pub const MAX_TOTAL_ELEMENTS: u64 = 1 << 28;
/// Most run tensors.
pub const MAX_TENSORS: usize = 4096;

/// A tensor reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TRef {
    Run(u32),
    Scratch(u32),
}

#[derive(Debug)]
pub(crate) struct ArgNode {
    pub(crate) tensor: TRef,
    pub(crate) name: String,
    pub(crate) role: Role,
    /// Marked for ArgsDump (`dump = true`).
    pub(crate) dump: bool,
    pub(crate) offset: Expr,
    pub(crate) len: Option<Expr>,
    pub(crate) at: usize,
    /// A view kernel's argument: its element view (`offset` and `len` above are then words).
    pub(crate) elem: Option<crate::views::ElemView>,
}

#[derive(Debug)]
pub(crate) enum ScalarNode {
    F32(u32),
    U64(Expr),
}

#[derive(Debug)]
pub(crate) struct TaskNode {
    pub(crate) kernel: KernelInfo,
    pub(crate) label: String,
    pub(crate) blocks: Expr,
    pub(crate) args: Vec<ArgNode>,
    pub(crate) scalars: Vec<ScalarNode>,
    pub(crate) at: usize,
}

#[derive(Debug)]
pub(crate) enum Node {
    Task(TaskNode),
    Repeat {
        var: u32,
        count: u64,
        body: Vec<Node>,
    },
    /// `name`: the scope's label and where the file gives it.
    Scope {
        name: (String, usize),
        scratch: Vec<(u32, Expr, usize)>,
        body: Vec<Node>,
        at: usize,
    },
}

/// A resolved workload graph.
#[derive(Debug)]
pub(crate) struct Ir {
    pub(crate) nodes: Vec<Node>,
    pub(crate) tasks: u64,
    pub(crate) vars: u32,
    pub(crate) scratch_slots: u32,
}

pub(crate) struct Ctx<'a> {
    pub(crate) lines: &'a Lines,
    pub(crate) params: &'a BTreeMap<String, u64>,
    pub(crate) fparams: &'a BTreeMap<String, f64>,
    pub(crate) tensors: &'a BTreeMap<String, u32>,
    pub(crate) catalog: &'a dyn KernelCatalog,
    /// Each run tensor's dtype and elements, by id.
    pub(crate) run_types: &'a [(DType, u64)],
    vars: Vec<(String, u32)>,
    scratch: Vec<(String, u32)>,
    max_var: u32,
    max_scratch: u32,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(
        lines: &'a Lines,
        params: &'a BTreeMap<String, u64>,
        fparams: &'a BTreeMap<String, f64>,
        tensors: &'a BTreeMap<String, u32>,
        catalog: &'a dyn KernelCatalog,
        run_types: &'a [(DType, u64)],
    ) -> Ctx<'a> {
        Ctx {
            lines,
            params,
            fparams,
            tensors,
            catalog,
            run_types,
            vars: vec![],
            scratch: vec![],
            max_var: 0,
            max_scratch: 0,
        }
    }

    fn err(&self, at: usize, m: impl Into<String>) -> WorkloadError {
        self.lines.at(at, m)
    }

    /// Parses a number or expression at `n`'s span.
    pub(crate) fn expr(&self, n: &Spanned<Num>, what: &str) -> Result<Expr, WorkloadError> {
        let at = n.span().start;
        match n.get_ref() {
            Num::Int(i) => u64::try_from(*i)
                .map(Expr::Const)
                .map_err(|_| self.err(at, format!("{what}: {i} is negative"))),
            Num::Expr(s) => {
                let params = |p: &str| self.params.get(p).copied();
                let scope = expr::Scope { params: &params, vars: &self.vars };
                let e = expr::parse(s, &scope)
                    .map_err(|m| self.err(at, format!("{what} `{s}`: {m}")))?;
                let mut code = Vec::new();
                e.emit(&mut code);
                if code.len() > w::MAX_EXPR_WORDS as usize || stack_need(&e) > w::MAX_STACK {
                    return Err(self.err(at, format!("{what} `{s}`: expression too long")));
                }
                Ok(e)
            }
        }
    }

    /// A constant (parameters only).
    pub(crate) fn constant(&self, n: &Spanned<Num>, what: &str) -> Result<u64, WorkloadError> {
        let e = self.expr(n, what)?;
        e.constant().ok_or_else(|| {
            self.err(
                n.span().start,
                format!("{what} must be constant (parameters only, no loop variables)"),
            )
        })
    }

    /// The graph under `items`.
    pub(crate) fn body(
        &mut self,
        items: &[Spanned<Item>],
        mult: u64,
        depth: usize,
        total: &mut u64,
    ) -> Result<Vec<Node>, WorkloadError> {
        let mut out = Vec::with_capacity(items.len());
        for it in items {
            out.push(self.item(it, mult, depth, total)?);
        }
        Ok(out)
    }

    fn item(
        &mut self,
        it: &Spanned<Item>,
        mult: u64,
        depth: usize,
        total: &mut u64,
    ) -> Result<Node, WorkloadError> {
        let at = it.span().start;
        let i = it.get_ref();
        let kinds = [i.kernel.is_some(), i.repeat.is_some(), i.scope.is_some()];
        if kinds.iter().filter(|&&k| k).count() != 1 {
            return Err(
                self.err(at, "a graph entry needs exactly one of `kernel`, `repeat` or `scope`")
            );
        }
        if i.kernel.is_none() && (i.args.is_some() || i.scalars.is_some() || i.blocks.is_some()) {
            return Err(
                self.err(at, "`args`, `scalars` and `blocks` belong to a task (`kernel = ...`)")
            );
        }
        if i.kernel.is_some() && (i.body.is_some() || i.var.is_some() || i.scratch.is_some()) {
            return Err(self.err(at, "a task has no `body`, `var` or `scratch`"));
        }
        if i.kernel.is_none() && depth >= w::MAX_DEPTH {
            return Err(
                self.err(at, format!("repeats and scopes nest deeper than {}", w::MAX_DEPTH))
            );
        }
        if let Some(k) = &i.kernel {
            *total = total.checked_add(mult).filter(|&t| t <= MAX_TASKS).ok_or_else(|| {
                // Counted from the repeat counts, never by expanding: `at least` the tasks
                // before this one plus this one's repetitions.
                let n = total.saturating_add(mult);
                self.err(
                    at,
                    format!("the workload expands to more than {MAX_TASKS} tasks (at least {n})"),
                )
            })?;
            return self.task(k, i, at).map(Node::Task);
        }
        let empty = Vec::new();
        let body_items = i.body.as_ref().unwrap_or(&empty);
        if let Some(count) = &i.repeat {
            let count_v = self.constant(count, "repeat count")?;
            let name = i.var.as_ref().map_or("i".to_string(), |v| v.get_ref().clone());
            if !is_ident(&name)
                || self.params.contains_key(&name)
                || self.vars.iter().any(|(n, _)| *n == name)
            {
                let vat = i.var.as_ref().map_or(at, |v| v.span().start);
                return Err(self.err(vat, format!("loop variable `{name}` is not a fresh name (a parameter or an enclosing loop's variable)")));
            }
            let slot = self.vars.len() as u32;
            self.max_var = self.max_var.max(slot + 1);
            self.vars.push((name, slot));
            let m =
                mult.checked_mul(count_v).filter(|&m| m <= MAX_TASKS * 1024).ok_or_else(|| {
                    self.err(
                        count.span().start,
                        format!(
                            "repeat count {count_v}: the loop nest expands past {MAX_TASKS} tasks"
                        ),
                    )
                })?;
            let body = self.body(body_items, m, depth + 1, total);
            self.vars.pop();
            return Ok(Node::Repeat { var: slot, count: count_v, body: body? });
        }
        let mut scratch = Vec::new();
        let base = self.scratch.len();
        for s in i.scratch.iter().flatten() {
            let name = s.get_ref().name.get_ref();
            let nat = s.get_ref().name.span().start;
            if self.tensors.contains_key(name) || self.scratch.iter().any(|(n, _)| n == name) {
                self.scratch.truncate(base);
                return Err(
                    self.err(nat, format!("scratch tensor `{name}` shadows another tensor"))
                );
            }
            let slot = self.scratch.len() as u32;
            if slot >= w::MAX_SLOTS {
                self.scratch.truncate(base);
                return Err(self
                    .err(nat, format!("more than {} scratch tensors live at once", w::MAX_SLOTS)));
            }
            let len = self.expr(&s.get_ref().len, "scratch length");
            let len = match len {
                Ok(l) => l,
                Err(e) => {
                    self.scratch.truncate(base);
                    return Err(e);
                }
            };
            self.max_scratch = self.max_scratch.max(slot + 1);
            self.scratch.push((name.clone(), slot));
            scratch.push((slot, len, s.span().start));
        }
        let body = self.body(body_items, mult, depth + 1, total);
        self.scratch.truncate(base);
        let name =
            i.scope.as_ref().map_or((String::new(), at), |n| (n.get_ref().clone(), n.span().start));
        Ok(Node::Scope { name, scratch, body: body?, at })
    }

    fn task(&self, k: &Spanned<String>, i: &Item, at: usize) -> Result<TaskNode, WorkloadError> {
        let kernel = self.catalog.lookup(k.get_ref()).ok_or_else(|| {
            self.err(
                k.span().start,
                format!(
                    "unknown kernel `{}` (known: {}; a kernel library's kernels need `--kernels LIB.so`)",
                    k.get_ref(),
                    self.catalog.names().join(", ")
                ),
            )
        })?;
        let label = i.name.clone().unwrap_or_else(|| kernel.name.clone());
        let args_in = i.args.as_deref().unwrap_or(&[]);
        let n = args_in.len() as u32;
        if n < kernel.tensors.0 || n > kernel.tensors.1 {
            return Err(self.err(
                at,
                format!(
                    "task '{label}': kernel `{}` takes {}..={} tensors, {n} given",
                    kernel.name, kernel.tensors.0, kernel.tensors.1
                ),
            ));
        }
        let mut args = Vec::new();
        for a in args_in {
            let d = a.get_ref();
            let name = d.tensor.get_ref();
            let tensor = if let Some((_, s)) = self.scratch.iter().rev().find(|(n, _)| n == name) {
                TRef::Scratch(*s)
            } else if let Some(&t) = self.tensors.get(name) {
                TRef::Run(t)
            } else {
                return Err(self.err(
                    d.tensor.span().start,
                    format!("task '{label}': unknown tensor `{name}`"),
                ));
            };
            let role = match d.role.get_ref().as_str() {
                "input" => Role::Input,
                "output" => Role::Output,
                "inout" => Role::InOut,
                r => {
                    return Err(self.err(
                        d.role.span().start,
                        format!("task '{label}': role `{r}` is not input, output or inout"),
                    ))
                }
            };
            let offset = match &d.offset {
                Some(o) => self.expr(o, "offset")?,
                None => Expr::Const(0),
            };
            let len = d.len.as_ref().map(|l| self.expr(l, "len")).transpose()?;
            args.push(ArgNode {
                tensor,
                name: name.clone(),
                role,
                dump: d.dump.unwrap_or(false),
                offset,
                len,
                at: a.span().start,
                elem: None,
            });
        }
        let layout_scalars = if kernel.views {
            let reduce = ferry_runtime::device::kernels::reduce_axis(kernel.id);
            crate::views::lower(self, &label, &mut args, args_in, self.run_types, reduce)?
        } else {
            for (a, d) in args.iter().zip(args_in) {
                let dt = match a.tensor {
                    TRef::Run(i) => self.run_types[i as usize].0,
                    TRef::Scratch(_) => DType::Float32,
                };
                let at = d.span().start;
                if dt != DType::Float32 {
                    return Err(self.err(at, format!(
                        "task '{label}': kernel `{}` takes f32 tensors, `{}` is {} (a view kernel such as add_nd or cast_nd takes any dtype)",
                        kernel.name, a.name, dt.short_name()
                    )));
                }
                if d.get_ref().shape.is_some() || d.get_ref().strides.is_some() {
                    return Err(self.err(at, format!(
                        "task '{label}': kernel `{}` takes flat views (`offset`, `len`); `shape` and `strides` need a view kernel such as add_nd",
                        kernel.name
                    )));
                }
            }
            Vec::new()
        };
        let sc_in = i.scalars.as_deref().unwrap_or(&[]);
        if sc_in.len() != kernel.scalars.len() {
            return Err(self.err(
                at,
                format!(
                    "task '{label}': kernel `{}` takes {} scalars, {} given",
                    kernel.name,
                    kernel.scalars.len(),
                    sc_in.len()
                ),
            ));
        }
        let mut scalars = Vec::new();
        for (s, want) in sc_in.iter().zip(&kernel.scalars) {
            let d = s.get_ref();
            let sat = s.span().start;
            let v = match (&d.f32, &d.u64, want) {
                (Some(f), None, ScalarType::F32) => {
                    let x = match f {
                        schema::F32Val::Int(i) => *i as f64,
                        schema::F32Val::Float(x) => *x,
                        schema::F32Val::Name(n) => *self.fparams.get(n).ok_or_else(|| {
                            self.err(
                                sat,
                                format!("task '{label}': f32 scalar `{n}` is not a parameter"),
                            )
                        })?,
                    };
                    ScalarNode::F32((x as f32).to_bits())
                }
                (None, Some(u), ScalarType::U64) => {
                    ScalarNode::U64(self.expr(&Spanned::new(s.span(), u.clone()), "u64 scalar")?)
                }
                (Some(_), None, ScalarType::U64) | (None, Some(_), ScalarType::F32) => {
                    return Err(self.err(
                        sat,
                        format!(
                            "task '{label}': kernel `{}` reads this scalar as {}",
                            kernel.name,
                            if *want == ScalarType::F32 { "f32" } else { "u64" }
                        ),
                    ))
                }
                _ => {
                    return Err(self
                        .err(sat, "a scalar is exactly one of `{ f32 = ... }` or `{ u64 = ... }`"))
                }
            };
            scalars.push(v);
        }
        scalars.extend(layout_scalars);
        let blocks = match &i.blocks {
            Some(b) => self.expr(b, "blocks")?,
            None => Expr::Const(1),
        };
        if let Some(b) = blocks.constant() {
            if b == 0 || b > u64::from(kernel.max_blocks) {
                let bat = i.blocks.as_ref().map_or(at, |b| b.span().start);
                return Err(self.err(
                    bat,
                    format!(
                        "task '{label}': blocks = {b}, kernel `{}` takes 1..={}",
                        kernel.name, kernel.max_blocks
                    ),
                ));
            }
        }
        Ok(TaskNode { kernel, label, blocks, args, scalars, at })
    }

    /// Loop variables and scratch slots used.
    pub(crate) fn slots(&self) -> (u32, u32) {
        (self.max_var, self.max_scratch)
    }
}

pub(crate) fn stack_need(e: &Expr) -> usize {
    match e {
        Expr::Const(_) | Expr::Var(_) => 1,
        Expr::Bin(_, a, b) => stack_need(a).max(1 + stack_need(b)),
    }
}

pub(crate) fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s != "min"
        && s != "max"
}

fn emit_expr(e: Option<&Expr>, out: &mut Vec<u32>) {
    match e {
        None => out.push(0),
        Some(e) => {
            let mut code = Vec::new();
            e.emit(&mut code);
            out.push(code.len() as u32);
            out.extend(code);
        }
    }
}

/// A scope of the compiled program: the index of its `OP_SCOPE` word (the line of the site the
/// interpreter records), its label and where the file gives the label (byte offset).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ScopeWord {
    pub(crate) word: u32,
    pub(crate) name: String,
    pub(crate) at: usize,
}

fn emit_nodes(nodes: &[Node], out: &mut Vec<u32>, scopes: &mut Vec<ScopeWord>) {
    for n in nodes {
        match n {
            Node::Task(t) => {
                out.extend([w::OP_TASK, t.kernel.id, t.args.len() as u32, t.scalars.len() as u32]);
                emit_expr(Some(&t.blocks), out);
                for a in &t.args {
                    out.push(match a.tensor {
                        TRef::Run(i) => i,
                        TRef::Scratch(s) => w::SCRATCH_REF | s,
                    });
                    out.push(arg_role_word(a.role, a.dump));
                    emit_expr(Some(&a.offset), out);
                    emit_expr(a.len.as_ref(), out);
                }
                for s in &t.scalars {
                    match s {
                        ScalarNode::F32(b) => out.extend([w::SCALAR_F32, *b]),
                        ScalarNode::U64(e) => {
                            out.push(w::SCALAR_U64);
                            emit_expr(Some(e), out);
                        }
                    }
                }
            }
            Node::Repeat { var, count, body } => {
                out.extend([w::OP_REPEAT, *var, 0]);
                let patch = out.len() - 1;
                emit_expr(Some(&Expr::Const(*count)), out);
                let start = out.len();
                emit_nodes(body, out, scopes);
                out[patch] = (out.len() - start) as u32;
            }
            Node::Scope { name: (name, at), scratch, body, .. } => {
                scopes.push(ScopeWord { word: out.len() as u32, name: name.clone(), at: *at });
                out.extend([w::OP_SCOPE, scratch.len() as u32, 0]);
                let patch = out.len() - 1;
                for (slot, len, _) in scratch {
                    out.push(*slot);
                    emit_expr(Some(len), out);
                }
                let start = out.len();
                emit_nodes(body, out, scopes);
                out[patch] = (out.len() - start) as u32;
            }
        }
    }
}

/// The interpreter's program for `ir` over `run_tensors` run tensors, and its scopes in word
/// order.
pub(crate) fn emit(ir: &Ir, run_tensors: u32) -> (Vec<u32>, Vec<ScopeWord>) {
    let mut out = vec![
        w::MAGIC,
        w::VERSION,
        0,
        run_tensors,
        ir.scratch_slots,
        ir.vars,
        ir.tasks as u32,
        (ir.tasks >> 32) as u32,
    ];
    let mut scopes = Vec::new();
    emit_nodes(&ir.nodes, &mut out, &mut scopes);
    out[2] = out.len() as u32;
    (out, scopes)
}

/// `init` of one tensor, resolved.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum InitPlan {
    Zeros,
    Constant(f32),
    Iota(f64, f64),
    Random(u64),
    File(std::path::PathBuf),
}

pub(crate) fn init_plan(
    lines: &Lines,
    init: Option<&Spanned<schema::InitAny>>,
    base: &std::path::Path,
) -> Result<InitPlan, WorkloadError> {
    let Some(init) = init else { return Ok(InitPlan::Zeros) };
    let at = init.span().start;
    match init.get_ref() {
        schema::InitAny::Name(n) if n == "zeros" => Ok(InitPlan::Zeros),
        schema::InitAny::Name(n) => {
            Err(lines.at(at, format!("init `{n}`: a string init must be \"zeros\"")))
        }
        schema::InitAny::Table(t) => {
            let set =
                [t.constant.is_some(), t.iota.is_some(), t.random.is_some(), t.file.is_some()];
            if set.iter().filter(|&&s| s).count() != 1 {
                return Err(lines
                    .at(at, "init needs exactly one of `constant`, `iota`, `random` or `file`"));
            }
            Ok(if let Some(c) = t.constant {
                InitPlan::Constant(c as f32)
            } else if let Some(i) = &t.iota {
                InitPlan::Iota(i.start, i.step)
            } else if let Some(r) = &t.random {
                InitPlan::Random(r.seed)
            } else {
                InitPlan::File(base.join(t.file.as_deref().unwrap_or_default()))
            })
        }
    }
}
