//! `name_map_<case>.json` (docs/dfx.md; the original's profiling name map): the names
//! the original tools (`swimlane_converter --func-names`, `critical_path`, `deps_to_graph`) give
//! the kernels, written beside `chip_swimlane_records.json`.
//!
//! ```json
//! {"level": 2, "orchestrator_name": "vector",
//!  "callable_id_to_name": {"0": "add", "1": "mul", "2": "scale"}}
//! ```
//!
//! `level` is the level the mapping describes: 2, an orchestration and its in-core kernels,
//! whose callable ids are the `func_id`s of the swimlane, `deps.json` `kernel_ids` and
//! `pmu.csv`. `orchestrator_name` is the callable's name (`null` when unknown);
//! `callable_id_to_name` maps each `func_id` (a JSON string) to the kernel's name. Without it
//! the converter labels kernels `func_<id>_<letter>`.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use super::model::RunModel;
use super::OutputError;

/// Prefix of the file name; the case name and `.json` follow.
pub const NAME_MAP_PREFIX: &str = "name_map_";
/// The level a ferry run's name map describes (orchestration + in-core kernels).
pub const NAME_MAP_LEVEL: u32 = 2;
/// The progress label ([`WriteProgress::file`](super::WriteProgress)) of a name map.
pub const NAME_MAP_LABEL: &str = "name_map_<case>.json";
/// Case name used when a run has none.
pub const DEFAULT_CASE: &str = "run";

/// The name map's content.
///
/// # Examples
/// ```
/// use ferry_profile::{name_map_file, NameMap};
/// assert_eq!(name_map_file("paged-attention"), "name_map_paged-attention.json");
/// let m: NameMap = serde_json::from_str(
///     r#"{"level": 2, "orchestrator_name": null, "callable_id_to_name": {"7": "qk"}}"#).unwrap();
/// assert_eq!(m.name_of(7), Some("qk"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameMap {
    /// The level the mapping describes ([`NAME_MAP_LEVEL`]).
    pub level: u32,
    /// Display name of the orchestrator at this level.
    pub orchestrator_name: Option<String>,
    /// Next-level-down callable id (`func_id`, as a string) → name.
    pub callable_id_to_name: BTreeMap<String, String>,
}

impl NameMap {
    /// The map of `run`: its kernel names and its case as the orchestrator's name.
    pub fn of_run(run: &RunModel) -> Self {
        NameMap {
            level: NAME_MAP_LEVEL,
            orchestrator_name: run.meta.case.clone(),
            callable_id_to_name: run
                .kernels
                .iter()
                .filter(|(id, _)| **id >= 0)
                .map(|(id, n)| (id.to_string(), n.clone()))
                .collect(),
        }
    }

    /// The name of `func_id`, if mapped.
    pub fn name_of(&self, func_id: i32) -> Option<&str> {
        self.callable_id_to_name.get(&func_id.to_string()).map(String::as_str)
    }

    /// The mapping as kernel names by `func_id` (entries whose id is not an integer skipped).
    pub fn kernels(&self) -> BTreeMap<i32, String> {
        self.callable_id_to_name
            .iter()
            .filter_map(|(k, v)| k.parse::<i32>().ok().map(|k| (k, v.clone())))
            .collect()
    }
}

/// `name_map_<case>.json`, with every character outside `[A-Za-z0-9._-]` of `case` replaced by
/// `_` (so a case name never leaves the directory).
pub fn name_map_file(case: &str) -> String {
    let clean: String = case
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' })
        .collect();
    // Behind the prefix no name is `.` or `..`, and no `/` is left: the file stays in the
    // directory.
    let clean = if clean.is_empty() { "_".to_string() } else { clean };
    format!("{NAME_MAP_PREFIX}{clean}.json")
}

/// Whether `file_name` is a name map's (`name_map_*.json`).
pub fn is_name_map_file(file_name: &str) -> bool {
    file_name.len() > NAME_MAP_PREFIX.len() + 5
        && file_name.starts_with(NAME_MAP_PREFIX)
        && file_name.ends_with(".json")
}

/// Writes `m` as JSON to `w`.
///
/// # Errors
/// [`OutputError::Json`] when writing fails.
pub fn write_name_map<W: Write>(w: W, m: &NameMap) -> Result<(), OutputError> {
    serde_json::to_writer_pretty(w, m).map_err(OutputError::json("name_map"))
}

/// Reads a name map (the original's too).
///
/// # Errors
/// [`OutputError::Json`] on malformed JSON or missing fields.
pub fn read_name_map<R: Read>(r: R) -> Result<NameMap, OutputError> {
    serde_json::from_reader(r).map_err(OutputError::json("name_map"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_stay_in_the_directory() {
        assert_eq!(name_map_file("vector"), "name_map_vector.json");
        assert_eq!(name_map_file("../x y"), "name_map_.._x_y.json");
        assert_eq!(name_map_file("a/b\\c"), "name_map_a_b_c.json");
        assert_eq!(name_map_file(""), "name_map__.json");
        assert!(is_name_map_file(&name_map_file("storm")));
        assert!(!is_name_map_file("name_map_.json") && !is_name_map_file("deps.json"));
    }

    #[test]
    fn round_trips_and_maps_ids() {
        let mut run = RunModel::default();
        run.kernels.insert(0, "add".into());
        run.kernels.insert(12, "attn".into());
        run.kernels.insert(-1, "unknown".into());
        run.meta.case = Some("vector".into());
        let m = NameMap::of_run(&run);
        assert_eq!(m.name_of(12), Some("attn"));
        assert_eq!(m.name_of(-1), None);
        let mut out = Vec::new();
        write_name_map(&mut out, &m).unwrap();
        let back = read_name_map(&out[..]).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.kernels().len(), 2);
        assert!(read_name_map(&br#"{"level": 2}"#[..]).is_err());
    }
}
