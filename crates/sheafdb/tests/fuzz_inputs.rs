//! The fuzz targets' entry points (`sheafdb::fuzzing`, run coverage-guided
//! by `fuzz/`) on stable, in every test run: on the seed inputs taken from
//! a real database (which must cover every target), on seeded random
//! inputs and mutations of the seeds, and on every input kept in
//! `fuzz/regressions/<target>/` (what the fuzzers once found). None may
//! panic.

use std::collections::BTreeMap;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sheafdb::fuzzing;

const TARGETS: &[&str] = &[
    "page_tree",
    "superblock_and_meta",
    "system_records",
    "commit_record",
    "wal",
    "database",
];

fn run(target: &str, data: &[u8]) {
    match target {
        "page_tree" => fuzzing::page_tree(data),
        "superblock_and_meta" => fuzzing::superblock_and_meta(data),
        "system_records" => fuzzing::system_records(data),
        "commit_record" => fuzzing::commit_record(data),
        "wal" => fuzzing::wal(data),
        "database" => fuzzing::database(data),
        other => panic!("unknown target {other}"),
    }
}

#[test]
fn seeds_cover_every_target_and_pass() {
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for (target, data) in fuzzing::seeds() {
        run(target, &data);
        *per.entry(target).or_default() += 1;
    }
    for t in TARGETS {
        assert!(
            per.get(t).copied().unwrap_or(0) > 0,
            "no seed for {t}: {per:?}"
        );
    }
    eprintln!("seeds per target: {per:?}");
    assert!(per["commit_record"] >= 20, "too few WAL records: {per:?}");
    assert!(
        per["system_records"] >= 4,
        "descriptors and table metas: {per:?}"
    );
}

/// Seeded mutations of the seeds (byte flips, truncations, splices) and
/// plain random inputs. `SHEAF_FUZZ_CASES` raises the count.
#[test]
fn mutated_and_random_inputs_never_panic() {
    let cases: usize = std::env::var("SHEAF_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let seeds = fuzzing::seeds();
    let mut rng = StdRng::seed_from_u64(0xF022);
    for case in 0..cases {
        // Targets in turn, each mutating one of its own seeds.
        let target = TARGETS[case % TARGETS.len()];
        let own: Vec<&Vec<u8>> = (seeds.iter())
            .filter(|(t, _)| *t == target)
            .map(|(_, d)| d)
            .collect();
        let mut data = own[rng.gen_range(0..own.len())].clone();
        match rng.gen_range(0..4) {
            0 if !data.is_empty() => {
                for _ in 0..rng.gen_range(1..8) {
                    let i = rng.gen_range(0..data.len());
                    data[i] ^= 1 << rng.gen_range(0..8);
                }
            }
            1 if !data.is_empty() => data.truncate(rng.gen_range(0..data.len())),
            2 => {
                let n = rng.gen_range(0..600);
                data.extend((0..n).map(|_| rng.gen::<u8>()));
            }
            _ => data = (0..rng.gen_range(0..5000)).map(|_| rng.gen()).collect(),
        }
        let ctx = format!("case {case} target {target}");
        let r = std::panic::catch_unwind(|| run(target, &data));
        if r.is_err() {
            let path = std::env::temp_dir().join(format!("sheaf-fuzz-{target}-{case}"));
            let _ = std::fs::write(&path, &data);
            eprintln!("{ctx}: input written to {}", path.display());
        }
        assert!(r.is_ok(), "{ctx} panicked; input {} bytes", data.len());
    }
}

/// Inputs the fuzzers found once, kept so they stay fixed.
#[test]
fn kept_regressions_pass() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    let mut ran = 0;
    for t in TARGETS {
        let Ok(entries) = std::fs::read_dir(dir.join(t)) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            run(t, &std::fs::read(&path).unwrap());
            ran += 1;
        }
    }
    eprintln!("{ran} kept fuzz regressions");
}
