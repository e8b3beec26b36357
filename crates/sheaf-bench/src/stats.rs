//! Small statistics helpers: timing, medians and latency percentiles.
//!
//! Percentiles use the nearest-rank method on the sorted samples. Nothing
//! here knows about engines or reports.

use std::time::{Duration, Instant};

use crate::engines::Result;

/// Runs `f` once and returns how long it took.
pub fn time<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, Duration)> {
    let start = Instant::now();
    let out = f()?;
    Ok((out, start.elapsed()))
}

/// `count` operations in `elapsed`, per second.
pub fn per_sec(count: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return f64::INFINITY;
    }
    count as f64 / secs
}

/// Median of `values` (mean of the two middle ones for an even count).
///
/// # Panics
/// Panics on an empty slice.
pub fn median(values: &[f64]) -> f64 {
    assert!(!values.is_empty(), "median of no values");
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// Latency samples, reported as percentiles in microseconds.
#[derive(Debug, Default, Clone)]
pub struct Latencies {
    samples_ns: Vec<u64>,
    sorted: bool,
}

impl Latencies {
    /// An empty set with room for `n` samples.
    pub fn with_capacity(n: usize) -> Self {
        Latencies {
            samples_ns: Vec::with_capacity(n),
            sorted: true,
        }
    }

    /// Adds one sample.
    pub fn push(&mut self, d: Duration) {
        self.samples_ns
            .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.sorted = false;
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.samples_ns.len()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.samples_ns.is_empty()
    }

    /// Sum of all samples.
    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.samples_ns.iter().sum())
    }

    /// The `q`-quantile (0 < q <= 1) in microseconds, nearest rank.
    ///
    /// # Panics
    /// Panics when there are no samples or `q` is out of range.
    pub fn percentile_us(&mut self, q: f64) -> f64 {
        assert!(!self.samples_ns.is_empty(), "percentile of no samples");
        assert!(q > 0.0 && q <= 1.0, "quantile out of range: {q}");
        if !self.sorted {
            self.samples_ns.sort_unstable();
            self.sorted = true;
        }
        let n = self.samples_ns.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        self.samples_ns[rank - 1] as f64 / 1_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn percentiles_nearest_rank() {
        let mut l = Latencies::with_capacity(100);
        for us in 1..=100 {
            l.push(Duration::from_micros(us));
        }
        assert_eq!(l.percentile_us(0.5), 50.0);
        assert_eq!(l.percentile_us(0.95), 95.0);
        assert_eq!(l.percentile_us(0.99), 99.0);
        assert_eq!(l.percentile_us(1.0), 100.0);
        assert_eq!(l.total(), Duration::from_micros(5050));
    }

    #[test]
    fn per_sec_counts() {
        assert_eq!(per_sec(10, Duration::from_secs(2)), 5.0);
    }
}
