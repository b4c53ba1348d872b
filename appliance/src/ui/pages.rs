//! The pages (GET). Each is filled from the REST handlers called with the caller's own
//! [`Auth`], so a viewer sees exactly what the API shows a viewer.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, MethodRouter};
use quarry_webui::pages::{
    human_micros, DashboardPage, DeviceRow, EventRow, EventsPage, LatencyRow, LoginPage, PoolPage,
    PoolView, Rate, SessionRow, SessionsPage, ShareRow, SharesPage, SnapshotRow, SnapshotsPage,
    SubsystemRow, TokenRow, TokensPage, TrafficRow, UserRow, UsersPage, VolumeRow, VolumesPage,
};
use quarry_webui::{chart_points, downsample, human_bytes};
use serde::Serialize;

use super::{error_page, html, layout, MaybeSession, Session};
use crate::api::auth::Auth;
use crate::api::extract::ApiQuery;
use crate::api::problem::{ApiResult, Problem};
use crate::api::routes::{events, nvme, pool, shares, snapshots, system, tokens, users, volumes};
use crate::state::AppState;

/// Which page to render (after a GET, or again after a refused form post).
#[derive(Debug, Clone, Copy)]
pub enum Page {
    /// `/` when signed in.
    Dashboard,
    /// `/ui/shares`.
    Shares,
    /// `/ui/users`.
    Users,
    /// `/ui/sessions`.
    Sessions,
    /// `/ui/events`.
    Events,
    /// `/ui/pool`.
    Pool,
    /// `/ui/volumes`.
    Volumes,
    /// `/ui/snapshots`.
    Snapshots,
    /// `/ui/tokens`.
    Tokens,
}

/// Renders `page` for `auth`, with `error` shown in its banner and used as the status.
pub async fn render(state: &AppState, auth: &Auth, page: Page, error: Option<Problem>) -> Response {
    let status = error
        .as_ref()
        .and_then(|p| StatusCode::from_u16(p.status).ok())
        .unwrap_or(StatusCode::OK);
    let e = error.as_ref();
    let built = match page {
        Page::Dashboard => dashboard(state, auth, e).await.map(|p| html(status, &p)),
        Page::Shares => shares_page(state, auth, e).await.map(|p| html(status, &p)),
        Page::Users => users_page(state, auth, e).await.map(|p| html(status, &p)),
        Page::Sessions => sessions_page(state, auth, e)
            .await
            .map(|p| html(status, &p)),
        Page::Events => events_page(state, auth, e).await.map(|p| html(status, &p)),
        Page::Pool => pool_page(state, auth, e).await.map(|p| html(status, &p)),
        Page::Volumes => volumes_page(state, auth, e).await.map(|p| html(status, &p)),
        Page::Snapshots => snapshots_page(state, auth, e)
            .await
            .map(|p| html(status, &p)),
        Page::Tokens => tokens_page(state, auth, e).await.map(|p| html(status, &p)),
    };
    built.unwrap_or_else(|problem| error_page(Some(auth), error.unwrap_or(problem)))
}

/// The login page with an optional error and the name typed before.
pub fn login_page(status: StatusCode, username: String, error: Option<&Problem>) -> Response {
    html(
        status,
        &LoginPage {
            username,
            error: error.map(super::problem_view),
        },
    )
}

/// `GET /`: the dashboard when signed in, else the login page.
pub async fn index(State(state): State<AppState>, MaybeSession(auth): MaybeSession) -> Response {
    match auth {
        Some(auth) => render(&state, &auth, Page::Dashboard, None).await,
        None => login_page(StatusCode::OK, String::new(), None),
    }
}

/// A GET route rendering `page` for the signed-in caller.
pub fn show(page: Page) -> MethodRouter<AppState> {
    get(
        move |State(state): State<AppState>, Session(auth): Session| async move {
            render(&state, &auth, page, None).await
        },
    )
}

/// The serde spelling of an enum value (`PoolState::Healthy` → `healthy`).
fn label<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

fn rate(bps: u64) -> Rate {
    Rate {
        bps,
        text: format!("{}/s", human_bytes(bps)),
    }
}

