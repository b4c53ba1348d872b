//! Firmware: what runs (`GET /api/v1/system`) and A/B updates
//! (`POST /api/v1/system/update`, history at `GET /api/v1/system/update`).
//!
//! An update streams a signed bundle ([`bundle`]) into the inactive root slot, copies
//! its kernel and initrd to the ESP and writes a systemd-boot entry with boot counting
//! (`+3`). The next boot runs the new slot; `quarry-health.service` (in the image) lets
//! `systemd-bless-boot` mark it good only once the health endpoint answers, otherwise
//! the tries run out and systemd-boot returns to the previous slot. [`history`]
//! records the outcome on the data partition.
//!
//! The router is merged by the API module *after* its global body-size and request
//! timeout layers: a bundle is hundreds of megabytes, so this module enforces its own
//! limits ([`bundle::MAX_ROOT_BYTES`], [`UPLOAD_IDLE_TIMEOUT`]).

pub mod boot;
pub mod bundle;
pub mod history;
pub mod slots;

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use http_body_util::BodyExt;
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use utoipa::ToSchema;

use crate::api::auth::Auth;
use crate::api::problem::{ApiResult, Problem};
use crate::db::Role;
use crate::state::AppState;
use boot::{EntryName, Slot};
use bundle::{BundleError, HeaderParse, PayloadVerifier};
use history::{History, UpdateRecord, UpdateState};

/// Public half of the bundle signing key, written into the image by image/build.sh.
pub const PUBLIC_KEY_FILE: &str = "/usr/share/quarry/update-signing-key.ed25519.hex";
/// The image's identity (IMAGE_VERSION).
const OS_RELEASE: &str = "/usr/lib/os-release";
/// Longest pause between two chunks of an upload before it is abandoned.
pub const UPLOAD_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Write buffer towards the slot device.
const WRITE_BUFFER_BYTES: usize = 1024 * 1024;
/// How often (in payload bytes) a running upload records its progress in the history,
/// so `GET /api/v1/system/update` shows `bytes_written` growing.
const PROGRESS_STEP_BYTES: u64 = 8 * 1024 * 1024;

/// Serialises updates: one at a time per appliance.
static UPDATE_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The firmware routes, with full paths; merge after the API's body-limit layers.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/system", get(system_info))
        .route("/api/v1/system/update", get(update_history).post(update))
}

/// What the appliance runs.
#[derive(Debug, Serialize, ToSchema)]
pub struct SystemInfo {
    /// Version of the running quarry binary.
    pub version: String,
    /// Version of the running firmware image (equals `version` for release images).
    pub image_version: Option<String>,
    /// Booted root slot (`a`/`b`), none when not booted from the appliance image.
    pub slot: Option<Slot>,
    /// Seconds since boot.
    pub uptime_s: u64,
    /// Running kernel release.
    pub kernel: String,
    /// Boot entries on the ESP with their boot-counting state.
    pub boot_entries: Vec<EntryName>,
    /// The most recent update attempt.
    pub last_update: Option<UpdateRecord>,
}

fn image_version() -> Option<String> {
    let text = std::fs::read_to_string(OS_RELEASE).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("IMAGE_VERSION="))
        .map(|v| v.trim_matches('"').to_string())
}

fn running_version() -> String {
    image_version().unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_string())
}

fn booted_slot() -> Option<Slot> {
    std::fs::read_to_string("/proc/cmdline")
        .ok()
        .as_deref()
        .and_then(boot::booted_slot)
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// Loads the history, moves it forward to what booted, and saves it if that changed.
/// Whether an upload is running is decided under the history's file lock: an upload
/// writes its final record before it releases [`UPDATE_LOCK`], so a `writing` record
/// seen with the lock free really was interrupted.
fn reconciled_history(data_dir: &Path) -> (Vec<UpdateRecord>, Vec<EntryName>) {
    let history = History::new(data_dir);
    let entries = slots::entries(Path::new(slots::ESP_DIR)).unwrap_or_default();
    let records = history.modify(|records| {
        let active = UPDATE_LOCK.try_lock().is_err();
        history::reconcile(
            records,
            booted_slot(),
            &running_version(),
            &entries,
            active,
            now(),
        )
    });
    (records, entries)
}

/// Version, slot, uptime, kernel and boot entries (viewer).
#[utoipa::path(get, path = "/api/v1/system", tag = "system",
    responses((status = 200, description = "The running system", body = SystemInfo), crate::api::errors::AuthErrors),
    security(("bearer" = [])))]
pub async fn system_info(State(state): State<AppState>, auth: Auth) -> ApiResult<Json<SystemInfo>> {
    auth.require(Role::Viewer)?;
    let data_dir = state.data_dir.clone();
    let (records, entries) = tokio::task::spawn_blocking(move || reconciled_history(&data_dir))
        .await
        .map_err(|e| Problem::internal(&e))?;
    let uptime_s = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| {
            t.split_whitespace()
                .next()
                .and_then(|s| s.parse::<f64>().ok())
        })
        .map(|s| s as u64)
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    Ok(Json(SystemInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        image_version: image_version(),
        slot: booted_slot(),
        uptime_s,
        kernel,
        boot_entries: entries,
        last_update: records.last().cloned(),
    }))
}

