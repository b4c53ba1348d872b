//! Telemetry: data-path counters and their Prometheus exposition (`GET /metrics`).
//!
//! The counters are process-wide and live in one registry built on first use. The data
//! path reaches them through [`smb_bytes`] and [`nvme_bytes`]: each is one relaxed
//! atomic add on a counter created up front (no map lookup, no lock per request).
//! `QUARRY_TELEMETRY=off` in the environment disables collection (the calls return at
//! once), for benchmarking the cost of telemetry.
//!
//! `/metrics` is open on the HTTP listener, like most exporters: it carries totals, no
//! names of users or files. Every metric is documented in `docs/metrics.md`.

use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use axum::Json;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use crate::api::auth::Auth;
use crate::api::errors::AuthErrors;
use crate::api::problem::ApiResult;
use crate::db::Role;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::sessions::Protocol;
use crate::state::AppState;

/// Direction of a transfer, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The client read data (server sent it).
    Read,
    /// The client wrote data (server received it).
    Write,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProtocolLabels {
    protocol: String,
}

/// The process-wide metrics.
struct Telemetry {
    enabled: bool,
    registry: Registry,
    smb_read: Counter,
    smb_write: Counter,
    nvme_read: Counter,
    nvme_write: Counter,
    sessions: Family<ProtocolLabels, Gauge>,
    /// One sample per second, the last [`SERIES_LEN`]; written by the sampler only.
    series: Mutex<VecDeque<Sample>>,
}

/// How many 1 s samples are kept (one hour).
const SERIES_LEN: usize = 3600;
/// How many of the newest samples `/api/v1/telemetry` returns (five minutes).
const SERIES_SHOWN: usize = 300;

/// Counter totals at one instant.
#[derive(Debug, Clone, Copy, Default)]
struct Totals {
    smb_read: u64,
    smb_write: u64,
    nvme_read: u64,
    nvme_write: u64,
}

impl Totals {
    fn now(t: &Telemetry) -> Totals {
        Totals {
            smb_read: t.smb_read.get(),
            smb_write: t.smb_write.get(),
            nvme_read: t.nvme_read.get(),
            nvme_write: t.nvme_write.get(),
        }
    }
}

/// Throughput over one second of the time series (bytes per second).
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct Sample {
    /// End of the second (Unix time, seconds).
    pub t: i64,
    /// SMB bytes read by clients per second.
    pub smb_read_bps: u64,
    /// SMB bytes written by clients per second.
    pub smb_write_bps: u64,
    /// NVMe bytes read per second.
    pub nvme_read_bps: u64,
    /// NVMe bytes written per second.
    pub nvme_write_bps: u64,
}

fn direction_family(registry: &mut Registry, name: &str, help: &str) -> (Counter, Counter) {
    let family = Family::<DirectionLabels, Counter>::default();
    registry.register_with_unit(
        name,
        help,
        prometheus_client::registry::Unit::Bytes,
        family.clone(),
    );
    let read = family
        .get_or_create(&DirectionLabels {
            direction: "read".into(),
        })
        .clone();
    let write = family
        .get_or_create(&DirectionLabels {
            direction: "write".into(),
        })
        .clone();
    (read, write)
}

impl Telemetry {
    fn new() -> Telemetry {
        let enabled = !matches!(
            std::env::var("QUARRY_TELEMETRY").as_deref(),
            Ok("off") | Ok("0") | Ok("false")
        );
        let mut registry = Registry::with_prefix("quarry");
        let (smb_read, smb_write) = direction_family(
            &mut registry,
            "smb",
            "Bytes of file data moved by SMB READ and WRITE, by direction seen from the client",
        );
        let (nvme_read, nvme_write) = direction_family(
            &mut registry,
            "nvme",
            "Bytes of block data moved by NVMe/TCP Read and Write commands, by direction",
        );
        let sessions = Family::<ProtocolLabels, Gauge>::default();
        registry.register(
            "sessions",
            "Live SMB sessions and NVMe/TCP controllers, by protocol",
            sessions.clone(),
        );
        Telemetry {
            enabled,
            registry,
            smb_read,
            smb_write,
            nvme_read,
            nvme_write,
            sessions,
            series: Mutex::new(VecDeque::with_capacity(SERIES_LEN)),
        }
    }
}

fn global() -> &'static Telemetry {
    static T: OnceLock<Telemetry> = OnceLock::new();
    T.get_or_init(Telemetry::new)
}

/// Whether collection is on (`QUARRY_TELEMETRY` is not `off`).
pub fn enabled() -> bool {
    global().enabled
}

/// Counts `bytes` of SMB file data moved in `direction` (data-path hook).
pub fn smb_bytes(direction: Direction, bytes: u64) {
    let t = global();
    if !t.enabled {
        return;
    }
    match direction {
        Direction::Read => t.smb_read.inc_by(bytes),
        Direction::Write => t.smb_write.inc_by(bytes),
    };
}

