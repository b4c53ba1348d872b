//! Long-lived API tokens for automation. The secret is in the creation response only.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::auth::Auth;
use crate::api::errors::{AuthErrors, BodyErrors, Conflict, NotFound};
use crate::api::extract::{ApiJson, ApiPath};
use crate::api::problem::{ApiResult, Problem};
use crate::db::tokens::TokenKind;
use crate::db::{rfc3339, Role, TokenInfo};
use crate::state::AppState;

/// Longest token lifetime accepted, in days.
pub const MAX_TOKEN_DAYS: u32 = 3650;

/// Token creation request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// Label (e.g. the automation using it).
    #[schema(min_length = 1, max_length = 100)]
    pub name: String,
    /// Lifetime in days; absent for a token that does not expire.
    #[schema(minimum = 1, maximum = 3650)]
    pub expires_in_days: Option<u32>,
}

/// A token's metadata (never its secret).
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenOut {
    /// Id (to revoke it).
    pub id: i64,
    /// Label.
    pub name: String,
    /// Owner.
    pub user: String,
    /// `api` or `session`.
    pub kind: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339, if it expires.
    pub expires_at: Option<String>,
    /// RFC 3339, if used.
    pub last_used_at: Option<String>,
}

/// A newly created token, with its secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewTokenOut {
    /// The secret: shown once, store it now.
    pub token: String,
    /// Metadata.
    #[serde(flatten)]
    pub info: TokenOut,
}

impl From<TokenInfo> for TokenOut {
    fn from(t: TokenInfo) -> TokenOut {
        TokenOut {
            id: t.id,
            name: t.name,
            user: t.user,
            kind: t.kind,
            created_at: rfc3339(t.created_at),
            expires_at: t.expires_at.map(rfc3339),
            last_used_at: t.last_used_at.map(rfc3339),
        }
    }
}

/// Creates an API token for the caller.
#[utoipa::path(post, path = "/api/v1/tokens", tag = "auth", request_body = CreateToken,
    responses((status = 201, description = "Created; the secret is in `token`", body = NewTokenOut), AuthErrors, BodyErrors, Conflict),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<CreateToken>,
) -> ApiResult<(StatusCode, Json<NewTokenOut>)> {
    let expires_in = match req.expires_in_days {
        Some(d) if d == 0 || d > MAX_TOKEN_DAYS => {
            return Err(Problem::unprocessable(format!(
                "expires_in_days must be 1-{MAX_TOKEN_DAYS}"
            )))
        }
        Some(d) => Some(i64::from(d) * 86_400),
        None => None,
    };
    let actor = auth.actor();
    let user_id = auth.principal.user_id;
    let created = state
        .db
        .call(move |db| db.create_token(&actor, user_id, &req.name, TokenKind::Api, expires_in))
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(NewTokenOut {
            token: created.plain,
            info: created.info.into(),
        }),
    ))
}

/// Lists tokens: an admin sees everyone's, others their own.
#[utoipa::path(get, path = "/api/v1/tokens", tag = "auth",
    responses((status = 200, description = "Tokens", body = Vec<TokenOut>), AuthErrors),
    security(("bearer" = [])))]
pub async fn list(State(state): State<AppState>, auth: Auth) -> ApiResult<Json<Vec<TokenOut>>> {
    let user = (auth.principal.role != Role::Admin).then(|| auth.principal.user.clone());
    let tokens = state.db.call(move |db| db.tokens(user.as_deref())).await?;
    Ok(Json(tokens.into_iter().map(TokenOut::from).collect()))
}

/// Revokes a token (your own, or anyone's as admin).
#[utoipa::path(delete, path = "/api/v1/tokens/{id}", tag = "auth",
    params(("id" = i64, Path, description = "Token id")),
    responses((status = 204, description = "Revoked"), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<StatusCode> {
    let token = state.db.call(move |db| db.token(id)).await?;
    // Someone else's token is reported as absent, not forbidden: ids are not secrets,
    // but whose they are is.
    let visible =
        token.filter(|t| auth.principal.role == Role::Admin || t.user == auth.principal.user);
    if visible.is_none() {
        return Err(Problem::not_found(format!("token {id} not found")));
    }
    let actor = auth.actor();
    state.db.call(move |db| db.delete_token(&actor, id)).await?;
    Ok(StatusCode::NO_CONTENT)
}