/// Every recorded update attempt, oldest first (viewer).
#[utoipa::path(get, path = "/api/v1/system/update", tag = "system",
    responses((status = 200, description = "Update history", body = Vec<UpdateRecord>), crate::api::errors::AuthErrors),
    security(("bearer" = [])))]
pub async fn update_history(
    State(state): State<AppState>,
    auth: Auth,
) -> ApiResult<Json<Vec<UpdateRecord>>> {
    auth.require(Role::Viewer)?;
    let data_dir = state.data_dir.clone();
    let (records, _) = tokio::task::spawn_blocking(move || reconciled_history(&data_dir))
        .await
        .map_err(|e| Problem::internal(&e))?;
    Ok(Json(records))
}

/// Why an upload stopped.
enum UploadError {
    /// The bundle is at fault: 4xx, recorded as failed.
    Bundle(BundleError),
    /// The client went away or stalled.
    Client(String),
    /// The appliance could not complete it (disk, ESP): recorded, reported as 500.
    System(anyhow::Error),
}

impl From<BundleError> for UploadError {
    fn from(e: BundleError) -> Self {
        UploadError::Bundle(e)
    }
}

/// Installs a signed update bundle into the inactive slot (admin). The body is the
/// bundle as `application/octet-stream`. Returns the history record; reboot to run it.
#[utoipa::path(post, path = "/api/v1/system/update", tag = "system",
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "Update bundle"),
    responses(
        (status = 200, description = "Installed; the next boot runs it", body = UpdateRecord),
        (status = 400, description = "The upload broke off or stalled", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Another update is running, or this system was not booted from a Quarry image", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Refused: bad signature, checksum, size or manifest; nothing changed", body = Problem, content_type = "application/problem+json"),
        crate::api::errors::AuthErrors),
    security(("bearer" = [])))]
pub async fn update(
    State(state): State<AppState>,
    auth: Auth,
    body: Body,
) -> ApiResult<Json<UpdateRecord>> {
    auth.require(Role::Admin)?;
    // Without the image's update key there are no A/B slots to write: a state conflict,
    // not a server fault (e.g. `quarry serve` run from a developer checkout).
    if !tokio::fs::try_exists(PUBLIC_KEY_FILE)
        .await
        .unwrap_or(false)
    {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            format!("firmware updates need a system booted from a Quarry image ({PUBLIC_KEY_FILE} is missing)"),
        ));
    }
    let Ok(_guard) = UPDATE_LOCK.try_lock() else {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "another update is in progress",
        ));
    };
    let history = History::new(&state.data_dir);
    let mut record = UpdateRecord {
        id: history.next_id(),
        version: String::new(),
        slot: None,
        started_at: now(),
        updated_at: now(),
        state: UpdateState::Writing,
        bytes_written: 0,
        error: None,
    };
    let result = run_update(body, &history, &mut record).await;
    record.updated_at = now();
    let outcome = match result {
        Ok(()) => {
            record.state = UpdateState::Installed;
            tracing::info!(version = %record.version, slot = ?record.slot, by = %auth.principal.user, "update installed; the next boot runs it");
            Ok(())
        }
        Err(UploadError::Bundle(e)) => {
            record.state = UpdateState::Failed;
            record.error = Some(e.to_string());
            tracing::warn!(error = %e, by = %auth.principal.user, "update bundle refused");
            Err(Problem::unprocessable(e.to_string()))
        }
        Err(UploadError::Client(e)) => {
            record.state = UpdateState::Failed;
            record.error = Some(e.clone());
            Err(Problem::bad_request(e))
        }
        Err(UploadError::System(e)) => {
            record.state = UpdateState::Failed;
            record.error = Some(format!("{e:#}"));
            tracing::error!(error = %format!("{e:#}"), "update failed");
            Err(Problem::internal(&format!("{e:#}")))
        }
    };
    let save = {
        let (history, record) = (history.clone(), record.clone());
        tokio::task::spawn_blocking(move || history.upsert(&record)).await
    };
    if let Ok(Err(e)) | Err(e) = save.map_err(anyhow::Error::from) {
        tracing::warn!(error = %format!("{e:#}"), "saving the update history");
    }
    outcome.map(|()| Json(record))
}

