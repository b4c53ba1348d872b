//! The in-memory time series the dashboard draws: one sample per second for the last
//! hour and one per minute for the last day, each with throughput, operations per second
//! and p99 latencies of that interval (from histogram differences).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use super::{global, HistogramSnapshot, LatencyHistogram, Telemetry, SMB_TIMED};
use quarry_smb::server::OpKind;

/// How many 1 s samples are kept (one hour).
pub const SECONDS_KEPT: usize = 3600;
/// How many 1 min samples are kept (one day).
pub const MINUTES_KEPT: usize = 1440;

/// Throughput, operation rates and latency over one interval of the series.
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
pub struct Sample {
    /// End of the interval (Unix time, seconds).
    pub t: i64,
    /// SMB bytes read by clients per second.
    pub smb_read_bps: u64,
    /// SMB bytes written by clients per second.
    pub smb_write_bps: u64,
    /// NVMe bytes read per second.
    pub nvme_read_bps: u64,
    /// NVMe bytes written per second.
    pub nvme_write_bps: u64,
    /// SMB requests on files per second.
    pub smb_ops: u64,
    /// NVMe storage commands per second.
    pub nvme_ops: u64,
    /// p99 of SMB READ latency in the interval, microseconds (0: none).
    pub smb_read_p99_us: u64,
    /// p99 of SMB WRITE latency in the interval, microseconds (0: none).
    pub smb_write_p99_us: u64,
    /// p99 of NVMe Read latency in the interval, microseconds (0: none).
    pub nvme_read_p99_us: u64,
    /// p99 of NVMe Write latency in the interval, microseconds (0: none).
    pub nvme_write_p99_us: u64,
}

/// Counter totals and histogram counts at one instant.
#[derive(Debug, Clone, Copy, Default)]
struct Point {
    totals: [u64; 6],
    latency: [HistogramSnapshot; 4],
}

impl Point {
    fn now(t: &Telemetry) -> Point {
        let l = |op: OpKind| {
            let i = SMB_TIMED.iter().position(|o| *o == op);
            i.and_then(|i| t.smb_latency.get(i))
                .map(LatencyHistogram::snapshot)
                .unwrap_or_default()
        };
        Point {
            totals: [
                t.smb.read.load(Ordering::Relaxed),
                t.smb.written.load(Ordering::Relaxed),
                t.nvme.read.load(Ordering::Relaxed),
                t.nvme.written.load(Ordering::Relaxed),
                t.smb.ops.load(Ordering::Relaxed),
                t.nvme.ops.load(Ordering::Relaxed),
            ],
            latency: [
                l(OpKind::Read),
                l(OpKind::Write),
                t.nvme_latency_read.snapshot(),
                t.nvme_latency_write.snapshot(),
            ],
        }
    }

    /// The rates between `earlier` and `self`, `secs` apart, stamped `t`.
    fn rates_since(&self, earlier: &Point, secs: u64, t: i64) -> Sample {
        let secs = secs.max(1);
        let mut rate = self.totals;
        for (r, e) in rate.iter_mut().zip(earlier.totals) {
            *r = r.saturating_sub(e) / secs;
        }
        let mut p99 = [0u64; 4];
        for ((p, now), then) in p99.iter_mut().zip(&self.latency).zip(&earlier.latency) {
            *p = now.since(then).quantile_us(0.99);
        }
        Sample {
            t,
            smb_read_bps: rate[0],
            smb_write_bps: rate[1],
            nvme_read_bps: rate[2],
            nvme_write_bps: rate[3],
            smb_ops: rate[4],
            nvme_ops: rate[5],
            smb_read_p99_us: p99[0],
            smb_write_p99_us: p99[1],
            nvme_read_p99_us: p99[2],
            nvme_write_p99_us: p99[3],
        }
    }
}

/// Both resolutions of the series.
#[derive(Debug, Default)]
pub(super) struct Series {
    /// 1 s samples, oldest first.
    pub seconds: VecDeque<Sample>,
    /// 1 min samples, oldest first.
    pub minutes: VecDeque<Sample>,
}

fn push(q: &mut VecDeque<Sample>, s: Sample, keep: usize) {
    if q.len() == keep {
        q.pop_front();
    }
    q.push_back(s);
}

/// Records one sample per second (and one per minute) until `shutdown`.
pub async fn sample_every_second(shutdown: CancellationToken) -> anyhow::Result<()> {
    let t = global();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Point::now(t);
    let mut minute_start = last;
    let mut seconds_in_minute = 0u64;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tick.tick() => {}
        }
        let now = Point::now(t);
        let stamp = time::OffsetDateTime::now_utc().unix_timestamp();
        let second = now.rates_since(&last, 1, stamp);
        last = now;
        seconds_in_minute += 1;
        let minute = (seconds_in_minute == 60).then(|| {
            let m = now.rates_since(&minute_start, seconds_in_minute, stamp);
            minute_start = now;
            seconds_in_minute = 0;
            m
        });
        let mut series = t.series.lock().unwrap_or_else(|p| p.into_inner());
        push(&mut series.seconds, second, SECONDS_KEPT);
        if let Some(m) = minute {
            push(&mut series.minutes, m, MINUTES_KEPT);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_divide_by_the_interval_and_take_interval_percentiles() {
        let h = super::super::LatencyHistogram::default();
        h.observe(Duration::from_secs(2));
        let mut a = Point::default();
        a.latency[0] = h.snapshot();
        for _ in 0..100 {
            h.observe(Duration::from_micros(40));
        }
        let mut b = Point {
            totals: [6000, 0, 0, 0, 120, 0],
            ..Point::default()
        };
        b.latency[0] = h.snapshot();
        let s = b.rates_since(&a, 60, 7);
        assert_eq!(s.t, 7);
        assert_eq!(s.smb_read_bps, 100);
        assert_eq!(s.smb_ops, 2);
        assert!(s.smb_read_p99_us > 0 && s.smb_read_p99_us < 50, "{s:?}");
        assert_eq!(s.nvme_write_p99_us, 0);
    }

    #[test]
    fn queues_keep_their_length() {
        let mut q = VecDeque::new();
        for i in 0..10 {
            push(
                &mut q,
                Sample {
                    t: i,
                    ..Sample::default()
                },
                4,
            );
        }
        assert_eq!(q.len(), 4);
        assert_eq!(q.front().map(|s| s.t), Some(6));
    }
}
