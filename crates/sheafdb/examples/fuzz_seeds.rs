//! Writes the fuzz targets' seed corpora (`sheafdb::fuzzing::seeds`: pages,
//! superblocks, the metadata blob, system records and WAL records of a real
//! database) to `<dir>/<target>/seed-<n>` (default dir: `fuzz/corpus`).
//!
//! `cargo run -p sheafdb --example fuzz_seeds -- fuzz/corpus`

use std::collections::BTreeMap;
use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (target, data) in sheafdb::fuzzing::seeds() {
        let target = match target {
            "superblock_and_meta" => "superblock_meta",
            t => t,
        };
        let n = counts.entry(target).or_default();
        let sub = dir.join(target);
        std::fs::create_dir_all(&sub)?;
        std::fs::write(sub.join(format!("seed-{n}")), &data)?;
        *n += 1;
    }
    for (t, n) in &counts {
        println!("{t}: {n} seeds");
    }
    Ok(())
}
