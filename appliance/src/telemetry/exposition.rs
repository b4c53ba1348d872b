//! `GET /metrics`: every metric in the Prometheus/OpenMetrics text format. Gauges of
//! appliance state (sessions, pool capacity, share usage, device health) are refreshed
//! from the state at each scrape; data-path counters are read as they are.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::{global, sync_volumes, ProtocolLabels};
use crate::sessions::Protocol;
use crate::state::AppState;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ShareLabels {
    share: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DeviceLabels {
    device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DeviceErrorLabels {
    device: String,
    kind: String,
}

/// Gauges set from appliance state at scrape time.
pub(super) struct StateGauges {
    pool_size: Gauge,
    pool_used: Gauge,
    pool_available: Gauge,
    pool_healthy: Gauge,
    share_used: Family<ShareLabels, Gauge>,
    share_quota: Family<ShareLabels, Gauge>,
    device_errors: Family<DeviceErrorLabels, Gauge>,
    device_temperature: Family<DeviceLabels, Gauge>,
    device_used: Family<DeviceLabels, Gauge>,
    device_spare: Family<DeviceLabels, Gauge>,
    device_media_errors: Family<DeviceLabels, Gauge>,
    device_warning: Family<DeviceLabels, Gauge>,
}

fn gauge(registry: &mut Registry, name: &str, help: &str, unit: Option<Unit>) -> Gauge {
    let g = Gauge::default();
    match unit {
        Some(u) => registry.register_with_unit(name, help, u, g.clone()),
        None => registry.register(name, help, g.clone()),
    }
    g
}

fn family<L>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    unit: Option<Unit>,
) -> Family<L, Gauge>
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
{
    let f = Family::<L, Gauge>::default();
    match unit {
        Some(u) => registry.register_with_unit(name, help, u, f.clone()),
        None => registry.register(name, help, f.clone()),
    }
    f
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl StateGauges {
    pub(super) fn register(r: &mut Registry) -> StateGauges {
        StateGauges {
            pool_size: gauge(r, "pool_size", "Size of the pool's file system", Some(Unit::Bytes)),
            pool_used: gauge(r, "pool_used", "Bytes used in the pool", Some(Unit::Bytes)),
            pool_available: gauge(
                r,
                "pool_available",
                "Bytes still available to shares and volumes",
                Some(Unit::Bytes),
            ),
            pool_healthy: gauge(
                r,
                "pool_healthy",
                "1 when the pool is healthy, 0 when degraded or failed",
                None,
            ),
            share_used: family(r, "share_used", "Bytes stored in a share", Some(Unit::Bytes)),
            share_quota: family(
                r,
                "share_quota",
                "A share's quota (absent when the share has none)",
                Some(Unit::Bytes),
            ),
            device_errors: family(
                r,
                "pool_device_errors",
                "btrfs error counters of a pool device, by kind (read, write, flush, corruption, generation)",
                None,
            ),
            device_temperature: family(
                r,
                "device_temperature_celsius",
                "NVMe composite temperature (SMART log)",
                None,
            ),
            device_used: family(
                r,
                "device_percentage_used",
                "NVMe estimate of the life used, percent (SMART log; may exceed 100)",
                None,
            ),
            device_spare: family(
                r,
                "device_available_spare_percent",
                "NVMe available spare, percent (SMART log)",
                None,
            ),
            device_media_errors: family(
                r,
                "device_media_errors",
                "NVMe unrecovered data integrity errors (SMART log)",
                None,
            ),
            device_warning: family(
                r,
                "device_critical_warning",
                "NVMe critical warning bits, 0 when none (SMART log)",
                None,
            ),
        }
    }
}

/// Appliance state read for one scrape (off the async threads: statvfs, the DB).
struct StateReading {
    capacity: Option<crate::pool::Capacity>,
    healthy: bool,
    shares: Vec<(String, u64, Option<u64>)>,
    devices: Vec<(
        String,
        crate::pool::btrfs::DeviceErrors,
        Option<serde_json::Value>,
    )>,
}

fn read_state(state: &AppState) -> StateReading {
    let pool = &state.pool;
    let capacity = pool
        .capacity()
        .map_err(|e| tracing::debug!(error = %e, "pool capacity unreadable"))
        .ok();
    let health = pool.health();
    let healthy = matches!(health.state, crate::pool::managed::PoolState::Healthy);
    let shares = pool
        .share_usage()
        .into_iter()
        .map(|(name, used)| {
            let limit = pool.share_quota(&name).limit();
            (name, used, limit)
        })
        .collect();
    let devices = health
        .devices
        .into_iter()
        .map(|d| {
            let smart = state.db.device_health(&d.path).ok().flatten();
            (d.path, d.errors, smart)
        })
        .collect();
    StateReading {
        capacity,
        healthy,
        shares,
        devices,
    }
}

fn apply(g: &StateGauges, s: StateReading) {
    if let Some(c) = &s.capacity {
        g.pool_size.set(clamp(c.size_bytes));
        g.pool_used.set(clamp(c.used_bytes));
        g.pool_available.set(clamp(c.available_bytes));
    }
    g.pool_healthy.set(i64::from(s.healthy));
    g.share_used.clear();
    g.share_quota.clear();
    for (share, used, quota) in s.shares {
        let l = ShareLabels { share };
        g.share_used.get_or_create(&l).set(clamp(used));
        if let Some(q) = quota {
            g.share_quota.get_or_create(&l).set(clamp(q));
        }
    }
    for f in [
        &g.device_temperature,
        &g.device_used,
        &g.device_spare,
        &g.device_media_errors,
        &g.device_warning,
    ] {
        f.clear();
    }
    g.device_errors.clear();
    for (device, errors, smart) in s.devices {
        for (kind, v) in [
            ("read", errors.read_io_errs),
            ("write", errors.write_io_errs),
            ("flush", errors.flush_io_errs),
            ("corruption", errors.corruption_errs),
            ("generation", errors.generation_errs),
        ] {
            g.device_errors
                .get_or_create(&DeviceErrorLabels {
                    device: device.clone(),
                    kind: kind.into(),
                })
                .set(clamp(v));
        }
        let Some(smart) = smart else { continue };
        let l = DeviceLabels { device };
        for (f, key) in [
            (&g.device_temperature, "temperature_c"),
            (&g.device_used, "percentage_used"),
            (&g.device_spare, "available_spare_pct"),
            (&g.device_media_errors, "media_errors"),
            (&g.device_warning, "critical_warning"),
        ] {
            if let Some(v) = smart.get(key).and_then(|v| v.as_i64()) {
                f.get_or_create(&l).set(v);
            }
        }
    }
}

/// Renders every metric in the Prometheus text format, refreshing the state gauges
/// from `state` first.
pub async fn render(state: &AppState) -> anyhow::Result<String> {
    let t = global();
    let s = state.clone();
    let reading = tokio::task::spawn_blocking(move || read_state(&s)).await?;
    apply(&t.gauges, reading);
    sync_volumes(t);
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
    match render(&state).await {
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
