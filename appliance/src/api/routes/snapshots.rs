//! Snapshots of shares and volumes on the managed pool: create, list, delete, restore.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::api::auth::Auth;
use crate::api::errors::{AuthErrors, BodyErrors, Conflict, NotFound, QueryErrors};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::problem::{ApiResult, Problem};
use crate::db::snapshots::{Schedule, Snapshot, SnapshotOf};
use crate::db::Role;
use crate::state::{AppState, ConfigChange};

/// Snapshot request: exactly one of `share` and `volume`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshot {
    /// Share to snapshot.
    pub share: Option<String>,
    /// Volume to snapshot.
    pub volume: Option<String>,
    /// Name (default: a UTC timestamp); 1-64 of `A-Z a-z 0-9 . _ -`.
    pub name: Option<String>,
}

/// Snapshot listing filter.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct SnapshotQuery {
    /// Only snapshots of this share.
    pub share: Option<String>,
    /// Only snapshots of this volume.
    pub volume: Option<String>,
}

fn managed(state: &AppState) -> ApiResult<()> {
    if state.pool.is_btrfs() {
        Ok(())
    } else {
        Err(Problem::new(
            StatusCode::CONFLICT,
            "snapshots need the managed pool (POST /api/v1/pool); the embedded directory pool has none",
        ))
    }
}

/// Default snapshot name: the UTC time, `YYYYMMDD-HHMMSS`.
pub fn default_name() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// Snapshots a share (read-only subvolume snapshot) or a volume (reflink copy) (operator).
#[utoipa::path(post, path = "/api/v1/snapshots", tag = "snapshots", request_body = CreateSnapshot,
    responses((status = 201, description = "Created", body = Snapshot), AuthErrors, BodyErrors, NotFound, Conflict),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<CreateSnapshot>,
) -> ApiResult<(StatusCode, Json<Snapshot>)> {
    auth.require(Role::Operator)?;
    let of = match (req.share, req.volume) {
        (Some(s), None) => SnapshotOf::Share(s),
        (None, Some(v)) => SnapshotOf::Volume(v),
        _ => {
            return Err(Problem::unprocessable(
                "give exactly one of \"share\" and \"volume\"",
            ))
        }
    };
    managed(&state)?;
    let name = req.name.unwrap_or_else(default_name);
    let actor = auth.actor();
    let pool = state.pool.clone();
    let snap = state
        .db
        .call(move |db| {
            db.create_snapshot(&actor, &of, &name, |owner, rel| match &of {
                SnapshotOf::Share(_) => pool.snapshot_share(owner, rel),
                SnapshotOf::Volume(_) => pool.snapshot_volume(owner, rel),
            })
        })
        .await?;
    Ok((StatusCode::CREATED, Json(snap)))
}

/// Lists snapshots, oldest first (viewer).
#[utoipa::path(get, path = "/api/v1/snapshots", tag = "snapshots", params(SnapshotQuery),
    responses((status = 200, description = "Snapshots", body = Vec<Snapshot>), AuthErrors, QueryErrors),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    auth: Auth,
    ApiQuery(q): ApiQuery<SnapshotQuery>,
) -> ApiResult<Json<Vec<Snapshot>>> {
    auth.require(Role::Viewer)?;
    let snaps = state
        .db
        .call(move |db| db.list_snapshots(q.share.as_deref(), q.volume.as_deref()))
        .await?;
    Ok(Json(snaps))
}

/// Deletes a snapshot (operator).
#[utoipa::path(delete, path = "/api/v1/snapshots/{id}", tag = "snapshots",
    params(("id" = i64, Path, description = "Snapshot id")),
    responses((status = 204, description = "Deleted"), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<StatusCode> {
    auth.require(Role::Operator)?;
    let actor = auth.actor();
    let pool = state.pool.clone();
    state
        .db
        .call(move |db| db.delete_snapshot(&actor, id, |s| pool.delete_snapshot_data(&s.path)))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Restores a share or volume to a snapshot (operator). The snapshot is kept.
#[utoipa::path(post, path = "/api/v1/snapshots/{id}/restore", tag = "snapshots",
    params(("id" = i64, Path, description = "Snapshot id")),
    responses((status = 200, description = "Restored", body = Snapshot), AuthErrors, NotFound, Conflict),
    security(("bearer" = [])))]