/// Counts `bytes` of NVMe block data moved in `direction` (data-path hook).
pub fn nvme_bytes(direction: Direction, bytes: u64) {
    let t = global();
    if !t.enabled {
        return;
    }
    match direction {
        Direction::Read => t.nvme_read.inc_by(bytes),
        Direction::Write => t.nvme_write.inc_by(bytes),
    };
}

/// Records one throughput sample per second into the in-memory series until `shutdown`.
pub async fn sample_every_second(shutdown: CancellationToken) -> anyhow::Result<()> {
    let t = global();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Totals::now(t);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tick.tick() => {}
        }
        let now = Totals::now(t);
        let sample = Sample {
            t: time::OffsetDateTime::now_utc().unix_timestamp(),
            smb_read_bps: now.smb_read.saturating_sub(last.smb_read),
            smb_write_bps: now.smb_write.saturating_sub(last.smb_write),
            nvme_read_bps: now.nvme_read.saturating_sub(last.nvme_read),
            nvme_write_bps: now.nvme_write.saturating_sub(last.nvme_write),
        };
        last = now;
        let mut series = t.series.lock().unwrap_or_else(|p| p.into_inner());
        if series.len() == SERIES_LEN {
            series.pop_front();
        }
        series.push_back(sample);
    }
}

/// Byte totals and current rates of one protocol.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProtocolStats {
    /// Bytes read by clients since start.
    pub read_bytes_total: u64,
    /// Bytes written by clients since start.
    pub write_bytes_total: u64,
    /// Bytes read per second over the last second.
    pub read_bytes_per_s: u64,
    /// Bytes written per second over the last second.
    pub write_bytes_per_s: u64,
    /// Live sessions (SMB) or controllers (NVMe/TCP).
    pub sessions: u64,
}

/// What `GET /api/v1/telemetry` returns.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TelemetryReport {
    /// Whether collection is on (`QUARRY_TELEMETRY` not `off`).
    pub enabled: bool,
    /// SMB totals and rates.
    pub smb: ProtocolStats,
    /// NVMe/TCP totals and rates.
    pub nvme: ProtocolStats,
    /// Throughput per second for the last five minutes, oldest first.
    pub series: Vec<Sample>,
}

/// Current rates and the recent time series (viewer).
#[utoipa::path(get, path = "/api/v1/telemetry", tag = "telemetry",
    responses((status = 200, description = "Telemetry", body = TelemetryReport), AuthErrors),
    security(("bearer" = [])))]
pub async fn report(State(state): State<AppState>, auth: Auth) -> ApiResult<Json<TelemetryReport>> {
    auth.require(Role::Viewer)?;
    let t = global();
    let totals = Totals::now(t);
    let (series, last) = {
        let s = t.series.lock().unwrap_or_else(|p| p.into_inner());
        let skip = s.len().saturating_sub(SERIES_SHOWN);
        (
            s.iter().skip(skip).copied().collect::<Vec<_>>(),
            s.back().copied(),
        )
    };
    let list = state.sessions.list();
    let count = |p: Protocol| list.iter().filter(|s| s.protocol == p).count() as u64;
    Ok(Json(TelemetryReport {
        enabled: t.enabled,
        smb: ProtocolStats {
            read_bytes_total: totals.smb_read,
            write_bytes_total: totals.smb_write,
            read_bytes_per_s: last.map_or(0, |l| l.smb_read_bps),
            write_bytes_per_s: last.map_or(0, |l| l.smb_write_bps),
            sessions: count(Protocol::Smb),
        },
        nvme: ProtocolStats {
            read_bytes_total: totals.nvme_read,
            write_bytes_total: totals.nvme_write,
            read_bytes_per_s: last.map_or(0, |l| l.nvme_read_bps),
            write_bytes_per_s: last.map_or(0, |l| l.nvme_write_bps),
            sessions: count(Protocol::NvmeTcp),
        },
        series,
    }))
}

/// Renders every metric in the Prometheus text format, refreshing the gauges from
/// `state` first.
pub fn render(state: &AppState) -> Result<String, std::fmt::Error> {
    let t = global();
    let list = state.sessions.list();
    for (protocol, label) in [(Protocol::Smb, "smb"), (Protocol::NvmeTcp, "nvme_tcp")] {
        let n = list.iter().filter(|s| s.protocol == protocol).count();
        t.sessions
            .get_or_create(&ProtocolLabels {
                protocol: label.into(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &t.registry)?;
    Ok(out)
}

/// `GET /metrics`: the Prometheus text exposition, open (no authentication).
pub async fn metrics(State(state): State<AppState>) -> Response {
    match render(&state) {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "encoding metrics failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_with_conventional_names() {
        smb_bytes(Direction::Write, 1000);
        nvme_bytes(Direction::Read, 4096);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &global().registry).expect("encodes");
        assert!(
            out.contains("quarry_smb_bytes_total{direction=\"write\"}"),
            "{out}"
        );
        assert!(
            out.contains("quarry_nvme_bytes_total{direction=\"read\"}"),
            "{out}"
        );
        assert!(out.contains("# EOF"), "{out}");
    }
}
