//! `deps.json` (docs/dfx.md): tasks, tensors and dependency edges; every u64 is a JSON
//! string. ferry adds a top-level `dfx` key with the DepGen lanes' loss accounting.

use std::io::{Read, Write};

#[cfg(test)]
use serde::ser::{SerializeStruct, Serializer};
use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::dep_tasks::DepTasks;
use super::jsonw::Json;
use super::model::LossAccounting;
#[cfg(test)]
use super::stream::{same, TickSeq};
use super::stream::{InlineList, Ticker};
use super::{strnum, OutputError};

/// File name inside the output directory.
pub const DEPS_FILE: &str = "deps.json";

/// FNV-1a 64 of `(buffer_addr, version)`: the little-endian bytes of `buffer_addr` (8) then of
/// `version` (4).
///
/// # Examples
/// ```
/// use ferry_profile::tensor_id;
/// assert_ne!(tensor_id(0x1000, 0), tensor_id(0x1000, 1));
/// ```
pub fn tensor_id(buffer_addr: u64, version: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in buffer_addr.to_le_bytes().into_iter().chain(version.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The DepGen graph of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepsGraph {
    /// One entry per submitted task (a run's model keeps them as its DepGen log).
    pub tasks: DepTasks,
    /// Tensors the tasks reference.
    pub tensors: Vec<DepTensor>,
    /// Dependency edges.
    pub edges: Vec<DepEdge>,
}

/// One submitted task.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepTask {
    /// Task id.
    #[serde(with = "strnum")]
    pub task_id: u64,
    /// Scope kind (`"auto"`, `"manual"`).
    pub scope: Cow<'static, str>,
    /// Kernel per sub-core (AIC, AIV0, AIV1); −1 inactive.
    pub kernel_ids: [i32; 3],
    /// SPMD block count.
    pub block_num: u32,
    /// Tensor and scalar arguments.
    pub args: Vec<DepArg>,
}

/// One argument of a task.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepArg {
    /// Argument position.
    pub idx: u32,
    /// `INPUT`, `OUTPUT`, `INOUT` or `SCALAR`.
    #[serde(rename = "type")]
    pub role: Cow<'static, str>,
    /// Tensor id (tensors only).
    #[serde(default, with = "strnum::opt", skip_serializing_if = "Option::is_none")]
    pub tensor_id: Option<u64>,
    /// Element type name.
    #[serde(default, skip_serializing_if = "str::is_empty")]
    pub dtype: Cow<'static, str>,
    /// Extents.
    #[serde(default)]
    pub shape: InlineList<u64, { ferry_abi::records::ARGS_MAX_DIMS }>,
    /// Element offset of the view.
    #[serde(with = "strnum")]
    pub start_offset: u64,
    /// Element strides.
    #[serde(default)]
    pub strides: InlineList<u64, { ferry_abi::records::ARGS_MAX_DIMS }>,
}

/// One tensor version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepTensor {
    /// [`tensor_id`] of `(buffer_addr, version)`.
    #[serde(with = "strnum")]
    pub tensor_id: u64,
    /// Device address of the buffer.
    #[serde(with = "strnum")]
    pub buffer_addr: u64,
    /// Version (bumped per producer).
    pub version: u32,
    /// Element type name.
    pub dtype: Cow<'static, str>,
    /// Elements in the buffer.
    #[serde(with = "strnum")]
    pub buffer_numel: u64,
}

/// How an edge was found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EdgeSource {
    /// Declared by the orchestration code.
    #[default]
    Explicit,
    /// The consumer reads a tensor the producer created.
    Creator,
    /// Found through the tensor map (overlapping regions).
    Tensormap,
}

