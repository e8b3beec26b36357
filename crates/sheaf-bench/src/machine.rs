//! Machine facts measured in the same run: CPU count and the latency of one
//! 4 KiB write + `fdatasync` in the bench directory — the physical floor of
//! any durable commit on this disk.
//!
//! The probe preallocates its file (written and fsynced once) so the timed
//! syncs flush data only, as a WAL append into preallocated space would.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use crate::engines::Result;
use crate::stats::Latencies;

const BLOCK_BYTES: usize = 4096;
const PREALLOC_BLOCKS: usize = 1024;

/// Logical CPUs available to this process.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Median latency in µs of `iterations` (4 KiB pwrite + fdatasync) in `dir`.
pub fn fsync_p50_us(dir: &Path, iterations: usize) -> Result<f64> {
    assert!(iterations > 0, "fsync probe needs iterations");
    let path = dir.join("fsync-probe.bin");
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)?;
    file.write_all_at(&vec![0u8; BLOCK_BYTES * PREALLOC_BLOCKS], 0)?;
    file.sync_all()?;
    let block = [0xA5u8; BLOCK_BYTES];
    let mut lat = Latencies::with_capacity(iterations);
    for i in 0..iterations {
        let offset = ((i % PREALLOC_BLOCKS) * BLOCK_BYTES) as u64;
        let start = Instant::now();
        file.write_all_at(&block, offset)?;
        file.sync_data()?;
        lat.push(start.elapsed());
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(lat.percentile_us(0.5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_measures_something_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let p50 = fsync_p50_us(dir.path(), 5).unwrap();
        assert!(p50 > 0.0);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(cpus() >= 1);
    }
}
