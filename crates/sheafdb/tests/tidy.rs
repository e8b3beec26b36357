//! Tidy checks over the source tree (issue 10): the module dependency graph
//! is the one written down here, and every source file opens with a `//!`
//! doc.
//!
//! `ALLOWED` is the code map as data: module → the modules it may name
//! through `crate::…` paths. A new edge fails the test until it is added
//! here (and to ARCHITECTURE.md) on purpose. `BACK_EDGES` lists the edges
//! that go against the intended layering (storage ← format ← pager ← btree
//! ← txn state ← table ← db, with wal beside); issue 10 removes them, and
//! the test fails if one of them disappears from the code but not from the
//! list, so the list only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Module → modules it may depend on (besides itself).
const ALLOWED: &[(&str, &[&str])] = &[
    ("types", &[]),
    ("error", &["types"]),
    ("storage", &[]),
    ("format", &["error", "types"]),
    ("pager", &["error", "format", "storage", "types"]),
    ("btree", &["error", "format", "types"]),
    ("wal", &["error", "format", "storage", "types"]),
    (
        "txn",
        &[
            "btree", "db", "error", "format", "pager", "table", "types", "wal",
        ],
    ),
    ("table", &["btree", "error", "txn", "types", "wal"]),
    (
        "db",
        &[
            "btree", "error", "format", "pager", "storage", "txn", "types", "wal",
        ],
    ),
    (
        "lib",
        &[
            "btree", "db", "error", "format", "pager", "storage", "table", "txn", "types", "wal",
        ],
    ),
];

/// Edges against the layering that are still in the code (to remove).
const BACK_EDGES: &[(&str, &str)] = &[("txn", "db"), ("txn", "table")];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`db/open.rs` → `db`).
fn module_of(file: &Path) -> String {
    let rel = file.strip_prefix(src_dir()).expect("under src");
    let first = rel.components().next().expect("non-empty path");
    let name = first.as_os_str().to_string_lossy();
    name.trim_end_matches(".rs").to_string()
}

/// Top-level modules named through `crate::name` in `text`, with comments
/// and string contents ignored well enough for this code base (line
/// comments are skipped).
fn crate_refs(text: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                refs.insert(name);
            }
        }
    }
    refs
}

fn actual_edges() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let text = fs::read_to_string(&f).expect("read source");
        let m = module_of(&f);
        let to = edges.entry(m.clone()).or_default();
        to.extend(crate_refs(&text).into_iter().filter(|t| *t != m));
    }
    edges
}

#[test]
fn module_dependencies_follow_the_code_map() {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(m, to)| (*m, to.iter().copied().collect()))
        .collect();
    let edges = actual_edges();
    let mut bad = Vec::new();
    for (from, tos) in &edges {
        let Some(ok) = allowed.get(from.as_str()) else {
            bad.push(format!("module {from} is not in the code map"));
            continue;
        };
        for to in tos {
            if !ok.contains(to.as_str()) {
                bad.push(format!("{from} -> {to} is not allowed"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "dependency edges against the code map: {bad:#?}"
    );
    for (from, to) in BACK_EDGES {
        let present = edges.get(*from).is_some_and(|t| t.contains(*to));
        assert!(
            present,
            "back edge {from} -> {to} is gone: remove it from BACK_EDGES and ALLOWED"
        );
    }
}

#[test]
fn the_checker_sees_an_added_edge() {
    let refs = crate_refs(
        "use crate::db::DbShared;\n// crate::wal in a comment\nlet x = crate::pager::Pager::new();",
    );
    assert_eq!(
        refs,
        ["db", "pager"].into_iter().map(String::from).collect()
    );
    // An edge the code map does not allow is reported.
    let allowed: BTreeSet<&str> = ["error", "types"].into_iter().collect();
    let extra: Vec<String> = refs
        .into_iter()
        .filter(|r| !allowed.contains(r.as_str()))
        .collect();
    assert_eq!(extra, vec!["db".to_string(), "pager".to_string()]);
}

#[test]
fn every_source_file_has_a_module_doc() {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    let missing: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = fs::read_to_string(f).expect("read source");
            !text.trim_start().starts_with("//!")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(missing.is_empty(), "files without a //! doc: {missing:#?}");
}
