//! The repository's documents stand on their own: every relative link in the README and `docs/`
//! resolves to a file of the repository, and no document or source file points a reader at a
//! document the repository does not hold (or speaks of how the project was made).

use std::path::{Path, PathBuf};

/// The workspace root (this crate is `crates/ferry-cli`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

/// Every file under `dir` whose name ends in one of `exts`, skipping build outputs, VCS data and
/// installed test tooling.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if matches!(name.as_str(), "target" | ".git" | "node_modules")
                || name.starts_with('.') && name != ".ci"
            {
                continue;
            }
            files(&p, exts, out);
        } else if exts.iter().any(|x| name.ends_with(x)) || (exts.contains(&"run") && name == "run")
        {
            out.push(p);
        }
    }
}

/// The markdown documents a reader is pointed at: README, CONTRIBUTING, docs/, and the
/// READMEs beside examples and crates.
fn documents() -> Vec<PathBuf> {
    let r = root();
    let mut out = Vec::new();
    files(&r, &[".md"], &mut out);
    out.sort();
    assert!(
        out.iter().any(|p| p.ends_with("README.md")),
        "no README.md found under {}",
        r.display()
    );
    out
}

/// The targets of inline markdown links `[text](target)` in `text`, outside code spans.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        // Drop inline code spans so `a](b)` inside backticks is not taken for a link.
        let mut clean = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                clean.push(c);
            }
        }
        let mut rest = clean.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("").to_string();
            out.push(target);
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_documents_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for target in link_targets(&text) {
            if target.is_empty()
                || target.starts_with('#')
                || target.contains("://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            let path = target.split('#').next().unwrap();
            checked += 1;
            if !doc.parent().unwrap().join(path).exists() {
                broken.push(format!("{}: {target}", doc.strip_prefix(root()).unwrap().display()));
            }
        }
    }
    assert!(checked > 10, "only {checked} relative links found: is the link parser broken?");
    assert!(broken.is_empty(), "links to files that do not exist:\n{}", broken.join("\n"));
}

/// What a document or a doc comment may not say: a path or name of a document the repository
/// does not hold, a section of one, or words about how the project was made.
fn offence(line: &str) -> Option<&'static str> {
    let l = line.to_ascii_lowercase();
    const NAMES: &[(&str, &str)] = &[
        ("shared/", "a path outside the repository"),
        ("seeds/", "a path outside the repository"),
        ("example.invalid", "a placeholder address"),
        ("the seed's", "a requirements document the repository does not hold"),
        ("the seeds'", "a requirements document the repository does not hold"),
        ("design.md", "a design document the repository does not hold"),
        ("style.md", "a style guide the repository does not hold"),
        ("specs/", "a spec the repository does not hold"),
        ("work period", "how the project was made"),
        ("this session", "how the project was made"),
        ("helpers.md", "how the project was made"),
    ];
    for (needle, why) in NAMES {
        if l.contains(needle) {
            return Some(why);
        }
    }
    // "seed 004", "seed-003", "seed 000's": a design document by its number.
    let b = l.as_bytes();
    for sep in ["seed ", "seed-"] {
        for (i, _) in l.match_indices(sep) {
            if b.len() >= i + 8 && b[i + 5..i + 8].iter().all(u8::is_ascii_digit) {
                return Some("a design document the repository does not hold (by number)");
            }
        }
    }
    // "STYLE R34", "(R10)": a rule of a style guide the repository does not hold, by number.
    let o = line.as_bytes();
    for (i, _) in line.match_indices('R') {
        let before = i.checked_sub(1).map(|j| o[j]);
        let digits = o[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        let after = o.get(i + 1 + digits);
        let word = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_');
        if (1..=2).contains(&digits) && !word(before.as_ref()) && !word(after) {
            return Some("a numbered rule of a style guide the repository does not hold");
        }
    }
    // "issue #822", "issue 9": an issue tracker the reader has no link to.
    for (i, _) in l.match_indices("issue ") {
        let at = if b.get(i + 6) == Some(&b'#') { i + 7 } else { i + 6 };
        if b.get(at).is_some_and(u8::is_ascii_digit) {
            return Some("an issue number without a link");
        }
    }
    // "copy.md §3.10", "(spec §4.2)", "(§5.4)": a numbered section of a spec.
    for (i, _) in l.match_indices('§') {
        if l[i + '§'.len_utf8()..].trim_start().starts_with(|c: char| c.is_ascii_digit()) {
            return Some("a section of a document the repository does not hold");
        }
    }
    // "the seventeenth session": numbered work periods.
    for (i, _) in l.match_indices(" session") {
        let word = l[..i].rsplit(|c: char| !c.is_ascii_alphabetic()).next().unwrap_or("");
        if word.ends_with("th") || matches!(word, "first" | "second" | "third") {
            return Some("how the project was made");
        }
    }
    None
}