/// One dependency edge `pred → succ`.
///
/// Its JSON object is flat (the original's layout); in memory the views' geometry is boxed,
/// because most edges have none (an edge is ~80 bytes instead of ~270: a 50,000-task storm's
/// edges are 4 MB, not 13).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "EdgeWire", into = "EdgeWire")]
pub struct DepEdge {
    /// Producer task id (`0` for the run's inputs).
    pub pred: u64,
    /// Consumer task id.
    pub succ: u64,
    /// Consumer argument index.
    pub arg: u32,
    /// How the edge was found.
    pub source: EdgeSource,
    /// Edge flags (`wait`, `retain`, …).
    pub flags: Vec<String>,
    /// Tensor carried (creator/tensormap edges).
    pub tensor_id: Option<u64>,
    /// The consumer's and producer's views (creator and tensormap edges); `None` when no field
    /// of it is set (what an edge read from a file without them gets).
    pub geometry: Option<Box<EdgeGeometry>>,
}

/// The views an edge joins: the consumer's, and for tensormap edges the producer's and how
/// they overlap. Each field is a key of the edge's JSON object, left out when `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EdgeGeometry {
    /// Consumer geometry.
    pub consumer_dtype: Option<String>,
    /// Consumer extents.
    pub consumer_shape: Option<Vec<u64>>,
    /// Consumer view offset.
    pub consumer_start_offset: Option<u64>,
    /// Consumer strides.
    pub consumer_strides: Option<Vec<u64>>,
    /// Tensormap edges: `covered` or `other`.
    pub overlap: Option<String>,
    /// Tensormap edges: producer dtype.
    pub producer_dtype: Option<String>,
    /// Tensormap edges: producer extents.
    pub producer_shape: Option<Vec<u64>>,
    /// Tensormap edges: producer view offset.
    pub producer_start_offset: Option<u64>,
    /// Tensormap edges: producer strides.
    pub producer_strides: Option<Vec<u64>>,
}

impl EdgeGeometry {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A [`DepEdge`] as its JSON object has it: every key at the top level.
#[derive(Clone, Serialize, Deserialize)]
struct EdgeWire {
    #[serde(with = "strnum")]
    pred: u64,
    #[serde(with = "strnum")]
    succ: u64,
    arg: u32,
    source: EdgeSource,
    #[serde(default)]
    flags: Vec<String>,
    #[serde(default, with = "strnum::opt", skip_serializing_if = "Option::is_none")]
    tensor_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    consumer_dtype: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    consumer_shape: Option<Vec<u64>>,
    #[serde(default, with = "strnum::opt", skip_serializing_if = "Option::is_none")]
    consumer_start_offset: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    consumer_strides: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    overlap: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    producer_dtype: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    producer_shape: Option<Vec<u64>>,
    #[serde(default, with = "strnum::opt", skip_serializing_if = "Option::is_none")]
    producer_start_offset: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    producer_strides: Option<Vec<u64>>,
}

impl From<EdgeWire> for DepEdge {
    fn from(w: EdgeWire) -> Self {
        let g = EdgeGeometry {
            consumer_dtype: w.consumer_dtype,
            consumer_shape: w.consumer_shape,
            consumer_start_offset: w.consumer_start_offset,
            consumer_strides: w.consumer_strides,
            overlap: w.overlap,
            producer_dtype: w.producer_dtype,
            producer_shape: w.producer_shape,
            producer_start_offset: w.producer_start_offset,
            producer_strides: w.producer_strides,
        };
        DepEdge {
            pred: w.pred,
            succ: w.succ,
            arg: w.arg,
            source: w.source,
            flags: w.flags,
            tensor_id: w.tensor_id,
            geometry: (!g.is_empty()).then(|| Box::new(g)),
        }
    }
}

impl From<DepEdge> for EdgeWire {
    fn from(e: DepEdge) -> Self {
        let g = e.geometry.map(|g| *g).unwrap_or_default();
        EdgeWire {
            pred: e.pred,
            succ: e.succ,
            arg: e.arg,
            source: e.source,
            flags: e.flags,
            tensor_id: e.tensor_id,
            consumer_dtype: g.consumer_dtype,
            consumer_shape: g.consumer_shape,
            consumer_start_offset: g.consumer_start_offset,
            consumer_strides: g.consumer_strides,
            overlap: g.overlap,
            producer_dtype: g.producer_dtype,
            producer_shape: g.producer_shape,
            producer_start_offset: g.producer_start_offset,
            producer_strides: g.producer_strides,
        }
    }
}

impl DepEdge {
    /// An explicit edge.
    pub fn explicit(pred: u64, succ: u64) -> Self {
        Self { pred, succ, source: EdgeSource::Explicit, ..Default::default() }
    }

