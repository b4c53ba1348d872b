//! The managed pool: create it over devices, add, remove and replace devices, scrub;
//! the devices discovery found; the jobs long operations run as.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::auth::Auth;
use crate::api::errors::{AuthErrors, BodyErrors, Conflict, NotFound};
use crate::api::extract::{ApiJson, ApiPath};
use crate::api::problem::{ApiResult, Problem};
use crate::db::pool::Job;
use crate::db::Role;
use crate::pool::btrfs::PoolError;
use crate::pool::devices::{self, DeviceKind};
use crate::pool::managed;
use crate::state::AppState;

impl From<PoolError> for Problem {
    fn from(e: PoolError) -> Problem {
        match e {
            PoolError::Invalid(why) => Problem::unprocessable(why),
            PoolError::Conflict(why) => Problem::new(StatusCode::CONFLICT, why),
            other => Problem::internal(&other),
        }
    }
}

/// Data profile of a new pool.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// No redundancy, one copy.
    Single,
    /// Striped, no redundancy.
    Raid0,
    /// Two copies on different devices.
    Raid1,
    /// Striped mirrors.
    Raid10,
    /// Three copies.
    Raid1c3,
}

impl Profile {
    fn as_str(self) -> &'static str {
        match self {
            Profile::Single => "single",
            Profile::Raid0 => "raid0",
            Profile::Raid1 => "raid1",
            Profile::Raid10 => "raid10",
            Profile::Raid1c3 => "raid1c3",
        }
    }
}

/// Pool creation request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePool {
    /// Device nodes, as `GET /api/v1/devices` lists them.
    #[schema(min_items = 1, max_items = 64)]
    pub devices: Vec<String>,
    /// Data profile.
    pub profile: Profile,
    /// Overwrite devices holding a file system or partition table.
    #[serde(default)]
    pub force: bool,
}

/// Add-device request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddDevice {
    /// Device node.
    pub path: String,
    /// Overwrite a device holding a file system.
    #[serde(default)]
    pub force: bool,
}

/// Replace request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaceDevice {
    /// The device to replace: its path, or `devid:N` for a missing one (as `GET /pool` shows).
    pub old: String,
    /// The new device.
    pub new: String,
    /// Overwrite a new device holding a file system.
    #[serde(default)]
    pub force: bool,
}

fn managed_only(state: &AppState) -> ApiResult<()> {
    if state.pool.is_btrfs() {
        Ok(())
    } else {
        Err(Problem::new(
            StatusCode::CONFLICT,
            "the appliance runs on the embedded directory pool; create a managed pool first (POST /api/v1/pool)",
        ))
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, PoolError> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Problem::internal(&e))?
        .map_err(Problem::from)
}

/// Creates the managed pool over unused devices (admin). Allowed only while no share or
/// volume exists; returns the creation job.
#[utoipa::path(post, path = "/api/v1/pool", tag = "pool", request_body = CreatePool,
    responses((status = 202, description = "Creation started", body = Job), AuthErrors, BodyErrors, Conflict),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<CreatePool>,
) -> ApiResult<(StatusCode, Json<Job>)> {
    auth.require(Role::Admin)?;
    if state.pool.is_btrfs() {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "a managed pool exists already",
        ));
    }
    let (shares, volumes) = state
        .db
        .call(|db| Ok((db.list_shares()?.len(), db.list_volumes()?.len())))
        .await?;
    if shares + volumes > 0 {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            format!("the pool can only be created while no share or volume exists ({shares} shares, {volumes} volumes)"),
        ));
    }
    let profile = req.profile.as_str();
    managed::profile_args(profile, req.devices.len())?;
    let devs = req.devices.clone();
    let force = req.force;
    blocking(move || managed::validate_new_devices(&devs, force, &[])).await?;
    if !state.pool.set_creating(true) {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "a pool is being created already",
        ));
    }
    let st = state.clone();
    let devs = req.devices.clone();
    let job = managed::spawn_job(
        &state,
        auth.actor(),
        "pool.create",
        serde_json::json!({ "devices": req.devices, "profile": profile }),
        Box::new(move |_ctx| {
            let res = managed::create(&st, &devs, profile, force);
            st.pool.set_creating(false);
            res
        }),
    )
    .await;
    if job.is_err() {
        state.pool.set_creating(false);
    }
    Ok((StatusCode::ACCEPTED, Json(job?)))
}

/// Adds a device to the managed pool and rebalances (admin); returns the job.
#[utoipa::path(post, path = "/api/v1/pool/devices", tag = "pool", request_body = AddDevice,
    responses((status = 202, description = "Started", body = Job), AuthErrors, BodyErrors, Conflict),
    security(("bearer" = [])))]
pub async fn add_device(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<AddDevice>,
) -> ApiResult<(StatusCode, Json<Job>)> {
    auth.require(Role::Admin)?;
    managed_only(&state)?;
    let (pool, path, force) = (state.pool.clone(), req.path.clone(), req.force);
    blocking(move || managed::validate_add(&pool, &path, force)).await?;
    let pool = state.pool.clone();
    let path = req.path.clone();
    let job = managed::spawn_job(
        &state,
        auth.actor(),
        "pool.add",
        serde_json::json!({ "path": req.path }),
        Box::new(move |ctx| managed::add_device(&pool, &path, force, &ctx)),
    )
    .await?;
    Ok((StatusCode::ACCEPTED, Json(job)))
}