async fn pool_view(state: &AppState, auth: &Auth) -> ApiResult<(PoolView, system::PoolOut)> {
    let p = system::pool(State(state.clone()), auth.clone()).await?.0;
    let size = p.size_bytes.max(1);
    let view = PoolView {
        kind: p.kind.clone(),
        profile: p.profile.clone(),
        state: label(&p.state),
        reason: p.reason.clone().unwrap_or_default(),
        size: human_bytes(p.size_bytes),
        used: human_bytes(p.used_bytes),
        available: human_bytes(p.available_bytes),
        used_bytes: p.used_bytes,
        size_bytes: size,
        high_bytes: size / 10 * 9,
        percent: (u128::from(p.used_bytes) * 100 / u128::from(size)) as u64,
        path: p.path.clone(),
    };
    Ok((view, p))
}

async fn dashboard(
    state: &AppState,
    auth: &Auth,
    error: Option<&Problem>,
) -> ApiResult<DashboardPage> {
    let t = crate::telemetry::report(
        State(state.clone()),
        auth.clone(),
        ApiQuery(crate::telemetry::TelemetryQuery::default()),
    )
    .await?
    .0;
    let (pool, _) = pool_view(state, auth).await?;
    let share_count = shares::list(State(state.clone()), auth.clone())
        .await?
        .0
        .len();
    let open = events::list(
        State(state.clone()),
        auth.clone(),
        ApiQuery(events::EventQuery {
            limit: Some(1000),
            before: None,
            unacked: Some(true),
            severity: None,
        }),
    )
    .await?
    .0
    .len();
    let series = |f: fn(&crate::telemetry::Sample) -> u64| -> Vec<u64> {
        downsample(&t.series.iter().map(f).collect::<Vec<_>>())
    };
    let writes = series(|s| s.smb_write_bps.saturating_add(s.nvme_write_bps));
    let reads = series(|s| s.smb_read_bps.saturating_add(s.nvme_read_bps));
    let ops = series(|s| s.smb_ops.saturating_add(s.nvme_ops));
    let smb_p99 = series(|s| s.smb_read_p99_us.max(s.smb_write_p99_us));
    let nvme_p99 = series(|s| s.nvme_read_p99_us.max(s.nvme_write_p99_us));
    let top = |v: &[&[u64]]| {
        v.iter()
            .flat_map(|s| s.iter())
            .copied()
            .max()
            .unwrap_or(0)
            .max(1)
    };
    let max = top(&[&writes, &reads]);
    let ops_max = top(&[&ops]);
    let latency_max = top(&[&smb_p99, &nvme_p99]);
    let peak = writes
        .iter()
        .zip(&reads)
        .map(|(w, r)| w.saturating_add(*r))
        .max()
        .unwrap_or(0);
    let total = [
        t.smb.read_bytes_per_s,
        t.smb.write_bytes_per_s,
        t.nvme.read_bytes_per_s,
        t.nvme.write_bytes_per_s,
    ]
    .iter()
    .fold(0u64, |a, b| a.saturating_add(*b));
    let latency = t
        .latency
        .iter()
        .map(|l| LatencyRow {
            protocol: if l.protocol == "smb" { "SMB" } else { "NVMe" }.to_string(),
            op: l.op.clone(),
            count: l.count,
            p50: human_micros(l.p50_us),
            p99: human_micros(l.p99_us),
            p999: human_micros(l.p999_us),
        })
        .collect();
    let share_traffic = t
        .shares
        .iter()
        .map(|s| TrafficRow {
            name: s.share.clone(),
            read: human_bytes(s.read_bytes_total),
            written: human_bytes(s.write_bytes_total),
            operations: s.operations_total,
            errors: s.errors_total,
        })
        .collect();
    let volume_traffic = t
        .volumes
        .iter()
        .map(|v| TrafficRow {
            name: v.volume.clone(),
            read: human_bytes(v.read_bytes_total),
            written: human_bytes(v.write_bytes_total),
            operations: v.reads_total.saturating_add(v.writes_total),
            errors: v.errors_total,
        })
        .collect();
    Ok(DashboardPage {
        layout: layout(auth, "dashboard", "Dashboard", error),
        smb_read: rate(t.smb.read_bytes_per_s),
        smb_write: rate(t.smb.write_bytes_per_s),
        nvme_read: rate(t.nvme.read_bytes_per_s),
        nvme_write: rate(t.nvme.write_bytes_per_s),
        total: rate(total),
        chart_write: chart_points(&writes, max),
        chart_read: chart_points(&reads, max),
        chart_max: format!("{}/s", human_bytes(max)),
        chart_peak: peak,
        chart_ops: chart_points(&ops, ops_max),
        chart_ops_max: format!("{ops_max}/s"),
        chart_smb_p99: chart_points(&smb_p99, latency_max),
        chart_nvme_p99: chart_points(&nvme_p99, latency_max),
        chart_latency_max: human_micros(latency_max),
        latency,
        share_traffic,
        volume_traffic,
        telemetry_on: t.enabled,
        pool,
        smb_sessions: t.smb.sessions,
        nvme_sessions: t.nvme.sessions,
        shares: share_count,
        open_events: open,
    })
}