    /// The edge's geometry, added (empty) when it has none.
    pub fn geometry_mut(&mut self) -> &mut EdgeGeometry {
        self.geometry.get_or_insert_with(Default::default)
    }
}

/// The file's top level (`tasks`, `tensors`, `edges`, then ferry's `dfx`), each array streamed
/// from the model.
#[cfg(test)]
struct FileOut<'a, 't> {
    graph: &'a DepsGraph,
    dfx: &'a LossAccounting,
    tick: &'a Ticker<'t>,
}

#[cfg(test)]
impl Serialize for FileOut<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (g, tick) = (self.graph, self.tick);
        let mut st = s.serialize_struct("FileOut", 4)?;
        let tasks: Vec<DepTask> = g.tasks.iter().map(Cow::into_owned).collect();
        st.serialize_field("tasks", &TickSeq { items: &tasks, f: same, tick })?;
        // Tensors and edges are derived from the DepGen records: no ticks (see
        // `RunModel::record_count`).
        st.serialize_field("tensors", &g.tensors)?;
        st.serialize_field("edges", &g.edges)?;
        st.serialize_field("dfx", self.dfx)?;
        st.end()
    }
}

#[derive(Deserialize)]
struct FileIn {
    #[serde(flatten)]
    graph: DepsGraph,
    #[serde(default)]
    dfx: LossAccounting,
}

/// Writes `deps.json` to `w`.
///
/// # Errors
///
/// [`OutputError::Json`] when writing fails.
pub fn write_deps<W: Write>(w: W, g: &DepsGraph, loss: &LossAccounting) -> Result<(), OutputError> {
    write_deps_ticked(w, g, loss, &Ticker::silent())
}

/// [`write_deps`], one tick per task.
pub(crate) fn write_deps_ticked<W: Write>(
    mut w: W,
    g: &DepsGraph,
    loss: &LossAccounting,
    tick: &Ticker<'_>,
) -> Result<(), OutputError> {
    let io = OutputError::io(DEPS_FILE);
    let mut j = Json::new();
    j.raw(b"{\"tasks\":");
    j.records(&mut w, g.tasks.iter(), tick, |j, t| put_task(j, &t)).map_err(&io)?;
    // Tensors and edges are derived from the DepGen records: no ticks (see
    // `RunModel::record_count`).
    let derived = Ticker::silent();
    j.raw(b",\"tensors\":");
    j.records(&mut w, &g.tensors, &derived, put_tensor).map_err(&io)?;
    j.raw(b",\"edges\":");
    j.records(&mut w, &g.edges, &derived, put_edge).map_err(&io)?;
    j.raw(b",\"dfx\":");
    j.serde(loss).map_err(OutputError::json(DEPS_FILE))?;
    j.raw(b"}");
    j.finish_into(&mut w).map_err(&io)
}

/// One task's object, field for field what `DepTask`'s `Serialize` writes.
fn put_task(j: &mut Json, t: &DepTask) {
    j.raw(b"{\"task_id\":");
    j.u64_str(t.task_id);
    j.raw(b",\"scope\":");
    j.str(&t.scope);
    j.raw(b",\"kernel_ids\":");
    j.i64s(t.kernel_ids.iter().map(|&k| i64::from(k)));
    j.raw(b",\"block_num\":");
    j.u64(t.block_num.into());
    j.raw(b",\"args\":");
    j.list(&t.args, |j, a| {
        j.raw(b"{\"idx\":");
        j.u64(a.idx.into());
        j.raw(b",\"type\":");
        j.str(&a.role);
        if let Some(id) = a.tensor_id {
            j.raw(b",\"tensor_id\":");
            j.u64_str(id);
        }
        if !a.dtype.is_empty() {
            j.raw(b",\"dtype\":");
            j.str(&a.dtype);
        }
        j.raw(b",\"shape\":");
        j.u64s(a.shape.iter().copied());
        j.raw(b",\"start_offset\":");
        j.u64_str(a.start_offset);
        j.raw(b",\"strides\":");
        j.u64s(a.strides.iter().copied());
        j.raw(b"}");
    });
    j.raw(b"}");
}

