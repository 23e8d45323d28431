//! `scope_stats/scope_names.json`: the names of a run's scope sites (ferry's own file, beside
//! the scope records; the original runtime's tools never read it).
//!
//! A scope record carries its site (`file:line`, what `PTO2_SCOPE` records); what the site is
//! called is host-side knowledge: a workload file's `scope = "diamond"` label, the line the file
//! opens it at. `ferry run --workload` writes the table; `ferry scopes`, `ferry view` and the
//! Perfetto trace label each scope by it. A site the table does not name keeps its `file:line`.
//!
//! ```json
//! {"version": 1, "scopes": [{"site": "workload:8", "name": "diamond", "at": "diamond.toml:30"}]}
//! ```

use std::collections::BTreeMap;
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use super::OutputError;

/// File inside [`SCOPES_DIR`](super::SCOPES_DIR).
pub const SCOPE_NAMES_FILE: &str = "scope_names.json";
/// Schema version written and read.
pub const SCOPE_NAMES_VERSION: u32 = 1;
/// Largest table read (bytes); a larger file is refused before it is read.
pub const MAX_SCOPE_NAMES_BYTES: u64 = 16 << 20;

/// What one scope site is called.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeLabel {
    /// The scope's name (a workload file's `scope = "..."` label).
    pub name: String,
    /// Where its source opens it (`diamond.toml:30`); empty when unknown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub at: String,
}

/// Scope names by site (`file:line`, as [`ScopeRow::site`](super::ScopeRow::site) holds it).
pub type ScopeNames = BTreeMap<String, ScopeLabel>;

#[derive(Serialize, Deserialize)]
struct Entry {
    site: String,
    #[serde(flatten)]
    label: ScopeLabel,
}

#[derive(Serialize, Deserialize)]
struct File {
    version: u32,
    scopes: Vec<Entry>,
}

/// Writes the table to `w`, sites in order.
///
/// # Errors
/// [`OutputError::Json`] when writing fails.
pub fn write_scope_names<W: Write>(w: W, names: &ScopeNames) -> Result<(), OutputError> {
    let f = File {
        version: SCOPE_NAMES_VERSION,
        scopes: names
            .iter()
            .map(|(site, label)| Entry { site: site.clone(), label: label.clone() })
            .collect(),
    };
    serde_json::to_writer_pretty(w, &f).map_err(OutputError::json(SCOPE_NAMES_FILE))
}

/// Reads a table of at most [`MAX_SCOPE_NAMES_BYTES`] from `r`.
///
/// # Errors
/// [`OutputError::Format`] for a larger file, another schema version, malformed JSON or a site
/// named twice; [`OutputError::Io`] when reading fails.
pub fn read_scope_names<R: Read>(r: R) -> Result<ScopeNames, OutputError> {
    let bad = |what: String| OutputError::Format { file: SCOPE_NAMES_FILE.into(), what };
    let mut text = Vec::new();
    r.take(MAX_SCOPE_NAMES_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(OutputError::io(SCOPE_NAMES_FILE))?;
    if text.len() as u64 > MAX_SCOPE_NAMES_BYTES {
        return Err(bad(format!("larger than {MAX_SCOPE_NAMES_BYTES} bytes")));
    }
    let f: File = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    if f.version != SCOPE_NAMES_VERSION {
        return Err(bad(format!("schema version {}, expected {SCOPE_NAMES_VERSION}", f.version)));
    }
    let mut out = ScopeNames::new();
    for e in f.scopes {
        if out.contains_key(&e.site) {
            return Err(bad(format!("site `{}` named twice", e.site)));
        }
        out.insert(e.site, e.label);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_bad_tables() {
        let mut n = ScopeNames::new();
        n.insert(
            "workload:8".into(),
            ScopeLabel { name: "diamond".into(), at: "d.toml:30".into() },
        );
        n.insert("workload:40".into(), ScopeLabel { name: "tail".into(), at: String::new() });
        let mut b = Vec::new();
        write_scope_names(&mut b, &n).unwrap();
        assert_eq!(read_scope_names(&b[..]).unwrap(), n);
        let text = String::from_utf8(b).unwrap();
        let v2 = text.replacen("\"version\": 1", "\"version\": 2", 1);
        let e = read_scope_names(v2.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("schema version 2"), "{e}");
        let twice = r#"{"version": 1, "scopes": [{"site": "a:1", "name": "x"},
            {"site": "a:1", "name": "y"}]}"#;
        let e = read_scope_names(twice.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("named twice"), "{e}");
        let big = vec![b' '; MAX_SCOPE_NAMES_BYTES as usize + 2];
        let e = read_scope_names(&big[..]).unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");
    }
}
