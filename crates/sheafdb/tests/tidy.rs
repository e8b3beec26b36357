//! Tidy checks over the source tree (issue 10): the module dependency graph
//! is the one written down here, and every source file opens with a `//!`
//! doc.
//!
//! `ALLOWED` is the code map as data: module → the modules it may name
//! through `crate::…` paths. A new edge fails the test until it is added
//! here (and to ARCHITECTURE.md) on purpose. `LAYERS` is the intended layering
//! (storage ← format ← pager ← btree ← buffer ← txn state ← table ← db, with wal
//! beside); every edge of `ALLOWED` must point to a lower layer.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Module → modules it may depend on (besides itself).
const ALLOWED: &[(&str, &[&str])] = &[
    ("types", &[]),
    ("lock_rank", &[]),
    ("error", &["types"]),
    ("storage", &[]),
    ("format", &["error", "types"]),
    ("pager", &["error", "format", "storage", "types"]),
    ("btree", &["error", "format", "types"]),
    ("wal", &["error", "format", "lock_rank", "storage", "types"]),
    ("buffer", &["btree", "error", "types"]),
    (
        "txn",
        &[
            "btree",
            "buffer",
            "error",
            "format",
            "lock_rank",
            "pager",
            "types",
            "wal",
        ],
    ),
    (
        "table",
        &["btree", "buffer", "error", "txn", "types", "wal"],
    ),
    ("testing", &["format", "types", "wal"]),
    // The fuzz targets' entry points: the decoders and the whole engine.
    (
        "fuzzing",
        &[
            "btree", "db", "error", "format", "pager", "storage", "table", "txn", "types", "wal",
        ],
    ),
    (
        "db",
        &[
            "btree",
            "error",
            "format",
            "lock_rank",
            "pager",
            "storage",
            "table",
            "txn",
            "types",
            "wal",
        ],
    ),
    (
        "lib",
        &[
            "btree",
            "db",
            "error",
            "format",
            "lock_rank",
            "pager",
            "storage",
            "table",
            "testing",
            "txn",
            "types",
            "wal",
        ],
    ),
];

/// The layers, lowest first (storage ← format ← pager ← btree ← buffer ← txn state
/// ← table ← db, with wal beside): a module may only depend on modules of
/// a lower layer, so the code map has no cycle and no back edge.
const LAYERS: &[&[&str]] = &[
    &["types", "storage", "lock_rank"],
    &["error"],
    &["format"],
    &["pager", "btree", "wal"],
    &["buffer"],
    &["txn", "testing"],
    &["table"],
    &["db"],
    &["fuzzing"],
    &["lib"],
];

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| panic!("module {module} is in no layer"))
}

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

/// Top-level modules named through `crate::name` (or a group
/// `crate::{a::…, b}`) in `text`, with line comments skipped. A
/// `super::super` path, which could reach another top-level module
/// unseen, is reported as the pseudo-module `super::super`.
fn crate_refs(text: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        if code.contains("super::super") {
            refs.insert("super::super".to_string());
        }
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or("");
                refs.extend(inner.split(',').filter_map(|part| first_ident(part.trim())));
            } else if let Some(name) = first_ident(rest) {
                refs.insert(name);
            }
        }
    }
    refs
}

/// The identifier `s` starts with, if any.
fn first_ident(s: &str) -> Option<String> {
    let name: String = s
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// Single items a module may use from a module the code map keeps it
/// from: `btree` takes the CPU prefetch hint and `format` the counted page
/// runs from `storage` (which holds the crate's `unsafe` code), and
/// nothing else of it.
const ALLOWED_ITEMS: &[(&str, &str)] = &[
    ("btree", "crate::storage::hint::prefetch"),
    ("format", "crate::storage::run"),
];

fn actual_edges() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let mut text = fs::read_to_string(&f).expect("read source");
        let m = module_of(&f);
        for (module, item) in ALLOWED_ITEMS {
            if m == *module {
                text = text.replace(item, "");
            }
        }
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
}

