//! Events and alerts: list them, acknowledge them, and the webhook they are POSTed to.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::auth::Auth;
use crate::api::errors::{AuthErrors, BodyErrors, NotFound, QueryErrors};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::problem::{ApiResult, Problem};
use crate::db::events::{Event, EventFilter, Severity, MAX_PAGE};
use crate::db::webhook::{redacted_url, WebhookConfig};
use crate::db::Role;
use crate::state::AppState;
use crate::webhook::LastDelivery;

/// Event listing filters and paging.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct EventQuery {
    /// Most rows to return (1-1000, default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// Only rows with an id below this (for paging back).
    pub before: Option<i64>,
    /// Only events not yet acknowledged.
    pub unacked: Option<bool>,
    /// Only events at or above this severity.
    pub severity: Option<Severity>,
}

/// Events and alerts, newest first (viewer).
#[utoipa::path(get, path = "/api/v1/events", tag = "events", params(EventQuery),
    responses((status = 200, description = "Events", body = Vec<Event>), AuthErrors, QueryErrors),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    auth: Auth,
    ApiQuery(q): ApiQuery<EventQuery>,
) -> ApiResult<Json<Vec<Event>>> {
    auth.require(Role::Viewer)?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(Problem::bad_request(format!("limit must be 1-{MAX_PAGE}")));
    }
    let filter = EventFilter {
        unacked_only: q.unacked.unwrap_or(false),
        min_severity: q.severity,
    };
    let rows = state
        .db
        .call(move |db| db.events(filter, limit, q.before))
        .await?;
    Ok(Json(rows))
}

/// Acknowledges an event (operator).
#[utoipa::path(post, path = "/api/v1/events/{id}/ack", tag = "events",
    params(("id" = i64, Path, description = "Event id")),
    responses((status = 204, description = "Acknowledged"), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn ack(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<StatusCode> {
    auth.require(Role::Operator)?;
    let actor = auth.actor();
    state.db.call(move |db| db.ack_event(&actor, id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The webhook that events are POSTed to, as `GET` shows it: never the secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookStatus {
    /// Where events are POSTed; `None` when no webhook is configured.
    #[schema(max_length = 2048)]
    pub url: Option<String>,
    /// Whether events are delivered.
    pub enabled: bool,
    /// Whether deliveries are signed (`X-Quarry-Signature`); the secret is never shown.
    pub secret_set: bool,
    /// How the last delivery since the appliance started went.
    pub last_delivery: Option<LastDelivery>,
    /// Events dropped since start because the delivery queue was full.
    pub dropped: u64,
}

/// Sets the webhook.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetWebhook {
    /// `http://` or `https://` URL with a host, at most 2048 bytes.
    #[schema(max_length = 2048)]
    pub url: String,
    /// Whether events are delivered.
    pub enabled: bool,
    /// HMAC-SHA256 key for `X-Quarry-Signature` (at most 256 bytes). Left out or `null`
    /// keeps the current one; `""` removes it.
    #[schema(max_length = 256)]
    pub secret: Option<String>,
}

fn webhook_status(state: &AppState, config: Option<&WebhookConfig>) -> WebhookStatus {
    WebhookStatus {
        url: config.map(|c| c.url.clone()),
        enabled: config.is_some_and(|c| c.enabled),
        secret_set: config.is_some_and(|c| c.secret.is_some()),
        last_delivery: state.webhook.last_delivery(),
        dropped: state.webhook.dropped(),
    }
}

/// The webhook target of events (admin).
#[utoipa::path(get, path = "/api/v1/events/webhook", tag = "events",
    responses((status = 200, description = "Webhook", body = WebhookStatus), AuthErrors),
    security(("bearer" = [])))]
pub async fn webhook_get(
    State(state): State<AppState>,
    auth: Auth,
) -> ApiResult<Json<WebhookStatus>> {
    auth.require(Role::Admin)?;
    let config = state.db.call(|db| db.webhook()).await?;
    Ok(Json(webhook_status(&state, config.as_ref())))
}

/// Sets the webhook every event raised or resolved is POSTed to (admin, audited).
#[utoipa::path(put, path = "/api/v1/events/webhook", tag = "events", request_body = SetWebhook,
    responses((status = 200, description = "Webhook set", body = WebhookStatus), AuthErrors, BodyErrors),
    security(("bearer" = [])))]
pub async fn webhook_put(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<SetWebhook>,
) -> ApiResult<Json<WebhookStatus>> {
    auth.require(Role::Admin)?;
    let actor = auth.actor();
    let config = state
        .db
        .call(move |db| db.set_webhook(&actor, &req.url, req.enabled, req.secret.as_deref()))
        .await?;
    tracing::info!(url = %redacted_url(&config.url), enabled = config.enabled,
        signed = config.secret.is_some(), by = %auth.principal.user, "webhook set");
    let status = webhook_status(&state, Some(&config));
    state.webhook.set_config(Some(config));
    Ok(Json(status))
}

/// Removes the webhook: no more deliveries (admin, audited).
#[utoipa::path(delete, path = "/api/v1/events/webhook", tag = "events",
    responses((status = 204, description = "Removed (or there was none)"), AuthErrors),
    security(("bearer" = [])))]
pub async fn webhook_delete(State(state): State<AppState>, auth: Auth) -> ApiResult<StatusCode> {
    auth.require(Role::Admin)?;
    let actor = auth.actor();
    state.db.call(move |db| db.delete_webhook(&actor)).await?;
    state.webhook.set_config(None);
    tracing::info!(by = %auth.principal.user, "webhook removed");
    Ok(StatusCode::NO_CONTENT)
}
