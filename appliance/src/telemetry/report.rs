//! `GET /api/v1/telemetry`: totals, current rates and latency percentiles per protocol,
//! share, volume and client, pool capacity, and a window of the time series (viewer).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{global, sync_volumes, HistogramSnapshot, ProtocolTotals, Sample, SMB_TIMED};
use crate::api::auth::Auth;
use crate::api::errors::{AuthErrors, QueryErrors};
use crate::api::extract::ApiQuery;
use crate::api::problem::{ApiResult, Problem};
use crate::db::Role;
use crate::sessions::Protocol;
use crate::state::AppState;

/// How much of the time series to return.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
pub enum Window {
    /// The last five minutes at 1 s resolution (the default).
    #[default]
    #[serde(rename = "5m")]
    FiveMinutes,
    /// The last hour at 1 s resolution.
    #[serde(rename = "1h")]
    Hour,
    /// The last day at 1 min resolution.
    #[serde(rename = "1d")]
    Day,
}

/// Query of `GET /api/v1/telemetry`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct TelemetryQuery {
    /// Series window: `5m` (default), `1h` (both 1 s samples) or `1d` (1 min samples).
    pub window: Option<Window>,
}

/// Byte and operation totals and current rates of one protocol.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProtocolStats {
    /// Bytes read by clients since start.
    pub read_bytes_total: u64,
    /// Bytes written by clients since start.
    pub write_bytes_total: u64,
    /// Requests on files (SMB) or storage commands (NVMe) since start.
    pub operations_total: u64,
    /// Of those, answered with an error.
    pub errors_total: u64,
    /// Bytes read per second over the last second.
    pub read_bytes_per_s: u64,
    /// Bytes written per second over the last second.
    pub write_bytes_per_s: u64,
    /// Operations per second over the last second.
    pub operations_per_s: u64,
    /// Live sessions (SMB) or controllers (NVMe/TCP).
    pub sessions: u64,
}

/// Latency percentiles of one request family since start.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LatencyStats {
    /// `smb` or `nvme`.
    pub protocol: String,
    /// Request family: `read`, `write`, `create`, `query_directory`.
    pub op: String,
    /// Requests measured.
    pub count: u64,
    /// Mean, microseconds.
    pub mean_us: u64,
    /// Median, microseconds.
    pub p50_us: u64,
    /// 99th percentile, microseconds.
    pub p99_us: u64,
    /// 99.9th percentile, microseconds.
    pub p999_us: u64,
}

/// SMB traffic and usage of one share.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ShareStats {
    /// Share name.
    pub share: String,
    /// Bytes read by clients since start.
    pub read_bytes_total: u64,
    /// Bytes written by clients since start.
    pub write_bytes_total: u64,
    /// Requests on the share's files since start.
    pub operations_total: u64,
    /// Of those, answered with an error.
    pub errors_total: u64,
    /// Bytes stored.
    pub used_bytes: u64,
    /// Quota in bytes, if any.
    pub quota_bytes: Option<u64>,
}

/// NVMe traffic of one volume.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VolumeStats {
    /// Volume name.
    pub volume: String,
    /// Bytes read by hosts since start.
    pub read_bytes_total: u64,
    /// Bytes written by hosts since start.
    pub write_bytes_total: u64,
    /// Read commands completed.
    pub reads_total: u64,
    /// Write commands completed.
    pub writes_total: u64,
    /// Commands whose backing I/O failed.
    pub errors_total: u64,
}

/// Traffic of one client machine (its live sessions summed).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClientStats {
    /// Client IP address.
    pub client: String,
    /// Front end.
    pub protocol: Protocol,
    /// Live sessions or controllers from this address.
    pub sessions: u64,
    /// Bytes read.
    pub read_bytes_total: u64,
    /// Bytes written.
    pub write_bytes_total: u64,
    /// Operations.
    pub operations_total: u64,
    /// Operations answered with an error.
    pub errors_total: u64,
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
    /// Latency percentiles since start: SMB read, write, create, query_directory; NVMe
    /// read, write.
    pub latency: Vec<LatencyStats>,
    /// Per-share SMB traffic (shares used since start) and usage.
    pub shares: Vec<ShareStats>,
    /// Per-volume NVMe traffic (volumes exported since start).
    pub volumes: Vec<VolumeStats>,
    /// Per-client traffic of live sessions.
    pub clients: Vec<ClientStats>,
    /// The series window returned.
    pub window: Window,
    /// Seconds between samples (1 or 60).
    pub resolution_s: u32,
    /// The time series, oldest first.
    pub series: Vec<Sample>,
}

fn latency(protocol: &str, op: &str, s: &HistogramSnapshot) -> LatencyStats {
    LatencyStats {
        protocol: protocol.into(),
        op: op.into(),
        count: s.count(),
        mean_us: s.mean_us(),
        p50_us: s.quantile_us(0.5),
        p99_us: s.quantile_us(0.99),
        p999_us: s.quantile_us(0.999),
    }
}

fn protocol_stats(
    totals: &ProtocolTotals,
    last: Option<&Sample>,
    rates: impl Fn(&Sample) -> (u64, u64, u64),
    sessions: u64,
) -> ProtocolStats {
    let (r, w, o) = last.map_or((0, 0, 0), rates);
    ProtocolStats {
        read_bytes_total: totals.read.load(Ordering::Relaxed),
        write_bytes_total: totals.written.load(Ordering::Relaxed),
        operations_total: totals.ops.load(Ordering::Relaxed),
        errors_total: totals.errors.load(Ordering::Relaxed),
        read_bytes_per_s: r,
        write_bytes_per_s: w,
        operations_per_s: o,
        sessions,
    }
}

