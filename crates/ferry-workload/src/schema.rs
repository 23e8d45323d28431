//! The file's shape, as serde reads it. Every field that a semantic check can refuse keeps its
//! span ([`Spanned`]), so the error names its line. `docs/workloads.md` documents each key.
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct File {
    pub(crate) workload: Spanned<Meta>,
    #[serde(default)]
    pub(crate) params: BTreeMap<String, Spanned<Param>>,
    #[serde(default)]
    pub(crate) small: BTreeMap<String, Spanned<Param>>,
    #[serde(default)]
    pub(crate) tensor: Vec<Spanned<TensorDecl>>,
    #[serde(default)]
    pub(crate) graph: Vec<Spanned<Item>>,
    #[serde(default)]
    pub(crate) expect: Vec<Spanned<Expect>>,
}

/// `[workload]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Meta {
    pub(crate) name: Spanned<String>,
    #[serde(default)]
    pub(crate) description: Option<String>,
    #[serde(default)]
    pub(crate) scratch_bytes: Option<Spanned<Num>>,
    #[serde(default)]
    pub(crate) verify: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) tolerance: Option<Spanned<f64>>,
    #[serde(default)]
    pub(crate) outputs: Option<Vec<Spanned<String>>>,
}

/// An integer or an expression string.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Num {
    Int(i64),
    Expr(String),
}

/// A parameter: an integer (expressions) or a float (`f32` scalars by name).
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Param {
    Int(i64),
    Float(f64),
}

/// An `f32` scalar: a number or a parameter's name.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum F32Val {
    Int(i64),
    Float(f64),
    Name(String),
}

/// `[[tensor]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TensorDecl {
    pub(crate) name: Spanned<String>,
    #[serde(default)]
    pub(crate) dtype: Option<Spanned<String>>,
    pub(crate) shape: Spanned<Vec<Spanned<Num>>>,
    #[serde(default)]
    pub(crate) init: Option<Spanned<InitAny>>,
}

/// `init = "zeros"` or a one-key table.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum InitAny {
    Name(String),
    Table(InitTable),
}

/// The table form of `init`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InitTable {
    #[serde(default)]
    pub(crate) constant: Option<f64>,
    #[serde(default)]
    pub(crate) iota: Option<Iota>,
    #[serde(default)]
    pub(crate) random: Option<Random>,
    #[serde(default)]
    pub(crate) file: Option<String>,
}

/// `iota = { start, step }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Iota {
    #[serde(default)]
    pub(crate) start: f64,
    #[serde(default = "one")]
    pub(crate) step: f64,
}

fn one() -> f64 {
    1.0
}

/// `random = { seed }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Random {
    pub(crate) seed: u64,
}

/// One entry of a graph body: a task, a repeat or a scope.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Item {
    #[serde(default)]
    pub(crate) kernel: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) args: Option<Vec<Spanned<ArgDecl>>>,
    #[serde(default)]
    pub(crate) scalars: Option<Vec<Spanned<ScalarDecl>>>,
    #[serde(default)]
    pub(crate) blocks: Option<Spanned<Num>>,
    #[serde(default)]
    pub(crate) repeat: Option<Spanned<Num>>,
    #[serde(default)]
    pub(crate) var: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) scope: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) scratch: Option<Vec<Spanned<ScratchDecl>>>,
    #[serde(default)]
    pub(crate) body: Option<Vec<Spanned<Item>>>,
}

/// A tensor argument.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ArgDecl {
    pub(crate) tensor: Spanned<String>,
    pub(crate) role: Spanned<String>,
    /// Marked for ArgsDump, the original runtime's `dump(...)`.
    #[serde(default)]
    pub(crate) dump: Option<bool>,
    #[serde(default)]
    pub(crate) offset: Option<Spanned<Num>>,
    #[serde(default)]
    pub(crate) len: Option<Spanned<Num>>,
}

/// A scalar: `{ f32 = 0.5 }` or `{ u64 = "d" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScalarDecl {
    #[serde(default)]
    pub(crate) f32: Option<F32Val>,
    #[serde(default)]
    pub(crate) u64: Option<Num>,
}

/// A scope's scratch tensor.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScratchDecl {
    pub(crate) name: Spanned<String>,
    pub(crate) len: Spanned<Num>,
}

/// `[[expect]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Expect {
    pub(crate) tensor: Spanned<String>,
    #[serde(default)]
    pub(crate) checksum: Option<f64>,
    #[serde(default)]
    pub(crate) values: Option<Vec<f32>>,
    #[serde(default)]
    pub(crate) tolerance: Option<f64>,
}
