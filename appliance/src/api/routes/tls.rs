//! The HTTPS certificate: what is in use (viewer) and replacing it with the admin's own
//! certificate and key (admin, audited). The key is never returned.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use utoipa::ToSchema;

use crate::api::auth::Auth;
use crate::api::errors::{AuthErrors, BodyErrors, NotFound};
use crate::api::extract::ApiJson;
use crate::api::problem::{ApiResult, Problem};
use crate::db::{DbError, Role};
use crate::state::AppState;
use crate::tls::{CertInfo, TlsError, TlsStore};

/// A certificate (chain, leaf first) and its private key, both PEM.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaceCertificate {
    /// PEM CERTIFICATE blocks, the server's certificate first, then intermediates.
    pub certificate_pem: String,
    /// PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC) matching the certificate.
    pub private_key_pem: String,
}

fn store(state: &AppState) -> Result<std::sync::Arc<TlsStore>, Problem> {
    state
        .tls
        .clone()
        .ok_or_else(|| Problem::new(StatusCode::NOT_FOUND, "no TLS certificate is configured"))
}

/// The certificate the HTTPS listener serves (viewer).
#[utoipa::path(get, path = "/api/v1/system/tls", tag = "system",
    responses((status = 200, description = "Certificate in use", body = CertInfo), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn get(State(state): State<AppState>, auth: Auth) -> ApiResult<Json<CertInfo>> {
    auth.require(Role::Viewer)?;
    Ok(Json(store(&state)?.info()))
}

/// Replaces the HTTPS certificate and key (admin): checked (parses, key matches, not
/// expired), written atomically, served to the next connection without a restart.
#[utoipa::path(put, path = "/api/v1/system/tls", tag = "system", request_body = ReplaceCertificate,
    responses((status = 200, description = "Now in use", body = CertInfo), AuthErrors, BodyErrors, NotFound),
    security(("bearer" = [])))]
pub async fn replace(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<ReplaceCertificate>,
) -> ApiResult<Json<CertInfo>> {
    auth.require(Role::Admin)?;
    let tls = store(&state)?;
    let actor = auth.actor();
    let info = state
        .db
        .call(move |db| {
            db.write(
                &actor,
                "tls.replace",
                "https",
                serde_json::json!({}),
                |_| {
                    tls.replace(&req.certificate_pem, &req.private_key_pem)
                        .map_err(|e| match e {
                            TlsError::Invalid(why) => DbError::Invalid(why),
                            TlsError::Io { context, source } => DbError::Io { context, source },
                            TlsError::Generate(e) => DbError::Invalid(e.to_string()),
                        })
                },
            )
        })
        .await?;
    tracing::info!(sha256 = %info.sha256_fingerprint, by = %auth.principal.user, "HTTPS certificate replaced");
    Ok(Json(info))
}