/// Current rates, percentiles, per-share/volume/client figures and the time series (viewer).
#[utoipa::path(get, path = "/api/v1/telemetry", tag = "telemetry", params(TelemetryQuery),
    responses((status = 200, description = "Telemetry", body = TelemetryReport), AuthErrors, QueryErrors),
    security(("bearer" = [])))]
pub async fn report(
    State(state): State<AppState>,
    auth: Auth,
    ApiQuery(q): ApiQuery<TelemetryQuery>,
) -> ApiResult<Json<TelemetryReport>> {
    auth.require(Role::Viewer)?;
    let t = global();
    let window = q.window.unwrap_or_default();
    let (series, last) = {
        let s = t.series.lock().unwrap_or_else(|p| p.into_inner());
        let (q, keep) = match window {
            Window::FiveMinutes => (&s.seconds, 300),
            Window::Hour => (&s.seconds, s.seconds.len()),
            Window::Day => (&s.minutes, s.minutes.len()),
        };
        let skip = q.len().saturating_sub(keep);
        (
            q.iter().skip(skip).copied().collect::<Vec<_>>(),
            s.seconds.back().copied(),
        )
    };
    let list = state.sessions.list();
    let count = |p: Protocol| list.iter().filter(|s| s.protocol == p).count() as u64;
    let mut latencies: Vec<LatencyStats> = SMB_TIMED
        .iter()
        .zip(t.smb_latency.iter())
        .map(|(op, h)| latency("smb", op.name(), &h.snapshot()))
        .collect();
    latencies.push(latency("nvme", "read", &t.nvme_latency_read.snapshot()));
    latencies.push(latency("nvme", "write", &t.nvme_latency_write.snapshot()));

    let quotas = state.pool.clone();
    let usage = tokio::task::spawn_blocking(move || {
        quotas
            .share_usage()
            .into_iter()
            .map(|(name, used)| {
                let limit = quotas.share_quota(&name).limit();
                (name, (used, limit))
            })
            .collect::<BTreeMap<_, _>>()
    })
    .await
    .map_err(|e| Problem::internal(&e))?;
    let mut shares: Vec<ShareStats> = {
        let map = t.shares.lock().unwrap_or_else(|p| p.into_inner());
        map.values()
            .map(|s| {
                let (used, quota) = usage
                    .get(&s.name.to_lowercase())
                    .copied()
                    .unwrap_or((0, None));
                ShareStats {
                    share: s.name.clone(),
                    read_bytes_total: s.read.get(),
                    write_bytes_total: s.written.get(),
                    operations_total: s.ops.iter().map(|c| c.get()).sum(),
                    errors_total: s.errors.iter().map(|c| c.get()).sum(),
                    used_bytes: used,
                    quota_bytes: quota,
                }
            })
            .collect()
    };
    shares.sort_by(|a, b| a.share.cmp(&b.share));

    sync_volumes(t);
    let mut volumes: Vec<VolumeStats> = {
        let tracked = t.volumes.lock().unwrap_or_else(|p| p.into_inner());
        let mut names: Vec<String> = tracked.iter().map(|v| v.name.clone()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|volume| {
                let dir = |d: &str| {
                    t.volume_bytes
                        .get_or_create(&super::VolumeDirectionLabels {
                            volume: volume.clone(),
                            direction: d.into(),
                        })
                        .get()
                };
                let op = |o: &str| {
                    t.volume_ops
                        .get_or_create(&super::VolumeOpLabels {
                            volume: volume.clone(),
                            op: o.into(),
                        })
                        .get()
                };
                let errors = t
                    .volume_errors
                    .get_or_create(&super::VolumeLabels {
                        volume: volume.clone(),
                    })
                    .get();
                VolumeStats {
                    read_bytes_total: dir("read"),
                    write_bytes_total: dir("write"),
                    reads_total: op("read"),
                    writes_total: op("write"),
                    errors_total: errors,
                    volume,
                }
            })
            .collect()
    };
    volumes.sort_by(|a, b| a.volume.cmp(&b.volume));

    let mut clients: BTreeMap<(String, &'static str), ClientStats> = BTreeMap::new();
    for s in &list {
        let ip = s
            .client
            .parse::<std::net::SocketAddr>()
            .map(|a| a.ip().to_string())
            .unwrap_or_else(|_| s.client.clone());
        let key = match s.protocol {
            Protocol::Smb => "smb",
            Protocol::NvmeTcp => "nvme",
        };
        let c = clients
            .entry((ip.clone(), key))
            .or_insert_with(|| ClientStats {
                client: ip,
                protocol: s.protocol,
                sessions: 0,
                read_bytes_total: 0,
                write_bytes_total: 0,
                operations_total: 0,
                errors_total: 0,
            });
        c.sessions += 1;
        c.read_bytes_total = c.read_bytes_total.saturating_add(s.bytes_read);
        c.write_bytes_total = c.write_bytes_total.saturating_add(s.bytes_written);
        c.operations_total = c.operations_total.saturating_add(s.operations);
        c.errors_total = c.errors_total.saturating_add(s.errors);
    }

    Ok(Json(TelemetryReport {
        enabled: t.enabled,
        smb: protocol_stats(
            &t.smb,
            last.as_ref(),
            |l| (l.smb_read_bps, l.smb_write_bps, l.smb_ops),
            count(Protocol::Smb),
        ),
        nvme: protocol_stats(
            &t.nvme,
            last.as_ref(),
            |l| (l.nvme_read_bps, l.nvme_write_bps, l.nvme_ops),
            count(Protocol::NvmeTcp),
        ),
        latency: latencies,
        shares,
        volumes,
        clients: clients.into_values().collect(),
        window,
        resolution_s: if window == Window::Day { 60 } else { 1 },
        series,
    }))
}