#[test]
fn no_document_or_source_names_a_file_outside_the_repository() {
    let r = root();
    let mut all = Vec::new();
    files(&r, &[".md", ".rs", ".toml", "run", ".sh", ".py", ".js", ".html"], &mut all);
    let me = Path::new(file!()).file_name().unwrap();
    let mut found = Vec::new();
    for f in all.iter().filter(|f| f.file_name() != Some(me)) {
        let Ok(text) = std::fs::read_to_string(f) else { continue };
        for (n, line) in text.lines().enumerate() {
            if let Some(why) = offence(line) {
                let shown: String = line.trim().chars().take(140).collect();
                found.push(format!(
                    "{}:{}: {why}: {shown}",
                    f.strip_prefix(&r).unwrap().display(),
                    n + 1
                ));
            }
        }
    }
    assert!(all.len() > 100, "only {} files scanned", all.len());
    assert!(
        found.is_empty(),
        "{} lines point outside the repository or at its making:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The README is a front page, not a manual: at most 15 KB.
#[test]
fn the_readme_is_a_front_page() {
    let bytes = std::fs::metadata(root().join("README.md")).expect("README.md").len();
    assert!(bytes <= 15 * 1024, "README.md is {bytes} bytes, over 15 KB: move detail into docs/");
}

#[test]
fn the_offence_rules_catch_what_they_name() {
    assert!(offence("see ../shared/DESIGN.md").is_some());
    assert!(offence("as seed 004's table says").is_some());
    assert!(offence("(issue #822)").is_some());
    assert!(offence("copy.md §3.10").is_some());
    assert!(offence("the replenish thread (spec §4.11)").is_some());
    assert!(offence("its shutdown (§5.4).").is_some());
    assert!(offence("primitives from one place (STYLE R34).").is_some());
    assert!(offence("a pooled stream owns its device (R10)").is_some());
    assert!(offence("// R11: nothing to report to").is_some());
    assert!(offence("RX1, R123, XR10, R10_A and AR9").is_none());
    assert!(offence("repository = \"https://example.invalid/ferry\"").is_some());
    assert!(offence("The seed-003 stall profile").is_some());
    assert!(offence("(the seed's wmb before the tail)").is_some());
    assert!(offence("see shared/specs/dfx.md").is_some());
    assert!(offence("since the seventeenth session").is_some());
    assert!(offence("every figure of issue 9").is_some());
    assert!(offence("removed with the last session on a directory").is_none());
    assert!(offence("a DfxSession starts a session per run").is_none());
    assert!(offence("seed = 42; the seed 4 times").is_none());
    assert_eq!(link_targets("a [x](docs/a.md) `[y](no.md)` [z](b.md#c)"), ["docs/a.md", "b.md#c"]);
}

#[test]
fn the_cli_reference_is_what_the_binary_parses() {
    let _bound = ferry_watchdog::bound("the ferry binary");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
        .arg("cli-reference")
        .env_remove("FERRY_LOG")
        .env_remove("FERRY_DIRECT_IO")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let generated = String::from_utf8(out.stdout).unwrap();
    let committed = std::fs::read_to_string(root().join("docs/cli.md")).unwrap_or_default();
    assert!(generated.contains("## ferry run") && generated.contains("--swimlane"), "{generated}");
    assert!(
        committed.trim_end() == generated.trim_end(),
        "docs/cli.md differs from the options the binary parses; regenerate it with\n  \
         cargo run -p ferry-cli -- cli-reference > docs/cli.md"
    );
}

#[test]
fn the_figures_page_is_what_its_json_renders() {
    let _bound = ferry_watchdog::bound("the ferry binary");
    let dir = root().join("docs/figures");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "docs/figures needs at least two invocations, found {}", files.len());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
        .current_dir(root())
        .arg("figures")
        .args(files.iter().map(|p| p.strip_prefix(root()).unwrap()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let committed = std::fs::read_to_string(root().join("docs/figures.md")).unwrap();
    assert!(
        committed.trim_end() == String::from_utf8_lossy(&out.stdout).trim_end(),
        "docs/figures.md differs from what its JSON renders; regenerate it with\n  \
         cargo run -p ferry-cli -- figures docs/figures/*.json -o docs/figures.md"
    );
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    files(dir, &[".rs"], &mut out);
    out
}

/// The rule table (`docs/design/rules.md`) and the rule-breaking changes (`scripts/rules/`)
/// agree: every rule has a patch that names the rule and at least one test, every test a patch
/// names exists (a `fn` of that name in the named package's target) and is listed in the
/// rule's row, every patch belongs to a rule of the table, and the CI subset names rules.
#[test]
fn every_rule_has_a_breaking_patch_and_a_test_that_exists() {
    let r = root();
    let table = std::fs::read_to_string(r.join("docs/design/rules.md")).expect("rules.md");
    let mut rows: Vec<(String, String)> = Vec::new();
    for line in table.lines() {
        let Some(rest) = line.strip_prefix("| `") else { continue };
        let Some((id, row)) = rest.split_once("` |") else { continue };
        if id.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '-') {
            rows.push((id.to_string(), row.to_string()));
        }
    }
    assert!(!rows.is_empty(), "docs/design/rules.md lists no rule");
    let mut ids: Vec<&str> = rows.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort_unstable();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "a rule ID is listed twice");
    for (id, row) in &rows {
        let patch = r.join(format!("scripts/rules/{id}.patch"));
        let text = std::fs::read_to_string(&patch)
            .unwrap_or_else(|_| panic!("rule {id} has no scripts/rules/{id}.patch"));
        let header: Vec<&str> = text.lines().take_while(|l| !l.starts_with("diff --git")).collect();
        let field = |f: &str| -> Vec<String> {
            header.iter().filter_map(|l| l.strip_prefix(f)).map(|v| v.trim().to_string()).collect()
        };
        assert_eq!(field("Rule:"), std::slice::from_ref(id), "{id}.patch names another rule");
        assert_eq!(field("Breaks:").len(), 1, "{id}.patch has no one-line Breaks:");
        assert!(text.contains("\ndiff --git "), "{id}.patch changes nothing");
        let tests = field("Test:");
        assert!(!tests.is_empty(), "{id}.patch names no test");
        for t in &tests {
            let parts: Vec<&str> = t.split_whitespace().collect();
            let [pkg, target, name] = parts[..] else {
                panic!("{id}.patch: `Test: {t}` is not `<package> <lib|target> <test>`")
            };
            let dir = r.join("crates").join(pkg);
            let sources = match target {
                "lib" => rust_files(&dir.join("src")),
                t => {
                    let main = dir.join("tests").join(format!("{t}.rs"));
                    assert!(main.is_file(), "{id}.patch: {pkg} has no test target {t}");
                    rust_files(&dir.join("tests"))
                }
            };
            let short = name.rsplit("::").next().unwrap_or(name);
            let def = format!("fn {short}(");
            let found =
                sources.iter().any(|f| std::fs::read_to_string(f).is_ok_and(|s| s.contains(&def)));
            assert!(found, "{id}.patch: no test `{short}` in {pkg} {target}");
            assert!(row.contains(short), "{id}: the table's row does not list its test {short}");
        }
    }
    for e in std::fs::read_dir(r.join("scripts/rules")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(id) = name.strip_suffix(".patch") {
            assert!(ids.contains(&id), "scripts/rules/{name} belongs to no rule of the table");
        }
    }
    let ci = std::fs::read_to_string(r.join("scripts/rules/ci.txt")).expect("scripts/rules/ci.txt");
    for id in ci.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        assert!(ids.contains(&id), "scripts/rules/ci.txt names {id}, which the table lacks");
    }
}

