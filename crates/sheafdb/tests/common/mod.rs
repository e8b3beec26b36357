//! Helpers shared by the integration tests: a model of the database
//! (table name → ordered map) and functions to dump and compare.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::Rng;
use sheafdb::storage::sim::SimVfs;
use sheafdb::{Builder, Database, Result, TableDefinition};

/// Every file of a directory by name (data file and WAL segments).
pub type Files = BTreeMap<String, Vec<u8>>;

/// The bytes of every file of `vfs`, for "nothing changed" checks and to
/// rebuild damaged copies.
pub fn files_of(vfs: &SimVfs) -> Files {
    vfs.file_names()
        .into_iter()
        .map(|n| {
            let b = vfs.file_bytes(&n).expect("listed file is readable");
            (n, b)
        })
        .collect()
}

/// Table name → contents.
pub type Model = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

/// Every test table stores raw bytes.
pub fn def(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::new(name)
}

/// Reads every table of the default CF into a model.
pub fn dump(db: &Database) -> Result<Model> {
    dump_snapshot(&db.begin_read()?)
}

/// Reads every table of a snapshot's home CF into a model.
pub fn dump_snapshot(rx: &sheafdb::ReadTransaction) -> Result<Model> {
    let mut model = Model::new();
    for name in rx.list_tables()? {
        model.insert(name.clone(), table_map(&rx.open_table(def(&name))?)?);
    }
    Ok(model)
}

/// Every entry of a table (of a snapshot or a write transaction), checking
/// that `len()` agrees.
pub fn table_map(
    t: &impl sheafdb::ReadableTable<&'static [u8], &'static [u8]>,
) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let mut map = BTreeMap::new();
    for e in t.iter()? {
        let (k, v) = e?;
        map.insert(k.value().to_vec(), v.value().to_vec());
    }
    assert_eq!(t.len()?, map.len() as u64, "len() disagrees with iteration");
    Ok(map)
}

/// Small pages and small extents so tests exercise splits, overflow and
/// extent growth quickly; transactions apply their writes to the trees
/// past 4 MiB per table (the default keeps 64 MiB).
pub fn builder() -> Builder {
    Database::builder()
        .page_size(4096)
        .cache_size_bytes(4 << 20)
        .extent_sizes(16 * 4096, 256 * 4096)
        .wal_segment_bytes(256 * 1024)
        .wal_record_max_bytes(64 * 1024)
        .txn_spill_bytes(4 << 20)
}

/// Opens (creating) `name` on a simulated disk.
pub fn open_sim(vfs: &SimVfs, name: &str) -> Result<Database> {
    builder().create_with_vfs(Arc::new(vfs.clone()), name)
}

/// A random key: mostly short, sometimes long, from a small space so that
/// overwrites and deletes hit existing keys.
pub fn rand_key(rng: &mut StdRng) -> Vec<u8> {
    let n: u32 = rng.gen_range(0..400);
    if rng.gen_bool(0.05) {
        let len = rng.gen_range(0..=1024);
        let mut k = vec![b'L'; len];
        if len > 0 {
            k[len - 1] = (n % 256) as u8;
        }
        k
    } else {
        format!("k{n:05}").into_bytes()
    }
}

/// A random value: mostly small, sometimes overflowing a page.
pub fn rand_value(rng: &mut StdRng) -> Vec<u8> {
    let len = match rng.gen_range(0..100) {
        0..=2 => rng.gen_range(2000..20_000),
        3..=5 => 0,
        _ => rng.gen_range(1..120),
    };
    let b: u8 = rng.gen();
    (0..len).map(|i| b.wrapping_add(i as u8)).collect()
}

/// Applies a random batch of writes to one transaction and the model.
pub fn random_writes(
    tx: &sheafdb::WriteTransaction,
    model: &mut Model,
    rng: &mut StdRng,
    n_ops: usize,
) -> Result<()> {
    for _ in 0..n_ops {
        let table = format!("t{}", rng.gen_range(0..3));
        let mut t = tx.open_table(def(&table))?;
        let m = model.entry(table.clone()).or_default();
        let key = rand_key(rng);
        if rng.gen_bool(0.7) {
            let v = rand_value(rng);
            let old = t.insert(key.as_slice(), v.as_slice())?;
            assert_eq!(old.map(|g| g.value().to_vec()), m.insert(key, v));
        } else {
            let old = t.remove(key.as_slice())?;
            assert_eq!(old.map(|g| g.value().to_vec()), m.remove(&key));
        }
    }
    Ok(())
}

/// Runs `f` on a thread of its own and returns what it returns; a hang
/// (30 s) or a panic fails the calling test instead of blocking it.
pub fn watchdog<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(30)) {
        Ok(r) => r,
        Err(RecvTimeoutError::Timeout) => panic!("{what}: hung"),
        Err(RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
    }
}