/// Removes a device from the managed pool, migrating its data first (admin); returns the
/// job. The path is URL-escaped (`%2Fdev%2Floop3`).
#[utoipa::path(delete, path = "/api/v1/pool/devices/{device}", tag = "pool",
    params(("device" = String, Path, description = "Device path, URL-escaped (%2Fdev%2Fnvme0n1), or devid:N")),
    responses((status = 202, description = "Started", body = Job), AuthErrors, NotFound, Conflict,
        (status = 422, description = "Not a device of the pool", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn remove_device(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(path): ApiPath<String>,
) -> ApiResult<(StatusCode, Json<Job>)> {
    auth.require(Role::Admin)?;
    managed_only(&state)?;
    let (pool, p) = (state.pool.clone(), path.clone());
    blocking(move || managed::validate_remove(&pool, &p)).await?;
    let pool = state.pool.clone();
    let p = path.clone();
    let job = managed::spawn_job(
        &state,
        auth.actor(),
        "pool.remove",
        serde_json::json!({ "path": path }),
        Box::new(move |_ctx| managed::remove_device(&pool, &p)),
    )
    .await?;
    Ok((StatusCode::ACCEPTED, Json(job)))
}

/// Replaces a failed or missing device by a new one (admin); returns the job.
#[utoipa::path(post, path = "/api/v1/pool/replace", tag = "pool", request_body = ReplaceDevice,
    responses((status = 202, description = "Started", body = Job), AuthErrors, BodyErrors, Conflict),
    security(("bearer" = [])))]
pub async fn replace(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<ReplaceDevice>,
) -> ApiResult<(StatusCode, Json<Job>)> {
    auth.require(Role::Admin)?;
    managed_only(&state)?;
    let busy = state
        .db
        .call(|db| db.job_active(&["pool.replace", "pool.add", "pool.remove"]))
        .await?;
    if busy {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "another device operation is running",
        ));
    }
    let (pool, old, new, force) = (
        state.pool.clone(),
        req.old.clone(),
        req.new.clone(),
        req.force,
    );
    blocking(move || managed::validate_replace(&pool, &old, &new, force)).await?;
    let pool = state.pool.clone();
    let (old, new) = (req.old.clone(), req.new.clone());
    let job = managed::spawn_job(
        &state,
        auth.actor(),
        "pool.replace",
        serde_json::json!({ "old": req.old, "new": req.new }),
        Box::new(move |ctx| managed::replace(&pool, &old, &new, force, &ctx)),
    )
    .await?;
    Ok((StatusCode::ACCEPTED, Json(job)))
}

/// Scrubs the managed pool: reads everything, repairs from good copies (operator);
/// returns the job, whose `detail` holds the error counts when it ends.
#[utoipa::path(post, path = "/api/v1/pool/scrub", tag = "pool",
    responses((status = 202, description = "Started", body = Job), AuthErrors, Conflict),
    security(("bearer" = [])))]
pub async fn scrub(
    State(state): State<AppState>,
    auth: Auth,
) -> ApiResult<(StatusCode, Json<Job>)> {
    auth.require(Role::Operator)?;
    managed_only(&state)?;
    if state.db.call(|db| db.job_active(&["pool.scrub"])).await? {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "a scrub is running already",
        ));
    }
    let (pool, db) = (state.pool.clone(), state.db.clone());
    let job = managed::spawn_job(
        &state,
        auth.actor(),
        "pool.scrub",
        serde_json::json!({}),
        Box::new(move |ctx| managed::scrub(&pool, &db, &ctx)),
    )
    .await?;
    Ok((StatusCode::ACCEPTED, Json(job)))
}

/// Grows the pool onto the full size of its devices (admin); returns the job.
#[utoipa::path(post, path = "/api/v1/pool/expand", tag = "pool",
    responses((status = 202, description = "Started", body = Job), AuthErrors, Conflict),
    security(("bearer" = [])))]
pub async fn expand(
    State(state): State<AppState>,
    auth: Auth,
) -> ApiResult<(StatusCode, Json<Job>)> {
    auth.require(Role::Admin)?;
    managed_only(&state)?;
    let pool = state.pool.clone();
    let job = managed::spawn_job(
        &state,
        auth.actor(),
        "pool.expand",
        serde_json::json!({}),
        Box::new(move |ctx| managed::expand(&pool, &ctx)),
    )
    .await?;
    Ok((StatusCode::ACCEPTED, Json(job)))
}

