//! NVMe-oF listeners (ports): list them, add one (bound before the answer, so a bad
//! address is refused right here), remove one. Network exposure is an admin decision.

use std::net::{IpAddr, SocketAddr};

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use utoipa::ToSchema;

use crate::api::auth::Auth;
use crate::api::errors::{AuthErrors, BodyErrors, Conflict, NotFound};
use crate::api::extract::{ApiJson, ApiPath};
use crate::api::problem::{ApiResult, Problem};
use crate::db::Role;
use crate::nvme_service::ports::{BoundListener, PortInfo, PortRole};
use crate::state::{AppState, ConfigChange};

/// Longest advertised address (a DNS name at most).
const MAX_ADVERTISE: usize = 253;

/// Listener creation request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateListener {
    /// `tcp` or `rdma` (refused with 422 when this build or machine has no RDMA).
    pub transport: String,
    /// IP address to bind (`0.0.0.0` or `::` for all).
    pub address: String,
    /// TCP port.
    #[schema(minimum = 1, maximum = 65535)]
    pub port: u16,
    /// Address hosts should use, put in discovery log entries (for NAT); an IP address
    /// or DNS name.
    pub advertise: Option<String>,
}

fn valid_advertise(a: &str) -> bool {
    !a.is_empty()
        && a.len() <= MAX_ADVERTISE
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'))
}

/// Every NVMe/TCP listener (viewer).
#[utoipa::path(get, path = "/api/v1/nvme/listeners", tag = "nvme",
    responses((status = 200, description = "Listeners", body = Vec<PortInfo>), AuthErrors),
    security(("bearer" = [])))]
pub async fn list(State(state): State<AppState>, auth: Auth) -> ApiResult<Json<Vec<PortInfo>>> {
    auth.require(Role::Viewer)?;
    Ok(Json(state.nvme_ports.list()))
}

/// Adds a listener and starts accepting on it (admin). Stored, so it is bound again
/// after a restart.
#[utoipa::path(post, path = "/api/v1/nvme/listeners", tag = "nvme", request_body = CreateListener,
    responses((status = 201, description = "Listening", body = PortInfo), AuthErrors, BodyErrors, Conflict),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<CreateListener>,
) -> ApiResult<(StatusCode, Json<PortInfo>)> {
    auth.require(Role::Admin)?;
    let rdma = match req.transport.as_str() {
        "tcp" => false,
        "rdma" => {
            if let Err(e) = quarry_nvmeof::rdma::availability() {
                return Err(Problem::unprocessable(format!(
                    "RDMA listeners unavailable: {e}"
                )));
            }
            true
        }
        other => {
            return Err(Problem::unprocessable(format!(
                "unknown transport {other:?}: use tcp or rdma"
            )))
        }
    };
    let ip: IpAddr = req
        .address
        .parse()
        .map_err(|_| Problem::unprocessable(format!("{:?} is not an IP address", req.address)))?;
    if req.port == 0 {
        return Err(Problem::unprocessable("port must be 1-65535"));
    }
    if let Some(a) = &req.advertise {
        if !valid_advertise(a) {
            return Err(Problem::unprocessable(
                "advertise must be an IP address or DNS name",
            ));
        }
    }
    let addr = SocketAddr::new(ip, req.port);
    let conflict = |e: &dyn std::fmt::Display| {
        Problem::new(
            StatusCode::CONFLICT,
            format!("cannot listen on {addr}: {e}"),
        )
    };
    let transport = if rdma { "rdma" } else { "tcp" };
    let bound = if rdma {
        BoundListener::Rdma(
            tokio::task::spawn_blocking(move || quarry_nvmeof::rdma::RdmaListener::bind(addr))
                .await
                .map_err(|e| Problem::internal(&e))?
                .map_err(|e| conflict(&e))?,
        )
    } else {
        BoundListener::Tcp(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| conflict(&e))?,
        )
    };
    let actor = auth.actor();
    let advertise = req.advertise.clone();
    let stored = state
        .db
        .call(move |db| {
            db.create_nvme_listener(&actor, transport, ip, req.port, advertise.as_deref())
        })
        .await?;
    let portid = state
        .nvme_ports
        .add_bound(
            bound,
            Some(stored.id),
            PortRole::Api,
            stored.advertise.clone(),
        )
        .map_err(|e| Problem::internal(&e))?;
    state.notify(ConfigChange::Subsystems);
    tracing::info!(url = %format!("nvme+{transport}://{addr}"), by = %auth.principal.user, "NVMe listener added");
    Ok((
        StatusCode::CREATED,
        Json(PortInfo {
            id: Some(stored.id),
            transport: transport.into(),
            address: ip.to_string(),
            port: req.port,
            advertise: stored.advertise,
            role: PortRole::Api,
            portid,
        }),
    ))
}

/// Removes a listener added through the API (admin). Hosts already connected through
/// it stay connected until they disconnect.
#[utoipa::path(delete, path = "/api/v1/nvme/listeners/{id}", tag = "nvme",
    params(("id" = i64, Path, description = "Listener id")),
    responses((status = 204, description = "Removed"), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<StatusCode> {
    auth.require(Role::Admin)?;
    let actor = auth.actor();
    state
        .db
        .call(move |db| db.delete_nvme_listener(&actor, id))
        .await?;
    state.nvme_ports.remove(id);
    state.notify(ConfigChange::Subsystems);
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertise_names_are_checked() {
        assert!(valid_advertise("10.0.2.2"));
        assert!(valid_advertise("fd00::1"));
        assert!(valid_advertise("storage-1.lab"));
        assert!(!valid_advertise(""));
        assert!(!valid_advertise("a b"));
        assert!(!valid_advertise(&"a".repeat(254)));
    }
}
