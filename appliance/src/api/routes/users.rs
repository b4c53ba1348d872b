//! User accounts. Admins manage everyone; anyone may change their own password.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::auth::Auth;
use crate::api::errors::{AuthErrors, BodyErrors, Conflict, NotFound};
use crate::api::extract::{double_option, ApiJson, ApiPath};
use crate::api::problem::{ApiResult, Problem};
use crate::db::{rfc3339, Role, User};
use crate::state::{AppState, ConfigChange};

/// User creation request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    /// Login name: 1-64 of `A-Z a-z 0-9 . _ -`.
    #[schema(
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        min_length = 1,
        max_length = 64
    )]
    pub name: String,
    /// Password (8-256 characters). Used for SMB (NTLMv2) and, with a role, the web UI/API.
    #[schema(min_length = 8, max_length = 256)]
    pub password: String,
    /// Web/API role; absent or null for an SMB-only account.
    pub role: Option<Role>,
}

/// User change request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateUser {
    /// New password (8-256 characters).
    #[schema(min_length = 8, max_length = 256)]
    pub password: Option<String>,
    /// New role; null makes the account SMB-only.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<Role>, nullable)]
    pub role: Option<Option<Role>>,
}

/// A user as the API shows it (no secrets).
#[derive(Debug, Serialize, ToSchema)]
pub struct UserOut {
    /// Login name.
    pub name: String,
    /// Role, or null for SMB-only accounts.
    pub role: Option<Role>,
    /// RFC 3339.
    pub created_at: String,
}

impl From<User> for UserOut {
    fn from(u: User) -> UserOut {
        UserOut {
            name: u.name,
            role: u.role,
            created_at: rfc3339(u.created_at),
        }
    }
}

/// Creates a user (admin).
#[utoipa::path(post, path = "/api/v1/users", tag = "users", request_body = CreateUser,
    responses((status = 201, description = "Created", body = UserOut), AuthErrors, BodyErrors, Conflict),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(req): ApiJson<CreateUser>,
) -> ApiResult<(StatusCode, Json<UserOut>)> {
    auth.require(Role::Admin)?;
    let actor = auth.actor();
    let user = state
        .db
        .call(move |db| db.create_user(&actor, &req.name, &req.password, req.role))
        .await?;
    state.notify(ConfigChange::Users);
    Ok((StatusCode::CREATED, Json(user.into())))
}

/// Lists users: operators and admins see everyone, a viewer only itself.
#[utoipa::path(get, path = "/api/v1/users", tag = "users",
    responses((status = 200, description = "Users", body = Vec<UserOut>), AuthErrors),
    security(("bearer" = [])))]
pub async fn list(State(state): State<AppState>, auth: Auth) -> ApiResult<Json<Vec<UserOut>>> {
    let users = state.db.call(|db| db.users()).await?;
    let all = auth.principal.role >= Role::Operator;
    Ok(Json(
        users
            .into_iter()
            .filter(|u| all || u.name.eq_ignore_ascii_case(&auth.principal.user))
            .map(UserOut::from)
            .collect(),
    ))
}

/// One user (operators and admins, or the user itself).
#[utoipa::path(get, path = "/api/v1/users/{name}", tag = "users",
    params(("name" = String, Path, description = "User name")),
    responses((status = 200, description = "The user", body = UserOut), AuthErrors, NotFound),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<UserOut>> {
    let own = name.eq_ignore_ascii_case(&auth.principal.user);
    if !own {
        auth.require(Role::Operator)?;
    }
    let lookup = name.clone();
    let user = state.db.call(move |db| db.user(&lookup)).await?;
    user.map(|u| Json(u.into()))
        .ok_or_else(|| Problem::not_found(format!("user {name} not found")))
}

/// Changes a password (admin, or the user itself) or a role (admin).
#[utoipa::path(patch, path = "/api/v1/users/{name}", tag = "users", request_body = UpdateUser,
    params(("name" = String, Path, description = "User name")),
    responses((status = 200, description = "Updated", body = UserOut), AuthErrors, BodyErrors, NotFound, Conflict),
    security(("bearer" = [])))]
pub async fn update(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<UpdateUser>,
) -> ApiResult<Json<UserOut>> {
    let own = name.eq_ignore_ascii_case(&auth.principal.user);
    if req.role.is_some() || !own {
        auth.require(Role::Admin)?;
    }
    let actor = auth.actor();
    let new_password = req.password.is_some();
    let user = state
        .db
        .call(move |db| db.update_user(&actor, &name, req.password.as_deref(), req.role))
        .await?;
    if new_password && user.name == "admin" {
        // The generated first-start password is no longer valid: stop showing it (the
        // image's console banner prints it while the file exists).
        let path = state.data_dir.join(crate::serve::INITIAL_PASSWORD_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::info!(
                "admin password changed: removed the generated first-start password file"
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(error = %e, path = %path.display(), "could not remove the first-start password file")
            }
        }
    }
    state.notify(ConfigChange::Users);
    Ok(Json(user.into()))
}

/// Deletes a user (admin). The last admin cannot be deleted.
#[utoipa::path(delete, path = "/api/v1/users/{name}", tag = "users",
    params(("name" = String, Path, description = "User name")),
    responses((status = 204, description = "Deleted"), AuthErrors, NotFound, Conflict),
    security(("bearer" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    auth.require(Role::Admin)?;
    let actor = auth.actor();
    state
        .db
        .call(move |db| db.delete_user(&actor, &name))
        .await?;
    state.notify(ConfigChange::Users);
    Ok(StatusCode::NO_CONTENT)
}