async fn shares_page(
    state: &AppState,
    auth: &Auth,
    error: Option<&Problem>,
) -> ApiResult<SharesPage> {
    let list = shares::list(State(state.clone()), auth.clone()).await?.0;
    let (pool, _) = pool_view(state, auth).await?;
    let rows = list
        .into_iter()
        .map(|s| {
            let bar_max = s.quota_bytes.unwrap_or(pool.size_bytes).max(1);
            ShareRow {
                quota: s
                    .quota_bytes
                    .map_or_else(|| "no quota".to_string(), human_bytes),
                quota_field: s.quota_bytes.map(human_bytes).unwrap_or_default(),
                used: human_bytes(s.used_bytes),
                used_bytes: s.used_bytes,
                bar_max,
                bar_high: bar_max / 10 * 9,
                read_only: s.read_only,
                encrypt: s.encrypt,
                guest_ok: s.guest_ok,
                continuously_available: s.continuously_available,
                users: s.users.join(", "),
                unc: s.unc,
                comment: s.comment,
                name: s.name,
            }
        })
        .collect();
    Ok(SharesPage {
        layout: layout(auth, "shares", "Shares", error),
        shares: rows,
    })
}

async fn users_page(
    state: &AppState,
    auth: &Auth,
    error: Option<&Problem>,
) -> ApiResult<UsersPage> {
    let list = users::list(State(state.clone()), auth.clone()).await?.0;
    let rows = list
        .into_iter()
        .map(|u| UserRow {
            is_self: u.name.eq_ignore_ascii_case(&auth.principal.user),
            role_value: u.role.map(|r| r.as_str().to_string()).unwrap_or_default(),
            role: u
                .role
                .map_or_else(|| "SMB only".to_string(), |r| r.as_str().to_string()),
            created_at: u.created_at,
            name: u.name,
        })
        .collect();
    Ok(UsersPage {
        layout: layout(auth, "users", "Users", error),
        users: rows,
    })
}

async fn sessions_page(
    state: &AppState,
    auth: &Auth,
    error: Option<&Problem>,
) -> ApiResult<SessionsPage> {
    let list = system::sessions(State(state.clone()), auth.clone())
        .await?
        .0;
    let rows = list
        .into_iter()
        .map(|s| SessionRow {
            id: s.id,
            protocol: label(&s.protocol),
            user: s.user,
            client: s.client,
            since: s.since,
            target: s.target,
            read: human_bytes(s.bytes_read),
            written: human_bytes(s.bytes_written),
        })
        .collect();
    Ok(SessionsPage {
        layout: layout(auth, "sessions", "Sessions", error),
        sessions: rows,
    })
}

async fn events_page(
    state: &AppState,
    auth: &Auth,
    error: Option<&Problem>,
) -> ApiResult<EventsPage> {
    let list = events::list(
        State(state.clone()),
        auth.clone(),
        ApiQuery(events::EventQuery {
            limit: Some(200),
            before: None,
            unacked: None,
            severity: None,
        }),
    )
    .await?
    .0;
    let rows = list
        .into_iter()
        .map(|e| EventRow {
            id: e.id,
            at: e.at,
            severity: e.severity.as_str().to_string(),
            kind: e.kind,
            subject: e.subject,
            message: e.message,
            acked: e.acked,
            acked_text: format!(
                "acknowledged by {} {}",
                e.acked_by.unwrap_or_default(),
                e.acked_at.unwrap_or_default()
            ),
            resolved_at: e.resolved_at.unwrap_or_default(),
        })
        .collect();
    Ok(EventsPage {
        layout: layout(auth, "events", "Events", error),
        events: rows,
    })
}

/// A short health line from a device's stored SMART summary.
fn health_text(h: &serde_json::Value) -> String {
    let mut parts = Vec::new();
    if let Some(t) = h.get("temperature_c").and_then(|v| v.as_i64()) {
        parts.push(format!("{t} °C"));
    }
    if let Some(w) = h.get("percentage_used").and_then(|v| v.as_u64()) {
        parts.push(format!("{w}% worn"));
    }
    if let Some(c) = h.get("critical_warning").and_then(|v| v.as_u64()) {
        if c != 0 {
            parts.push(format!("critical warning {c:#x}"));
        }
    }
    parts.join(" · ")
}