/// A block device of this machine.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeviceOut {
    /// Device node.
    pub path: String,
    /// `nvme`, `loop` or `other`.
    pub kind: DeviceKind,
    /// Model.
    pub model: String,
    /// Serial number.
    pub serial: String,
    /// Firmware revision.
    pub firmware: String,
    /// Capacity.
    pub size_bytes: u64,
    /// Logical block size.
    pub lba_bytes: u64,
    /// In the managed pool.
    pub in_pool: bool,
    /// Why it cannot join the pool (mounted, partitioned, held), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy: Option<String>,
    /// NVMe SMART health as last polled (temperature, wear, spare, media errors).
    #[schema(value_type = Object)]
    pub health: serde_json::Value,
}

/// Block devices discovered, with NVMe health (viewer).
#[utoipa::path(get, path = "/api/v1/devices", tag = "pool",
    responses((status = 200, description = "Devices", body = Vec<DeviceOut>), AuthErrors),
    security(("bearer" = [])))]
pub async fn devices(State(state): State<AppState>, auth: Auth) -> ApiResult<Json<Vec<DeviceOut>>> {
    auth.require(Role::Viewer)?;
    let in_pool: Vec<String> = state
        .pool
        .health()
        .devices
        .into_iter()
        .map(|d| d.path)
        .collect();
    let found = tokio::task::spawn_blocking(devices::discover_system)
        .await
        .map_err(|e| Problem::internal(&e))?;
    let db = state.db.clone();
    let out = db
        .call(move |db| {
            found
                .into_iter()
                .map(|d| {
                    let health = db.device_health(&d.path)?.unwrap_or(serde_json::json!({}));
                    let pooled = in_pool.contains(&d.path);
                    Ok(DeviceOut {
                        busy: if pooled {
                            None
                        } else {
                            devices::busy_reason(&d)
                        },
                        in_pool: pooled,
                        path: d.path,
                        kind: d.kind,
                        model: d.model,
                        serial: d.serial,
                        firmware: d.firmware,
                        size_bytes: d.size_bytes,
                        lba_bytes: d.lba_bytes,
                        health,
                    })
                })
                .collect::<crate::db::DbResult<Vec<_>>>()
        })
        .await?;
    Ok(Json(out))
}

/// Recent jobs, newest first (viewer).
#[utoipa::path(get, path = "/api/v1/jobs", tag = "pool",
    responses((status = 200, description = "Jobs", body = Vec<Job>), AuthErrors),
    security(("bearer" = [])))]
pub async fn jobs(State(state): State<AppState>, auth: Auth) -> ApiResult<Json<Vec<Job>>> {
    auth.require(Role::Viewer)?;
    Ok(Json(
        state
            .db
            .call(|db| db.list_jobs(crate::db::pool::MAX_JOBS_LISTED))
            .await?,
    ))
}

/// One job (viewer).
#[utoipa::path(get, path = "/api/v1/jobs/{id}", tag = "pool",
    params(("id" = i64, Path, description = "Job id")),
    responses((status = 200, description = "The job", body = Job), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn job(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<Json<Job>> {
    auth.require(Role::Viewer)?;
    state
        .db
        .call(move |db| db.job(id))
        .await?
        .map(Json)
        .ok_or_else(|| Problem::not_found(format!("job {id} not found")))
}

/// Scrub schedule.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScrubSchedule {
    /// Seconds between scheduled scrubs; 0 turns scheduled scrubs off.
    #[schema(minimum = 0, maximum = 31622400)]
    pub interval_s: u64,
}

/// Sets how often the pool is scrubbed (admin); results arrive as `pool.scrub` events
/// and in the scrub jobs' details.
#[utoipa::path(put, path = "/api/v1/pool/scrub/schedule", tag = "pool", request_body = ScrubSchedule,
    responses((status = 200, description = "Set", body = ScrubSchedule), AuthErrors, BodyErrors),
    security(("bearer" = [])))]
pub async fn set_scrub_schedule(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<ScrubSchedule>,
) -> ApiResult<Json<ScrubSchedule>> {
    auth.require(Role::Admin)?;
    let min = managed::min_schedule_secs();
    if req.interval_s != 0 && (req.interval_s < min || req.interval_s > 31_622_400) {
        return Err(Problem::unprocessable(format!(
            "interval_s must be 0 (off) or {min}-31622400"
        )));
    }
    let actor = auth.actor();
    let v = req.interval_s.to_string();
    state
        .db
        .call(move |db| db.set_setting(&actor, managed::SCRUB_INTERVAL_KEY, &v))
        .await?;
    state.pool.kick.notify_one();
    Ok(Json(req))
}

/// The scrub schedule (viewer).
#[utoipa::path(get, path = "/api/v1/pool/scrub/schedule", tag = "pool",
    responses((status = 200, description = "The schedule", body = ScrubSchedule), AuthErrors),
    security(("bearer" = [])))]
pub async fn scrub_schedule(
    State(state): State<AppState>,
    auth: Auth,
) -> ApiResult<Json<ScrubSchedule>> {
    auth.require(Role::Viewer)?;
    let v = state
        .db
        .call(|db| db.setting(managed::SCRUB_INTERVAL_KEY))
        .await?;
    Ok(Json(ScrubSchedule {
        interval_s: v.and_then(|s| s.parse().ok()).unwrap_or(0),
    }))
}