/// One tensor's object, as `DepTensor`'s `Serialize` writes it.
fn put_tensor(j: &mut Json, t: &DepTensor) {
    j.raw(b"{\"tensor_id\":");
    j.u64_str(t.tensor_id);
    j.raw(b",\"buffer_addr\":");
    j.u64_str(t.buffer_addr);
    j.raw(b",\"version\":");
    j.u64(t.version.into());
    j.raw(b",\"dtype\":");
    j.str(&t.dtype);
    j.raw(b",\"buffer_numel\":");
    j.u64_str(t.buffer_numel);
    j.raw(b"}");
}

/// `,"key":"value"` when `v` is set.
fn opt_str(j: &mut Json, key: &[u8], v: &Option<String>) {
    if let Some(s) = v {
        j.raw(key);
        j.str(s);
    }
}

/// `,"key":"n"` (a u64 as a string) when `v` is set.
fn opt_u64(j: &mut Json, key: &[u8], v: Option<u64>) {
    if let Some(v) = v {
        j.raw(key);
        j.u64_str(v);
    }
}

/// `,"key":[…]` when `v` is set.
fn opt_list(j: &mut Json, key: &[u8], v: &Option<Vec<u64>>) {
    if let Some(l) = v {
        j.raw(key);
        j.u64s(l.iter().copied());
    }
}

/// One edge's object, as `DepEdge`'s `Serialize` writes it (absent options left out).
fn put_edge(j: &mut Json, e: &DepEdge) {
    j.raw(b"{\"pred\":");
    j.u64_str(e.pred);
    j.raw(b",\"succ\":");
    j.u64_str(e.succ);
    j.raw(b",\"arg\":");
    j.u64(e.arg.into());
    j.raw(match e.source {
        EdgeSource::Explicit => b",\"source\":\"explicit\",\"flags\":",
        EdgeSource::Creator => b",\"source\":\"creator\",\"flags\":",
        EdgeSource::Tensormap => b",\"source\":\"tensormap\",\"flags\":",
    });
    j.list(&e.flags, |j, f| j.str(f));
    opt_u64(j, b",\"tensor_id\":", e.tensor_id);
    if let Some(g) = e.geometry.as_deref() {
        put_geometry(j, g);
    }
    j.raw(b"}");
}

/// The keys of `g` that are set, in the file's order.
fn put_geometry(j: &mut Json, g: &EdgeGeometry) {
    opt_str(j, b",\"consumer_dtype\":", &g.consumer_dtype);
    opt_list(j, b",\"consumer_shape\":", &g.consumer_shape);
    opt_u64(j, b",\"consumer_start_offset\":", g.consumer_start_offset);
    opt_list(j, b",\"consumer_strides\":", &g.consumer_strides);
    opt_str(j, b",\"overlap\":", &g.overlap);
    opt_str(j, b",\"producer_dtype\":", &g.producer_dtype);
    opt_list(j, b",\"producer_shape\":", &g.producer_shape);
    opt_u64(j, b",\"producer_start_offset\":", g.producer_start_offset);
    opt_list(j, b",\"producer_strides\":", &g.producer_strides);
}