async fn pool_page(state: &AppState, auth: &Auth, error: Option<&Problem>) -> ApiResult<PoolPage> {
    let (view, out) = pool_view(state, auth).await?;
    let devices = pool::devices(State(state.clone()), auth.clone()).await?.0;
    Ok(PoolPage {
        layout: layout(auth, "pool", "Pool and devices", error),
        pool: view,
        members: out
            .devices
            .iter()
            .map(|d| (d.path.clone(), label(&d.state)))
            .collect(),
        devices: devices
            .into_iter()
            .map(|d| DeviceRow {
                kind: label(&d.kind),
                size: human_bytes(d.size_bytes),
                health: health_text(&d.health),
                busy: d.busy.unwrap_or_default(),
                in_pool: d.in_pool,
                path: d.path,
                model: d.model,
                serial: d.serial,
            })
            .collect(),
    })
}

async fn volumes_page(
    state: &AppState,
    auth: &Auth,
    error: Option<&Problem>,
) -> ApiResult<VolumesPage> {
    let vols = volumes::list(State(state.clone()), auth.clone()).await?.0;
    let subs = nvme::list(State(state.clone()), auth.clone()).await?.0;
    Ok(VolumesPage {
        layout: layout(auth, "volumes", "Volumes and NVMe subsystems", error),
        volumes: vols
            .into_iter()
            .map(|v| VolumeRow {
                size: human_bytes(v.size_bytes),
                name: v.name,
                uuid: v.uuid,
                created_at: v.created_at,
            })
            .collect(),
        subsystems: subs
            .into_iter()
            .map(|s| SubsystemRow {
                host_list: s.hosts.join(", "),
                allow_any_host: s.allow_any_host,
                namespace_list: s
                    .namespaces
                    .iter()
                    .map(|n| (n.nsid, n.volume.clone()))
                    .collect(),
                hosts: if s.allow_any_host {
                    "any host".to_string()
                } else {
                    s.hosts.join(", ")
                },
                namespaces: s
                    .namespaces
                    .iter()
                    .map(|n| format!("{} → {}", n.nsid, n.volume))
                    .collect::<Vec<_>>()
                    .join(", "),
                nqn: s.nqn,
            })
            .collect(),
    })
}

async fn snapshots_page(
    state: &AppState,
    auth: &Auth,
    error: Option<&Problem>,
) -> ApiResult<SnapshotsPage> {
    let list = snapshots::list(
        State(state.clone()),
        auth.clone(),
        ApiQuery(snapshots::SnapshotQuery {
            share: None,
            volume: None,
        }),
    )
    .await?
    .0;
    let note = if state.pool.is_btrfs() {
        String::new()
    } else {
        "Snapshots need the managed pool; the embedded directory pool has none.".to_string()
    };
    Ok(SnapshotsPage {
        layout: layout(auth, "snapshots", "Snapshots", error),
        snapshots: list
            .into_iter()
            .map(|s| SnapshotRow {
                id: s.id,
                of: match (&s.share, &s.volume) {
                    (Some(share), _) => format!("share {share}"),
                    (None, Some(volume)) => format!("volume {volume}"),
                    (None, None) => String::new(),
                },
                name: s.name,
                created_at: s.created_at,
            })
            .collect(),
        note,
    })
}

async fn tokens_page(
    state: &AppState,
    auth: &Auth,
    error: Option<&Problem>,
) -> ApiResult<TokensPage> {
    let list = tokens::list(State(state.clone()), auth.clone()).await?.0;
    Ok(TokensPage {
        layout: layout(auth, "tokens", "API tokens and sessions", error),
        tokens: list
            .into_iter()
            .map(|t| TokenRow {
                id: t.id,
                name: t.name,
                user: t.user,
                kind: t.kind,
                created_at: t.created_at,
                expires_at: t.expires_at.unwrap_or_else(|| "never".into()),
                last_used_at: t.last_used_at.unwrap_or_else(|| "never".into()),
            })
            .collect(),
        new_token: String::new(),
    })
}

/// The tokens page right after a token was created, showing its secret this once (the
/// response is not cached and never redirected to, so a reload does not show it again).
pub async fn tokens_with_secret(state: &AppState, auth: &Auth, secret: String) -> Response {
    match tokens_page(state, auth, None).await {
        Ok(mut page) => {
            page.new_token = secret;
            html(StatusCode::OK, &page)
        }
        Err(problem) => error_page(Some(auth), problem),
    }
}
