//! `GET /api/v1/health`: liveness for load balancers, the image's boot check and humans.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::api::problem::{ApiResult, Problem};
use crate::state::AppState;

/// Health answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok` when the database answers.
    pub status: String,
    /// Quarry's version.
    pub version: String,
}

/// Reports liveness: the process runs and its database answers.
#[utoipa::path(get, path = "/api/v1/health", tag = "system",
    responses((status = 200, description = "Healthy", body = Health),
              (status = 500, description = "Database unavailable", body = Problem, content_type = "application/problem+json")))]
pub async fn health(State(state): State<AppState>) -> ApiResult<Json<Health>> {
    state.db.call(|db| db.user_count()).await?;
    Ok(Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    }))
}