/// Reads `deps.json` (the original's too).
///
/// # Errors
///
/// [`OutputError::Json`] on malformed JSON or fields.
pub fn read_deps<R: Read>(r: R) -> Result<(DepsGraph, LossAccounting), OutputError> {
    let f: FileIn = serde_json::from_reader(r).map_err(OutputError::json(DEPS_FILE))?;
    super::model::check_loss(&f.dfx, DEPS_FILE)?;
    Ok((f.graph, f.dfx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_spec_example_with_string_u64s() {
        let text = r#"{"tasks": [{"task_id": "4294967296", "scope": "auto", "kernel_ids": [7,-1,-1],
            "block_num": 4, "args": [{"idx": 0, "type": "INPUT", "tensor_id": "1345",
            "dtype": "FLOAT32", "shape": [16384], "start_offset": "0", "strides": [1]}]}],
          "tensors": [{"tensor_id": "1345", "buffer_addr": "29204938752", "version": 0,
              "dtype": "FLOAT32", "buffer_numel": "16384"}],
          "edges": [{"pred": "0", "succ": "4294967296", "arg": 0, "source": "creator",
            "flags": ["wait", "retain"], "tensor_id": "1345", "consumer_dtype": "FLOAT32",
            "consumer_shape": [16384], "consumer_start_offset": "0", "consumer_strides": [1]}]}"#;
        let (g, _) = read_deps(text.as_bytes()).unwrap();
        assert_eq!(g.tasks.get(0).unwrap().task_id, 1 << 32);
        assert_eq!(g.tensors[0].buffer_addr, 29_204_938_752);
        assert_eq!(g.edges[0].source, EdgeSource::Creator);
        let mut out = Vec::new();
        write_deps(&mut out, &g, &LossAccounting::default()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["tasks"][0]["task_id"], "4294967296");
        assert_eq!(v["edges"][0]["consumer_start_offset"], "0");
        assert!(v["edges"][0].get("overlap").is_none());
        assert_eq!(read_deps(&out[..]).unwrap().0, g);
    }

    fn any_text() -> impl proptest::strategy::Strategy<Value = String> {
        "[a-z\"\\\\\u{1}\u{e9}]{0,5}"
    }

    fn any_list() -> impl proptest::strategy::Strategy<Value = Vec<u64>> {
        proptest::collection::vec(proptest::num::u64::ANY, 0..4)
    }

    fn any_arg() -> impl proptest::strategy::Strategy<Value = DepArg> {
        use proptest::prelude::*;
        (any::<u32>(), any_text(), proptest::option::of(any::<u64>()), any_text()).prop_flat_map(
            |(idx, role, tensor_id, dtype)| {
                (any_list(), any::<u64>(), any_list()).prop_map(move |(sh, off, st)| DepArg {
                    idx,
                    role: role.clone().into(),
                    tensor_id,
                    dtype: dtype.clone().into(),
                    shape: sh.into_iter().collect(),
                    start_offset: off,
                    strides: st.into_iter().collect(),
                })
            },
        )
    }

    fn any_edge() -> impl proptest::strategy::Strategy<Value = DepEdge> {
        use proptest::option::of;
        use proptest::prelude::*;
        let source = prop_oneof![
            Just(EdgeSource::Explicit),
            Just(EdgeSource::Creator),
            Just(EdgeSource::Tensormap)
        ];
        (
            (any::<u64>(), any::<u64>(), any::<u32>(), source),
            (proptest::collection::vec(any_text(), 0..3), of(any::<u64>()), of(any_text())),
            (of(any_list()), of(any::<u64>()), of(any_list()), of(any_text())),
            (of(any_text()), of(any_list()), of(any::<u64>()), of(any_list())),
        )
            .prop_map(|(a, b, c, d)| {
                // Through the JSON object's own shape: an edge whose geometry has no field set
                // has none, as reading it back gives.
                DepEdge::from(EdgeWire {
                    pred: a.0,
                    succ: a.1,
                    arg: a.2,
                    source: a.3,
                    flags: b.0,
                    tensor_id: b.1,
                    consumer_dtype: b.2,
                    consumer_shape: c.0,
                    consumer_start_offset: c.1,
                    consumer_strides: c.2,
                    overlap: c.3,
                    producer_dtype: d.0,
                    producer_shape: d.1,
                    producer_start_offset: d.2,
                    producer_strides: d.3,
                })
            })
    }

    proptest::proptest! {
        /// The hand-written file is byte for byte what serde_json writes for it.
        #[test]
        fn the_written_file_is_serde_jsons(
            tasks in proptest::collection::vec(
                (proptest::num::u64::ANY, any_text(), proptest::array::uniform3(proptest::num::i32::ANY),
                 proptest::num::u32::ANY, proptest::collection::vec(any_arg(), 0..4)),
                0..5,
            ),
            tensors in proptest::collection::vec(
                (proptest::num::u64::ANY, proptest::num::u64::ANY, proptest::num::u32::ANY,
                 any_text(), proptest::num::u64::ANY),
                0..4,
            ),
            edges in proptest::collection::vec(any_edge(), 0..6),
        ) {
            let g = DepsGraph {
                tasks: tasks
                    .into_iter()
                    .map(|(task_id, scope, kernel_ids, block_num, args)| DepTask {
                        task_id, scope: scope.into(), kernel_ids, block_num, args,
                    })
                    .collect(),
                tensors: tensors
                    .into_iter()
                    .map(|(tensor_id, buffer_addr, version, dtype, buffer_numel)| DepTensor {
                        tensor_id, buffer_addr, version, dtype: dtype.into(), buffer_numel,
                    })
                    .collect(),
                edges,
            };
            let loss = LossAccounting::default();
            let mut got = Vec::new();
            write_deps(&mut got, &g, &loss).unwrap();
            let tick = Ticker::silent();
            let want = serde_json::to_vec(&FileOut { graph: &g, dfx: &loss, tick: &tick }).unwrap();
            // Edges read back as written, geometry or none.
            proptest::prop_assert_eq!(&read_deps(&got[..]).unwrap().0.edges, &g.edges);
            proptest::prop_assert_eq!(String::from_utf8(got).unwrap(), String::from_utf8(want).unwrap());
        }
    }

    #[test]
    fn an_edge_keeps_its_geometry_apart_and_only_when_it_has_one() {
        // Most edges have no geometry: they stay small.
        assert!(size_of::<DepEdge>() <= 96, "{} bytes", size_of::<DepEdge>());
        let text = r#"{"tasks": [], "tensors": [], "edges": [
            {"pred": "1", "succ": "2", "arg": 0, "source": "tensormap"},
            {"pred": "1", "succ": "3", "arg": 1, "source": "tensormap", "overlap": "covered",
             "producer_strides": [4, 1]}]}"#;
        let (g, _) = read_deps(text.as_bytes()).unwrap();
        assert_eq!(g.edges[0].geometry, None);
        let geo = g.edges[1].geometry.as_deref().unwrap();
        assert_eq!(geo.overlap.as_deref(), Some("covered"));
        assert_eq!(geo.producer_strides.as_deref(), Some(&[4, 1][..]));
        assert_eq!(geo.consumer_dtype, None);
        // An empty geometry writes as none, and reads back as none.
        let mut e = DepEdge::explicit(1, 2);
        let plain = serde_json::to_string(&e).unwrap();
        e.geometry_mut();
        assert_eq!(serde_json::to_string(&e).unwrap(), plain);
        let graph = |e: DepEdge| DepsGraph { edges: vec![e], ..Default::default() };
        let written = |e: DepEdge| {
            let mut out = Vec::new();
            write_deps(&mut out, &graph(e), &LossAccounting::default()).unwrap();
            out
        };
        assert_eq!(written(e.clone()), written(DepEdge::explicit(1, 2)));
        let back = read_deps(&written(e)[..]).unwrap().0;
        assert_eq!(back.edges, [DepEdge::explicit(1, 2)]);
        e = DepEdge::explicit(1, 2);
        e.geometry_mut().consumer_start_offset = Some(0);
        let back = read_deps(&written(e.clone())[..]).unwrap().0;
        assert_eq!(back.edges, [e]);
    }

    #[test]
    fn a_number_where_a_string_u64_belongs_is_rejected() {
        let text = r#"{"tasks": [], "tensors": [], "edges": [{"pred": 0, "succ": "1", "arg": 0,
            "source": "explicit"}]}"#;
        assert!(matches!(read_deps(text.as_bytes()), Err(OutputError::Json { .. })));
    }
}
