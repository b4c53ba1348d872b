//! The REST API (`/api/v1`), axum + tower. Handlers are thin: they check the role,
//! call the database on a blocking thread, notify the services and shape the answer.
//! The OpenAPI document is generated from the handlers' annotations.

pub mod auth;
pub mod errors;
pub mod extract;
pub mod problem;
pub mod ratelimit;
pub mod routes;

use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::state::AppState;
use problem::Problem;
use routes::*;

/// Largest request body accepted by the API.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Longest a request may take before it is answered 408.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The OpenAPI document.
#[derive(OpenApi)]
#[openapi(
    info(title = "Quarry appliance API", description = "Shares, users, volumes and NVMe-oF subsystems of a Quarry storage appliance."),
    paths(
        health::health,
        login::login, login::logout, login::me,
        tokens::create, tokens::list, tokens::delete,
        users::create, users::list, users::get, users::update, users::delete,
        shares::create, shares::list, shares::get, shares::update, shares::delete,
        volumes::create, volumes::list, volumes::get, volumes::resize, volumes::delete,
        nvme::create, nvme::list, nvme::get, nvme::update, nvme::delete, nvme::add_namespace, nvme::remove_namespace,
        system::sessions, system::disconnect, system::pool, system::audit,
        events::list, events::ack, events::webhook_get, events::webhook_put, events::webhook_delete,
        nvme_listeners::list, nvme_listeners::create, nvme_listeners::delete,
        pool::create, pool::add_device, pool::remove_device, pool::replace, pool::scrub,
        pool::devices, pool::jobs, pool::job,
        snapshots::create, snapshots::list, snapshots::delete, snapshots::restore,
        snapshots::create_schedule, snapshots::list_schedules, snapshots::delete_schedule,
        pool::set_scrub_schedule, pool::scrub_schedule, pool::expand,
        crate::telemetry::report::report,
        tls::get, tls::replace,
        crate::system::system_info, crate::system::update_history, crate::system::update,
    ),
    components(schemas(Problem)),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

async fn openapi_json() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}

async fn not_found() -> Problem {
    Problem::not_found("no such route")
}

async fn method_not_allowed() -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed on this route",
    )
}

/// The `/api/v1` router with its limits.
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/health", get(health::health))
        .route("/openapi.json", get(openapi_json))
        .route("/auth/login", post(login::login))
        .route("/auth/logout", post(login::logout))
        .route("/auth/me", get(login::me))
        .route("/tokens", post(tokens::create).get(tokens::list))
        .route("/tokens/{id}", axum::routing::delete(tokens::delete))
        .route("/users", post(users::create).get(users::list))
        .route(
            "/users/{name}",
            get(users::get).patch(users::update).delete(users::delete),
        )
        .route("/shares", post(shares::create).get(shares::list))
        .route(
            "/shares/{name}",
            get(shares::get)
                .patch(shares::update)
                .delete(shares::delete),
        )
        .route("/volumes", post(volumes::create).get(volumes::list))
        .route(
            "/volumes/{name}",
            get(volumes::get)
                .patch(volumes::resize)
                .delete(volumes::delete),
        )
        .route("/nvme/subsystems", post(nvme::create).get(nvme::list))
        .route(
            "/nvme/subsystems/{nqn}",
            get(nvme::get).patch(nvme::update).delete(nvme::delete),
        )
        .route(
            "/nvme/subsystems/{nqn}/namespaces",
            post(nvme::add_namespace),
        )
        .route(
            "/nvme/subsystems/{nqn}/namespaces/{nsid}",
            axum::routing::delete(nvme::remove_namespace),
        )
        .route(
            "/nvme/listeners",
            get(nvme_listeners::list).post(nvme_listeners::create),
        )
        .route(
            "/nvme/listeners/{id}",
            axum::routing::delete(nvme_listeners::delete),
        )
        .route("/sessions", get(system::sessions))
        .route("/sessions/{id}", axum::routing::delete(system::disconnect))
        .route("/pool", get(system::pool).post(pool::create))
        .route("/pool/devices", post(pool::add_device))
        .route(
            "/pool/devices/{device}",
            axum::routing::delete(pool::remove_device),
        )
        .route("/pool/replace", post(pool::replace))
        .route("/pool/scrub", post(pool::scrub))
        .route("/pool/expand", post(pool::expand))
        .route("/devices", get(pool::devices))
        .route("/jobs", get(pool::jobs))
        .route("/jobs/{id}", get(pool::job))
        .route("/snapshots", post(snapshots::create).get(snapshots::list))
        .route("/snapshots/{id}", axum::routing::delete(snapshots::delete))
        .route("/snapshots/{id}/restore", post(snapshots::restore))
        .route(
            "/snapshots/schedules",
            post(snapshots::create_schedule).get(snapshots::list_schedules),
        )
        .route(
            "/snapshots/schedules/{id}",
            axum::routing::delete(snapshots::delete_schedule),
        )
        .route(
            "/pool/scrub/schedule",
            get(pool::scrub_schedule).put(pool::set_scrub_schedule),
        )
        .route("/audit", get(system::audit))
        .route("/system/tls", get(tls::get).put(tls::replace))
        .route("/events", get(events::list))
        .route("/events/{id}/ack", post(events::ack))
        .route(
            "/events/webhook",
            get(events::webhook_get)
                .put(events::webhook_put)
                .delete(events::webhook_delete),
        )
        .route("/telemetry", get(crate::telemetry::report))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found);
    Router::new()
        .nest("/api/v1", api)
        .route("/metrics", get(crate::telemetry::metrics))
        .merge(crate::ui::router())
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(RequestBodyLimitLayer::new(MAX_BODY_BYTES))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        // Firmware bundles are hundreds of MB and stream for minutes: the update routes
        // carry their own limits and are merged after the body-size and timeout layers.
        .merge(crate::system::router())
        .with_state(state)
}