/// Next chunk of the upload, bounded by [`UPLOAD_IDLE_TIMEOUT`]; None at the end.
async fn next_chunk(body: &mut Body) -> Result<Option<axum::body::Bytes>, UploadError> {
    loop {
        let frame = tokio::time::timeout(UPLOAD_IDLE_TIMEOUT, body.frame())
            .await
            .map_err(|_| {
                UploadError::Client(format!(
                    "upload stalled for {}s",
                    UPLOAD_IDLE_TIMEOUT.as_secs()
                ))
            })?;
        match frame {
            None => return Ok(None),
            Some(Err(e)) => return Err(UploadError::Client(format!("reading the upload: {e}"))),
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

/// Records a running upload's progress; a failure only costs the progress display.
async fn save_progress(history: &History, record: &UpdateRecord) {
    let (history, record) = (history.clone(), record.clone());
    match tokio::task::spawn_blocking(move || history.upsert(&record)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %format!("{e:#}"), "saving update progress"),
        Err(e) => tracing::warn!(error = %e, "saving update progress"),
    }
}

async fn run_update(
    mut body: Body,
    history: &History,
    record: &mut UpdateRecord,
) -> Result<(), UploadError> {
    let key_text = tokio::fs::read_to_string(PUBLIC_KEY_FILE)
        .await
        .map_err(|e| {
            UploadError::System(anyhow::anyhow!(
                "reading the update key {PUBLIC_KEY_FILE}: {e}"
            ))
        })?;
    let public_key = bundle::parse_public_key_hex(&key_text).ok_or_else(|| {
        UploadError::System(anyhow::anyhow!(
            "{PUBLIC_KEY_FILE} is not a 32-byte hex key"
        ))
    })?;

    // 1. Header: signature and manifest are verified before anything is written.
    let mut buf: Vec<u8> = Vec::new();
    let header = loop {
        match bundle::parse_header(&buf, &public_key)? {
            HeaderParse::Done(h) => break h,
            HeaderParse::NeedMore(_) => match next_chunk(&mut body).await? {
                Some(chunk) => buf.extend_from_slice(&chunk),
                None => return Err(BundleError::Truncated.into()),
            },
        }
    };
    let manifest = header.manifest.clone();
    let slot = booted_slot()
        .ok_or_else(|| {
            UploadError::System(anyhow::anyhow!(
                "not booted from a Quarry image slot (no quarry.slot=)"
            ))
        })?
        .other();
    record.version = manifest.version.clone();
    record.slot = Some(slot);
    let esp = PathBuf::from(slots::ESP_DIR);
    let prepared = {
        let (history, record, esp) = (history.clone(), record.clone(), esp.clone());
        tokio::task::spawn_blocking(move || -> anyhow::Result<(PathBuf, String)> {
            history.upsert(&record)?;
            let dev = slots::slot_device(slot)?;
            let size = slots::device_size(&dev)?;
            anyhow::ensure!(
                manifest.root_size <= size,
                "root image ({} bytes) is larger than slot {} ({size} bytes)",
                manifest.root_size,
                slot.letter()
            );
            let uuid = slots::partuuid(&dev)?;
            // The slot is about to change: nothing may boot it until it is complete.
            slots::remove_entries(&esp, slot)?;
            Ok((dev, uuid))
        })
        .await
        .map_err(|e| UploadError::System(e.into()))?
        .map_err(UploadError::System)?
    };
    let (dev, partuuid) = prepared;

    // 2. Payload: streamed into the slot, hashed on the way.
    let file = tokio::fs::OpenOptions::new()
        .write(true)
        .open(&dev)
        .await
        .map_err(|e| UploadError::System(anyhow::anyhow!("opening {}: {e}", dev.display())))?;
    let mut out = tokio::io::BufWriter::with_capacity(WRITE_BUFFER_BYTES, file);
    let mut verifier = PayloadVerifier::new(&header.manifest);
    let first = buf.get(header.header_len..).unwrap_or_default().to_vec();
    let mut pending = Some(axum::body::Bytes::from(first));
    let mut reported = 0u64;
    while let Some(chunk) = match pending.take() {
        Some(c) => Some(c),
        None => next_chunk(&mut body).await?,
    } {
        verifier.update(&chunk)?;
        out.write_all(&chunk)
            .await
            .map_err(|e| UploadError::System(anyhow::anyhow!("writing {}: {e}", dev.display())))?;
        if verifier.seen() - reported >= PROGRESS_STEP_BYTES {
            reported = verifier.seen();
            record.bytes_written = reported;
            record.updated_at = now();
            save_progress(history, record).await;
        }
    }
    record.bytes_written = verifier.seen();
    out.flush()
        .await
        .map_err(|e| UploadError::System(e.into()))?;
    out.into_inner()
        .sync_all()
        .await
        .map_err(|e| UploadError::System(e.into()))?;
    verifier.finish()?;

    // 3. Boot files and the entry that makes the slot the next boot.
    let manifest = header.manifest;
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        slots::install_kernel(&esp, &dev, slot, &manifest.kernel)?;
        slots::write_entry(&esp, slot, &manifest.version, &partuuid)
    })
    .await
    .map_err(|e| UploadError::System(e.into()))?
    .map_err(UploadError::System)?;
    Ok(())
}
