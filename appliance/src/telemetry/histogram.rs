//! A latency histogram the data path records into with two relaxed atomic adds (no lock),
//! exported as a Prometheus histogram and read back as percentiles for the API and UI.
//!
//! Buckets: everything under 1.024 µs, then two buckets per power of two (bounds 1×, 1.5×
//! and 2× of 2^k ns) up to 2^36 ns (≈ 69 s), then overflow. Percentiles interpolate
//! linearly inside a bucket, so they are exact to within half a bucket (≤ 25 %).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// log2 of the first bucket's upper bound in nanoseconds (1.024 µs).
const FIRST_OCTAVE: u32 = 10;
/// log2 (ns) where the overflow bucket starts (≈ 69 s).
const LAST_OCTAVE: u32 = 36;
/// Bucket count: the first, two per octave, the overflow.
pub const BUCKETS: usize = 1 + 2 * (LAST_OCTAVE - FIRST_OCTAVE) as usize + 1;

/// The bucket a duration of `ns` nanoseconds falls in.
fn bucket_of(ns: u64) -> usize {
    if ns < 1 << FIRST_OCTAVE {
        return 0;
    }
    let octave = 63 - ns.leading_zeros();
    if octave >= LAST_OCTAVE {
        return BUCKETS - 1;
    }
    let upper_half = (ns >> (octave - 1)) & 1;
    1 + 2 * (octave - FIRST_OCTAVE) as usize + upper_half as usize
}

/// The bounds `[lower, upper)` of bucket `i` in nanoseconds (overflow: upper = lower).
fn bounds(i: usize) -> (u64, u64) {
    if i == 0 {
        return (0, 1 << FIRST_OCTAVE);
    }
    if i >= BUCKETS - 1 {
        let start = 1u64 << LAST_OCTAVE;
        return (start, start);
    }
    let octave = FIRST_OCTAVE + ((i - 1) / 2) as u32;
    let base = 1u64 << octave;
    let half = base / 2;
    if (i - 1).is_multiple_of(2) {
        (base, base + half)
    } else {
        (base + half, base * 2)
    }
}

#[derive(Debug)]
struct Inner {
    counts: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

/// A shared, lock-free latency histogram (clones record into the same buckets).
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    inner: Arc<Inner>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            inner: Arc::new(Inner {
                counts: std::array::from_fn(|_| AtomicU64::new(0)),
                sum_ns: AtomicU64::new(0),
            }),
        }
    }
}

impl LatencyHistogram {
    /// Records one operation that took `elapsed`.
    pub fn observe(&self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        if let Some(count) = self.inner.counts.get(bucket_of(ns)) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The counts as of now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: self
                .inner
                .counts
                .each_ref()
                .map(|c| c.load(Ordering::Relaxed)),
            sum_ns: self.inner.sum_ns.load(Ordering::Relaxed),
        }
    }
}

/// A histogram's counts at one instant (or the difference of two instants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistogramSnapshot {
    counts: [u64; BUCKETS],
    sum_ns: u64,
}

impl Default for HistogramSnapshot {
    fn default() -> Self {
        HistogramSnapshot {
            counts: [0; BUCKETS],
            sum_ns: 0,
        }
    }
}

