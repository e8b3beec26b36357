//! Smoke test: the real binary runs `peers --quick` on two engines, exits 0,
//! prints a table and writes JSON of the documented shape with results for
//! every engine.

use std::collections::BTreeSet;
use std::process::Command;

#[test]
fn peers_quick_writes_wellformed_json_for_each_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let json_path = tmp.path().join("peers.json");
    let engines = smoke_engines();
    let out = Command::new(env!("CARGO_BIN_EXE_sheaf-bench"))
        .args(["peers", "--quick", "--fsync-samples", "20", "--engines"])
        .arg(engines.join(","))
        .arg("--json")
        .arg(&json_path)
        .arg("--dir")
        .arg(tmp.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("bulk load"),
        "no table on stdout:\n{stdout}"
    );

    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(doc["suite"], "peers");
    assert!(doc["machine"]["cpus"].as_u64().unwrap() >= 1);
    assert!(doc["machine"]["fsync_p50_us"].as_f64().unwrap() > 0.0);
    let results = doc["results"].as_array().unwrap();
    let mut seen = BTreeSet::new();
    for r in results {
        for field in ["workload", "engine", "metric", "unit"] {
            assert!(r[field].is_string(), "{field} missing in {r}");
        }
        assert!(
            matches!(r["better"].as_str(), Some("higher" | "lower")),
            "{r}"
        );
        assert!(r["value"].is_number() || r["note"].is_string(), "{r}");
        seen.insert(r["engine"].as_str().unwrap().to_string());
    }
    let want: BTreeSet<String> = engines.iter().map(|e| e.to_string()).collect();
    assert_eq!(seen, want);

    // Only the JSON file is left behind: the scratch directory is removed.
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "leftovers in the bench dir");
}

/// sheafdb and one peer when sheafdb is compiled in, else two peers.
fn smoke_engines() -> Vec<&'static str> {
    if cfg!(feature = "sheafdb") {
        vec!["sheafdb", "redb"]
    } else {
        vec!["redb", "sqlite"]
    }
}