#[test]
fn the_code_map_only_points_down_the_layers() {
    for (from, tos) in ALLOWED {
        for to in *tos {
            assert!(
                layer_of(to) < layer_of(from),
                "{from} -> {to} goes against the layering"
            );
        }
    }
    assert_eq!(
        ALLOWED.len(),
        LAYERS.iter().map(|l| l.len()).sum::<usize>(),
        "every module of the code map is in exactly one layer"
    );
}

#[test]
fn the_checker_sees_an_added_edge() {
    let refs = crate_refs(
        "use crate::db::DbShared;\n// crate::wal in a comment\nlet x = crate::pager::Pager::new();\n\
         use crate::{table::Table, types};\nlet y = super::super::btree::get();",
    );
    assert_eq!(
        refs,
        ["db", "pager", "super::super", "table", "types"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    // An edge the code map does not allow is reported.
    let allowed: BTreeSet<&str> = ["error", "types"].into_iter().collect();
    let extra: Vec<String> = refs
        .into_iter()
        .filter(|r| !allowed.contains(r.as_str()))
        .collect();
    assert_eq!(extra, ["db", "pager", "super::super", "table"]);
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

/// Non-test code of `file`: everything before its test module.
fn non_test_code(text: &str) -> &str {
    let cut = ["#[cfg(test)]\n#[allow(", "#[cfg(test)]\nmod tests {"]
        .iter()
        .filter_map(|m| text.find(m))
        .min();
    cut.map_or(text, |i| &text[..i])
}

/// Assertions per 100 non-blank, non-comment lines of non-test code.
fn assertion_density(paths: &[PathBuf]) -> (usize, usize) {
    let (mut asserts, mut lines) = (0, 0);
    for p in paths {
        let text = fs::read_to_string(p).expect("read source");
        let code = non_test_code(&text);
        lines += code
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.trim().starts_with("//"))
            .count();
        for m in ["assert!(", "assert_eq!(", "assert_ne!("] {
            asserts += code.matches(m).count();
        }
    }
    (asserts, lines)
}

/// Issue 10: the engine's core keeps at least 3 assertions per 100 lines
/// (each checks one condition; `debug_assert!` counts).
#[test]
fn core_modules_keep_their_assertion_density() {
    let src = src_dir();
    let groups: [(&str, Vec<PathBuf>); 4] = [
        ("pager", dir_files(&src.join("pager"))),
        ("btree", dir_files(&src.join("btree"))),
        ("wal", dir_files(&src.join("wal"))),
        ("checkpoint", vec![src.join("db/checkpoint.rs")]),
    ];
    for (name, files) in groups {
        let (asserts, lines) = assertion_density(&files);
        assert!(
            asserts * 100 >= 3 * lines,
            "{name}: {asserts} assertions in {lines} lines, below 3 per 100"
        );
    }
}

fn dir_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    rust_files(dir, &mut out);
    out.retain(|p| p.file_name().is_some_and(|n| n != "tests.rs"));
    out
}

/// Issue 10: the byte parsers deny indexing, slicing, `expect` and
/// `unwrap`, so file contents cannot make them panic.
#[test]
fn byte_parsers_deny_panicking_access() {
    let src = src_dir();
    for f in [
        "format/codec.rs",
        "format/page.rs",
        "format/records.rs",
        "format/superblock.rs",
        "wal/frame.rs",
        "wal/segment.rs",
        "wal/record.rs",
        "wal/replay.rs",
        "btree/node.rs",
    ] {
        let text = fs::read_to_string(src.join(f)).expect("read source");
        assert!(
            text.contains(
                "#![deny(clippy::indexing_slicing, clippy::expect_used, clippy::unwrap_used)]"
            ),
            "{f} does not deny indexing_slicing/expect_used/unwrap_used"
        );
    }
}