pub async fn restore(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<Json<Snapshot>> {
    auth.require(Role::Operator)?;
    let actor = auth.actor();
    let pool = state.pool.clone();
    let snap = state
        .db
        .call(move |db| {
            let snap = db
                .snapshot(id)?
                .ok_or_else(|| crate::db::DbError::NotFound(format!("snapshot {id}")))?;
            let res = match (&snap.share, &snap.volume) {
                (Some(share), _) => pool.restore_share(share, &snap.path),
                (None, Some(vol)) => {
                    let size = db.find_volume(vol)?.map(|v| v.size_bytes).unwrap_or(0);
                    pool.restore_volume(vol, &snap.path, size)
                }
                (None, None) => Ok(()),
            };
            res.map_err(|e| crate::db::DbError::io(format!("restoring snapshot {id}"), e))?;
            db.record_restore(&actor, &snap)?;
            Ok(snap)
        })
        .await?;
    state.notify(ConfigChange::Shares);
    Ok(Json(snap))
}

/// Snapshot schedule request: exactly one of `share` and `volume`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSchedule {
    /// Share to snapshot.
    pub share: Option<String>,
    /// Volume to snapshot.
    pub volume: Option<String>,
    /// Seconds between snapshots (at least 60).
    #[schema(minimum = 1, maximum = 31622400)]
    pub interval_s: u64,
    /// Scheduled snapshots to keep (1-1000); older ones are deleted.
    #[schema(minimum = 1, maximum = 1000)]
    pub keep: u32,
}

/// Adds a snapshot schedule with retention (operator). Scheduled snapshots are named
/// `auto-YYYYMMDD-HHMMSS`; only those are pruned.
#[utoipa::path(post, path = "/api/v1/snapshots/schedules", tag = "snapshots", request_body = CreateSchedule,
    responses((status = 201, description = "Created", body = Schedule), AuthErrors, BodyErrors, NotFound, Conflict),
    security(("bearer" = [])))]
pub async fn create_schedule(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<CreateSchedule>,
) -> ApiResult<(StatusCode, Json<Schedule>)> {
    auth.require(Role::Operator)?;
    let of = match (req.share, req.volume) {
        (Some(s), None) => SnapshotOf::Share(s),
        (None, Some(v)) => SnapshotOf::Volume(v),
        _ => {
            return Err(Problem::unprocessable(
                "give exactly one of \"share\" and \"volume\"",
            ))
        }
    };
    let min = crate::pool::managed::min_schedule_secs();
    if req.interval_s < min || req.interval_s > 31_622_400 {
        return Err(Problem::unprocessable(format!(
            "interval_s must be {min}-31622400"
        )));
    }
    if !(1..=1000).contains(&req.keep) {
        return Err(Problem::unprocessable("keep must be 1-1000"));
    }
    managed(&state)?;
    let actor = auth.actor();
    let sched = state
        .db
        .call(move |db| db.create_schedule(&actor, &of, req.interval_s, req.keep))
        .await?;
    state.pool.kick.notify_one();
    Ok((StatusCode::CREATED, Json(sched)))
}

/// Lists snapshot schedules (viewer).
#[utoipa::path(get, path = "/api/v1/snapshots/schedules", tag = "snapshots",
    responses((status = 200, description = "Schedules", body = Vec<Schedule>), AuthErrors),
    security(("bearer" = [])))]
pub async fn list_schedules(
    State(state): State<AppState>,
    auth: Auth,
) -> ApiResult<Json<Vec<Schedule>>> {
    auth.require(Role::Viewer)?;
    Ok(Json(state.db.call(|db| db.list_schedules()).await?))
}

/// Deletes a snapshot schedule; its snapshots stay (operator).
#[utoipa::path(delete, path = "/api/v1/snapshots/schedules/{id}", tag = "snapshots",
    params(("id" = i64, Path, description = "Schedule id")),
    responses((status = 204, description = "Deleted"), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn delete_schedule(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<StatusCode> {
    auth.require(Role::Operator)?;
    let actor = auth.actor();
    state
        .db
        .call(move |db| db.delete_schedule(&actor, id))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