impl HistogramSnapshot {
    /// Operations recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, c| a.saturating_add(*c))
    }

    /// What was recorded after `earlier` (for per-interval percentiles).
    pub fn since(&self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: {
                let mut counts = self.counts;
                for (c, e) in counts.iter_mut().zip(earlier.counts) {
                    *c = c.saturating_sub(e);
                }
                counts
            },
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
        }
    }

    /// Adds `other`'s counts (to merge histograms).
    pub fn add(&mut self, other: &HistogramSnapshot) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a = a.saturating_add(*b);
        }
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }

    /// The `q` quantile (0 < q ≤ 1), `None` when nothing was recorded.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as u64;
        let mut below = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            if c > 0 && below + c >= rank {
                let (lo, hi) = bounds(i);
                let within = (rank - below) as f64 / c as f64;
                let ns = lo as f64 + (hi - lo) as f64 * within;
                return Some(Duration::from_nanos(ns as u64));
            }
            below += c;
        }
        None
    }

    /// The quantile in whole microseconds (0 when nothing was recorded), for the API.
    pub fn quantile_us(&self, q: f64) -> u64 {
        self.quantile(q)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }

    /// Mean latency in microseconds (0 when nothing was recorded).
    pub fn mean_us(&self) -> u64 {
        self.sum_ns
            .checked_div(self.count())
            .map_or(0, |ns| ns / 1000)
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let snap = self.snapshot();
        let buckets: Vec<(f64, u64)> = snap
            .counts
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                let upper = if i == BUCKETS - 1 {
                    f64::MAX
                } else {
                    bounds(i).1 as f64 / 1e9
                };
                (upper, c)
            })
            .collect();
        encoder.encode_histogram::<NoLabelSet>(
            snap.sum_ns as f64 / 1e9,
            snap.count(),
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_duration_in_order() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1023), 0);
        assert_eq!(bucket_of(1024), 1);
        assert_eq!(bucket_of(1535), 1);
        assert_eq!(bucket_of(1536), 2);
        assert_eq!(bucket_of(2047), 2);
        assert_eq!(bucket_of(2048), 3);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        let mut last = 0;
        for ns in (0..40)
            .map(|s| 1u64 << s)
            .flat_map(|b| [b, b + b / 3, b * 3 / 2])
        {
            let i = bucket_of(ns);
            assert!(i >= last, "{ns} ns went to bucket {i} after {last}");
            let (lo, hi) = bounds(i);
            assert!(
                ns >= lo && (ns < hi || i == BUCKETS - 1),
                "{ns} not in {lo}..{hi}"
            );
            last = i;
        }
    }

    #[test]
    fn percentiles_land_in_the_right_bucket() {
        let h = LatencyHistogram::default();
        for _ in 0..990 {
            h.observe(Duration::from_micros(100));
        }
        for _ in 0..10 {
            h.observe(Duration::from_millis(50));
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 1000);
        let p50 = s.quantile(0.5).unwrap();
        assert!(
            p50 >= Duration::from_micros(65) && p50 <= Duration::from_micros(131),
            "{p50:?}"
        );
        let p999 = s.quantile(0.999).unwrap();
        assert!(
            p999 >= Duration::from_millis(32) && p999 <= Duration::from_millis(68),
            "{p999:?}"
        );
        assert_eq!(s.mean_us(), (990 * 100 + 10 * 50_000) / 1000);
        assert_eq!(HistogramSnapshot::default().quantile(0.99), None);
    }

    #[test]
    fn differences_isolate_an_interval() {
        let h = LatencyHistogram::default();
        h.observe(Duration::from_secs(1));
        let before = h.snapshot();
        h.observe(Duration::from_micros(10));
        let d = h.snapshot().since(&before);
        assert_eq!(d.count(), 1);
        assert!(d.quantile(1.0).unwrap() < Duration::from_micros(17));
    }

    #[test]
    fn encodes_as_a_prometheus_histogram() {
        let mut registry = prometheus_client::registry::Registry::default();
        let h = LatencyHistogram::default();
        registry.register_with_unit(
            "op_duration",
            "test",
            prometheus_client::registry::Unit::Seconds,
            h.clone(),
        );
        h.observe(Duration::from_micros(3));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        assert!(
            out.contains("# TYPE op_duration_seconds histogram"),
            "{out}"
        );
        assert!(out.contains("op_duration_seconds_count 1"), "{out}");
        assert!(
            out.contains("op_duration_seconds_bucket{le=\"+Inf\"} 1"),
            "{out}"
        );
        assert_eq!(
            out.matches("op_duration_seconds_bucket{").count(),
            BUCKETS,
            "{out}"
        );
    }
}