/// The public types (`pub struct|enum|trait|union|type Name` at the start of a line) each
/// source text defines, with the crate (`crates/<name>`, `device/<name>`, `examples/<name>`)
/// it belongs to. Aliases of a type of the same name (`pub type X = other::X;`) are
/// re-exports, not definitions.
fn public_types(sources: &[(String, String)]) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut by_name: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (krate, text) in sources {
        for line in text.lines() {
            let l = line.trim_start();
            let Some(rest) = ["pub struct ", "pub enum ", "pub trait ", "pub union ", "pub type "]
                .iter()
                .find_map(|k| l.strip_prefix(k))
            else {
                continue;
            };
            let name: String =
                rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if name.is_empty() || l.starts_with("pub type ") && l.contains(&format!("::{name};")) {
                continue;
            }
            let crates = by_name.entry(name).or_default();
            if !crates.contains(krate) {
                crates.push(krate.clone());
            }
        }
    }
    by_name.retain(|_, c| c.len() > 1);
    by_name
}

/// No public type name is defined in two crates of the workspace (re-exports aside): a reader
/// who meets `RunSummary` knows which one it is. Tests, benches and test fixtures are left out.
#[test]
fn no_public_type_name_is_defined_in_two_crates() {
    let r = root();
    let mut sources = Vec::new();
    for top in ["crates", "device", "examples"] {
        for p in rust_files(&r.join(top)) {
            let rel = p.strip_prefix(&r).unwrap();
            let parts: Vec<_> = rel.components().map(|c| c.as_os_str().to_string_lossy()).collect();
            if parts.iter().any(|c| matches!(&**c, "tests" | "benches" | "fixtures"))
                || parts.last().is_some_and(|f| f == "tests.rs")
            {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            sources.push((format!("{}/{}", parts[0], parts[1]), text));
        }
    }
    assert!(sources.len() > 100, "found only {} source files", sources.len());
    let dups = public_types(&sources);
    assert!(dups.is_empty(), "public type names defined in two crates: {dups:#?}");
}

/// The scan finds a name defined in two crates, and not an alias re-exporting it.
#[test]
fn the_duplicate_scan_tells_a_definition_from_a_re_export() {
    let src = |c: &str, t: &str| (c.to_string(), t.to_string());
    let dups = public_types(&[
        src("crates/a", "pub struct Clock {\n}\npub enum Only {}\n"),
        src("crates/b", "  pub struct Clock(u64);\npub type Only = crate::a::Only;\n"),
        src("crates/b", "pub(crate) struct Hidden;\npub trait Clock {}\n"),
        src("crates/c", "pub type Hidden = u32;\n"),
    ]);
    assert_eq!(dups.len(), 1, "{dups:?}");
    assert_eq!(dups["Clock"], ["crates/a", "crates/b"]);
}
