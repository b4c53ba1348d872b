//! Events and alerts: list them, acknowledge them.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::api::auth::Auth;
use crate::api::errors::{AuthErrors, NotFound, QueryErrors};
use crate::api::extract::{ApiPath, ApiQuery};
use crate::api::problem::{ApiResult, Problem};
use crate::db::events::{Event, EventFilter, Severity, MAX_PAGE};
use crate::db::Role;
use crate::state::AppState;

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
