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
    #[serde(default)]
    pub(crate) orchestration: Option<Spanned<OrchDecl>>,
}

/// `[orchestration]`: the graph is an orchestration library's function.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OrchDecl {
    pub(crate) function: Spanned<String>,
    #[serde(default)]
    pub(crate) scalars: Vec<Spanned<Num>>,
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
#[derive(Clone, Debug)]
pub(crate) enum Num {
    Int(i64),
    Expr(String),
}

/// A parameter: an integer (expressions) or a float (`f32` scalars by name).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Param {
    Int(i64),
    Float(f64),
}

/// An `f32` scalar: a number or a parameter's name.
#[derive(Clone, Debug)]
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
#[derive(Debug)]
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
    #[serde(default)]
    pub(crate) shape: Option<Spanned<Vec<Spanned<Num>>>>,
    #[serde(default)]
    pub(crate) strides: Option<Spanned<Vec<Spanned<Num>>>>,
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
    pub(crate) values: Option<Vec<f64>>,
    #[serde(default)]
    pub(crate) tolerance: Option<f64>,
}

// The values that take more than one form are read by hand, so that a value of another form
// gets a sentence naming the forms accepted (serde's untagged enums say only "did not match
// any variant"); the TOML error around it names the line and column.

/// An integer of TOML (which hands out `i64`), or `u64` where one fits.
fn int_of<E: serde::de::Error>(v: u64, what: &str) -> Result<i64, E> {
    i64::try_from(v).map_err(|_| E::custom(format!("{v} is too large for {what}")))
}

struct NumVisitor;

impl serde::de::Visitor<'_> for NumVisitor {
    type Value = Num;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an integer or a constant expression in quotes (e.g. 4096 or \"n * 4\")")
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Num, E> {
        Ok(Num::Int(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Num, E> {
        int_of(v, "an integer").map(Num::Int)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Num, E> {
        Ok(Num::Expr(v.to_string()))
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        d.deserialize_any(NumVisitor)
    }
}

struct ParamVisitor;

impl serde::de::Visitor<'_> for ParamVisitor {
    type Value = Param;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a number (an integer for sizes and counts, e.g. 4096, or a float, e.g. 0.5)")
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Param, E> {
        Ok(Param::Int(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Param, E> {
        int_of(v, "a parameter").map(Param::Int)
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Param, E> {
        Ok(Param::Float(v))
    }
}

impl<'de> Deserialize<'de> for Param {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Param, D::Error> {
        d.deserialize_any(ParamVisitor)
    }
}

struct F32Visitor;

impl serde::de::Visitor<'_> for F32Visitor {
    type Value = F32Val;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a number (e.g. 0.5) or the name of a parameter in quotes (e.g. \"alpha\")")
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<F32Val, E> {
        Ok(F32Val::Int(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<F32Val, E> {
        int_of(v, "a scalar").map(F32Val::Int)
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<F32Val, E> {
        Ok(F32Val::Float(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<F32Val, E> {
        Ok(F32Val::Name(v.to_string()))
    }
}

impl<'de> Deserialize<'de> for F32Val {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<F32Val, D::Error> {
        d.deserialize_any(F32Visitor)
    }
}

struct InitVisitor;

impl<'de> serde::de::Visitor<'de> for InitVisitor {
    type Value = InitAny;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "\"zeros\" or a table with one of constant, iota, random, file (e.g. \
             { random = { seed = 7 } })",
        )
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<InitAny, E> {
        Ok(InitAny::Name(v.to_string()))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<InitAny, A::Error> {
        InitTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            .map(InitAny::Table)
    }
}

impl<'de> Deserialize<'de> for InitAny {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<InitAny, D::Error> {
        d.deserialize_any(InitVisitor)
    }
}
