//! The form posts. Each checks the form's CSRF field, turns the fields into the REST
//! request and calls the REST handler with the caller's [`Auth`]; on success it redirects
//! (303) to its page, on a problem it renders that page again with the problem.

use std::future::Future;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;

use super::pages::{login_page, render, Page};
use super::{check_csrf, see_other, Fields, Session};
use crate::api::auth::{Auth, RemoteAddr};
use crate::api::extract::{ApiJson, ApiPath};
use crate::api::problem::Problem;
use crate::api::routes::{
    events, login as api_login, nvme, shares, system, tokens, users, volumes,
};
use crate::db::Role;
use crate::state::AppState;

/// Largest login response body read back for its problem detail.
const LOGIN_BODY_LIMIT: usize = 64 * 1024;

/// Runs a form post: checks the CSRF field, runs `action` with the fields, then
/// redirects to `to` on success or renders `page` again with the problem.
async fn submit<F, Fut, T>(
    state: &AppState,
    auth: &Auth,
    body: &[u8],
    page: Page,
    to: &str,
    action: F,
) -> Response
where
    F: FnOnce(Fields) -> Fut,
    Fut: Future<Output = Result<T, Problem>>,
{
    let result = match form(auth, body) {
        Ok(fields) => action(fields).await,
        Err(p) => Err(p),
    };
    match result {
        Ok(_) => see_other(to),
        Err(problem) => render(state, auth, page, Some(problem)).await,
    }
}

/// Parses the body and checks its CSRF field.
fn form(auth: &Auth, body: &[u8]) -> Result<Fields, Problem> {
    let fields = Fields::parse(body)?;
    check_csrf(auth, &fields.text("csrf"))?;
    Ok(fields)
}

/// `POST /ui/login` (`username`, `password`): logs in through the API's login handler
/// (same rate limit, audit and failed-login events) and sets its session cookie. A login
/// posted from another site (`Sec-Fetch-Site: cross-site`) is refused, so no page can
/// log a browser into an account of its choosing.
pub async fn login(
    State(state): State<AppState>,
    RemoteAddr(remote): RemoteAddr,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site")
    {
        let p = Problem::forbidden("log in from this appliance's own login page");
        return login_page(StatusCode::FORBIDDEN, String::new(), Some(&p));
    }
    let fields = match Fields::parse(&body) {
        Ok(f) => f,
        Err(p) => return login_page(StatusCode::BAD_REQUEST, String::new(), Some(&p)),
    };
    let username = fields.text("username");
    let req = api_login::LoginRequest {
        username: username.clone(),
        password: fields.text("password"),
    };
    let resp = match api_login::login(State(state), RemoteAddr(remote), ApiJson(req)).await {
        Ok(resp) => resp,
        Err(p) => {
            let status = StatusCode::from_u16(p.status).unwrap_or(StatusCode::UNAUTHORIZED);
            return login_page(status, username, Some(&p));
        }
    };
    if !resp.status().is_success() {
        // The handler answers some refusals (429) as a ready response: show its detail.
        let status = resp.status();
        let retry = resp.headers().get(header::RETRY_AFTER).cloned();
        let detail = axum::body::to_bytes(resp.into_body(), LOGIN_BODY_LIMIT)
            .await
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v.get("detail").and_then(|d| d.as_str()).map(String::from))
            .unwrap_or_else(|| "login refused".to_string());
        let mut page = login_page(status, username, Some(&Problem::new(status, detail)));
        if let Some(retry) = retry {
            page.headers_mut().insert(header::RETRY_AFTER, retry);
        }
        return page;
    }
    let mut out = see_other("/");
    if let Some(cookie) = resp.headers().get(header::SET_COOKIE) {
        out.headers_mut().insert(header::SET_COOKIE, cookie.clone());
    }
    out
}

/// `POST /ui/logout`: revokes the session and clears the cookie.
pub async fn logout(
    State(state): State<AppState>,
    Session(auth): Session,
    body: Bytes,
) -> Response {
    if let Err(p) = form(&auth, &body) {
        return render(&state, &auth, Page::Dashboard, Some(p)).await;
    }
    match api_login::logout(State(state.clone()), auth.clone()).await {
        Ok(resp) => {
            let mut out = see_other("/");
            if let Some(cookie) = resp.headers().get(header::SET_COOKIE) {
                out.headers_mut().insert(header::SET_COOKIE, cookie.clone());
            }
            out
        }
        Err(p) => render(&state, &auth, Page::Dashboard, Some(p)).await,
    }
}

/// Splits a comma- or space-separated list, dropping empty items.
fn split_list(text: &str) -> Vec<String> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn size_field(fields: &Fields, key: &str) -> Result<Option<u64>, Problem> {
    quarry_webui::parse_size(&fields.text(key))
        .map_err(|e| Problem::unprocessable(format!("{key}: {e}")))
}

/// `POST /ui/shares`: creates a share (`name`, `quota`, `users`, `comment`, `read_only`,
/// `encrypt`).
pub async fn share_create(
    State(state): State<AppState>,
    Session(auth): Session,
    body: Bytes,
) -> Response {
    let (st, au) = (state.clone(), auth.clone());
    submit(
        &state,
        &auth,
        &body,
        Page::Shares,
        "/ui/shares",
        |f| async move {
            let req = shares::CreateShare {
                name: f.text("name").trim().to_string(),
                quota_bytes: size_field(&f, "quota")?,
                read_only: f.flag("read_only"),
                encrypt: f.flag("encrypt"),
                guest_ok: false,
                continuously_available: f.flag("continuously_available"),
                users: split_list(&f.text("users")),
                comment: f.text("comment"),
            };
            shares::create(State(st), au, ApiJson(req)).await
        },
    )
    .await
}

/// `POST /ui/shares/{name}/quota`: sets (or with an empty field, removes) the quota.
pub async fn share_quota(
    State(state): State<AppState>,
    Session(auth): Session,
    ApiPath(name): ApiPath<String>,
    body: Bytes,
) -> Response {
    let (st, au) = (state.clone(), auth.clone());
    submit(
        &state,
        &auth,
        &body,
        Page::Shares,
        "/ui/shares",
        |f| async move {
            let req = shares::UpdateShare {
                quota_bytes: Some(size_field(&f, "quota")?),
                read_only: None,
                encrypt: None,
                guest_ok: None,
                continuously_available: None,
                users: None,
                comment: None,
            };
            shares::update(State(st), au, ApiPath(name), ApiJson(req)).await
        },
    )
    .await
}

/// `POST /ui/shares/{name}/access`: sets who may use the share and how (`users`,
/// `read_only`, `encrypt`, `guest_ok`, `continuously_available`).
pub async fn share_access(
    State(state): State<AppState>,
    Session(auth): Session,
    ApiPath(name): ApiPath<String>,
    body: Bytes,
) -> Response {
    let (st, au) = (state.clone(), auth.clone());
    submit(
        &state,
        &auth,
        &body,
        Page::Shares,
        "/ui/shares",
        |f| async move {
            let req = shares::UpdateShare {
                quota_bytes: None,
                read_only: Some(f.flag("read_only")),
                encrypt: Some(f.flag("encrypt")),
                guest_ok: Some(f.flag("guest_ok")),
                continuously_available: Some(f.flag("continuously_available")),
                users: Some(split_list(&f.text("users"))),
                comment: None,
            };
            shares::update(State(st), au, ApiPath(name), ApiJson(req)).await
        },
    )
    .await
}

/// `POST /ui/tokens`: creates an API token for the signed-in user (`name`, `days`: empty
/// for no expiry) and shows its secret once.
pub async fn token_create(
    State(state): State<AppState>,
    Session(auth): Session,
    body: Bytes,
) -> Response {
    let created = async {
        let f = form(&auth, &body)?;
        let days = f.text("days");
        let expires_in_days = match days.trim() {
            "" => None,
            d => Some(d.parse::<u32>().map_err(|_| {
                Problem::unprocessable(format!("days: {d:?} is not a whole number of days"))
            })?),
        };
        let req = tokens::CreateToken {
            name: f.text("name").trim().to_string(),
            expires_in_days,
        };
        tokens::create(State(state.clone()), auth.clone(), ApiJson(req)).await
    }
    .await;
    match created {
        Ok((_, axum::Json(new))) => {
            super::pages::tokens_with_secret(&state, &auth, new.token).await
        }
        Err(problem) => render(&state, &auth, Page::Tokens, Some(problem)).await,
    }
}

/// `POST /ui/tokens/{id}/revoke`: revokes an API token.
pub async fn token_revoke(
    State(state): State<AppState>,
    Session(auth): Session,
    ApiPath(id): ApiPath<i64>,
    body: Bytes,
) -> Response {
    submit(&state, &auth, &body, Page::Tokens, "/ui/tokens", |_| {
        tokens::delete(State(state.clone()), auth.clone(), ApiPath(id))
    })
    .await
}

/// `POST /ui/nvme`: creates an NVMe subsystem (`nqn`, `hosts`, `allow_any_host`).
pub async fn subsystem_create(
    State(state): State<AppState>,
    Session(auth): Session,
    body: Bytes,
) -> Response {
    let (st, au) = (state.clone(), auth.clone());
    submit(
        &state,
        &auth,
        &body,
        Page::Volumes,
        "/ui/volumes",
        |f| async move {
            let req = nvme::CreateSubsystem {
                nqn: f.text("nqn").trim().to_string(),
                allow_any_host: f.flag("allow_any_host"),
                hosts: split_list(&f.text("hosts")),
            };
            nvme::create(State(st), au, ApiJson(req)).await
        },
    )
    .await
}

/// `POST /ui/nvme/{nqn}/hosts`: sets the allowed hosts (`hosts`, `allow_any_host`).
pub async fn subsystem_hosts(
    State(state): State<AppState>,
    Session(auth): Session,
    ApiPath(nqn): ApiPath<String>,
    body: Bytes,
) -> Response {
    let (st, au) = (state.clone(), auth.clone());
    submit(
        &state,
        &auth,
        &body,
        Page::Volumes,
        "/ui/volumes",
        |f| async move {
            let req = nvme::UpdateSubsystem {
                allow_any_host: Some(f.flag("allow_any_host")),
                hosts: Some(split_list(&f.text("hosts"))),
            };
            nvme::update(State(st), au, ApiPath(nqn), ApiJson(req)).await
        },
    )
    .await
}

/// `POST /ui/nvme/{nqn}/delete`: deletes a subsystem (its volumes stay).
pub async fn subsystem_delete(
    State(state): State<AppState>,
    Session(auth): Session,
    ApiPath(nqn): ApiPath<String>,
    body: Bytes,
) -> Response {
    submit(&state, &auth, &body, Page::Volumes, "/ui/volumes", |_| {
        nvme::delete(State(state.clone()), auth.clone(), ApiPath(nqn))
    })
    .await
}

/// `POST /ui/nvme/{nqn}/namespaces`: exports a volume as a namespace (`volume`).
pub async fn namespace_add(
    State(state): State<AppState>,
    Session(auth): Session,
    ApiPath(nqn): ApiPath<String>,
    body: Bytes,
) -> Response {
    let (st, au) = (state.clone(), auth.clone());
    submit(
        &state,
        &auth,
        &body,
        Page::Volumes,
        "/ui/volumes",
        |f| async move {
            let req = nvme::AddNamespace {
                volume: f.text("volume").trim().to_string(),
                nsid: None,
            };
            nvme::add_namespace(State(st), au, ApiPath(nqn), ApiJson(req)).await
        },
    )
    .await
}

/// `POST /ui/nvme/{nqn}/namespaces/{nsid}/delete`: removes a namespace.
pub async fn namespace_remove(
    State(state): State<AppState>,
    Session(auth): Session,
    ApiPath((nqn, nsid)): ApiPath<(String, u32)>,
    body: Bytes,
) -> Response {
    submit(&state, &auth, &body, Page::Volumes, "/ui/volumes", |_| {
        nvme::remove_namespace(State(state.clone()), auth.clone(), ApiPath((nqn, nsid)))
    })
    .await
}

/// A required size field.
fn required_size(fields: &Fields, key: &str) -> Result<u64, Problem> {
    size_field(fields, key)?.ok_or_else(|| Problem::unprocessable(format!("{key}: required")))
}

/// `POST /ui/volumes`: creates a volume (`name`, `size`).
pub async fn volume_create(
    State(state): State<AppState>,
    Session(auth): Session,
    body: Bytes,
) -> Response {
    let (st, au) = (state.clone(), auth.clone());
    submit(
        &state,
        &auth,
        &body,
        Page::Volumes,
        "/ui/volumes",
        |f| async move {
            let req = volumes::CreateVolume {
                name: f.text("name").trim().to_string(),
                size_bytes: Some(required_size(&f, "size")?),
                from_snapshot: None,
            };
            volumes::create(State(st), au, ApiJson(req)).await
        },
    )
    .await
}

/// `POST /ui/volumes/{name}/resize`: grows a volume (`size`).
pub async fn volume_resize(
    State(state): State<AppState>,
    Session(auth): Session,
    ApiPath(name): ApiPath<String>,
    body: Bytes,
) -> Response {
    let (st, au) = (state.clone(), auth.clone());
    submit(
        &state,
        &auth,
        &body,
        Page::Volumes,
        "/ui/volumes",
        |f| async move {
            let req = volumes::ResizeVolume {
                size_bytes: required_size(&f, "size")?,
            };
            volumes::resize(State(st), au, ApiPath(name), ApiJson(req)).await
        },
    )
    .await
}

/// `POST /ui/volumes/{name}/delete`: deletes a volume and its data.
pub async fn volume_delete(
    State(state): State<AppState>,
    Session(auth): Session,
    ApiPath(name): ApiPath<String>,
    body: Bytes,
) -> Response {
    submit(&state, &auth, &body, Page::Volumes, "/ui/volumes", |_| {
        volumes::delete(State(state.clone()), auth.clone(), ApiPath(name))
    })
    .await
}

/// `POST /ui/shares/{name}/delete`: deletes the share and its files.
pub async fn share_delete(
    State(state): State<AppState>,
    Session(auth): Session,
    ApiPath(name): ApiPath<String>,
    body: Bytes,
) -> Response {
    submit(&state, &auth, &body, Page::Shares, "/ui/shares", |_| {
        shares::delete(State(state.clone()), auth.clone(), ApiPath(name))
    })
    .await
}

/// `POST /ui/users`: creates a user (`name`, `password`, `role`: empty for SMB only).
pub async fn user_create(
    State(state): State<AppState>,
    Session(auth): Session,
    body: Bytes,
) -> Response {
    let (st, au) = (state.clone(), auth.clone());
    submit(
        &state,
        &auth,
        &body,
        Page::Users,
        "/ui/users",
        |f| async move {
            let role = role_field(&f)?;
            let req = users::CreateUser {
                name: f.text("name").trim().to_string(),
                password: f.text("password"),
                role,
            };
            users::create(State(st), au, ApiJson(req)).await
        },
    )
    .await
}

/// The `role` field: empty for SMB-only.
fn role_field(f: &Fields) -> Result<Option<Role>, Problem> {
    match f.text("role").as_str() {
        "" => Ok(None),
        r => Role::parse(r)
            .map(Some)
            .ok_or_else(|| Problem::unprocessable(format!("role: unknown role {r:?}"))),
    }
}

/// `POST /ui/users/{name}/edit`: sets the role (`role`) and, when `password` is not
/// empty, a new password.
pub async fn user_edit(
    State(state): State<AppState>,
    Session(auth): Session,
    ApiPath(name): ApiPath<String>,
    body: Bytes,
) -> Response {
    let (st, au) = (state.clone(), auth.clone());
    submit(
        &state,
        &auth,
        &body,
        Page::Users,
        "/ui/users",
        |f| async move {
            let password = f.text("password");
            let req = users::UpdateUser {
                password: (!password.is_empty()).then_some(password),
                role: Some(role_field(&f)?),
            };
            users::update(State(st), au, ApiPath(name), ApiJson(req)).await
        },
    )
    .await
}

/// `POST /ui/users/{name}/delete`.
pub async fn user_delete(
    State(state): State<AppState>,
    Session(auth): Session,
    ApiPath(name): ApiPath<String>,
    body: Bytes,
) -> Response {
    submit(&state, &auth, &body, Page::Users, "/ui/users", |_| {
        users::delete(State(state.clone()), auth.clone(), ApiPath(name))
    })
    .await
}

/// `POST /ui/sessions/{id}/disconnect`.
pub async fn disconnect(
    State(state): State<AppState>,
    Session(auth): Session,
    ApiPath(id): ApiPath<u64>,
    body: Bytes,
) -> Response {
    submit(&state, &auth, &body, Page::Sessions, "/ui/sessions", |_| {
        system::disconnect(State(state.clone()), auth.clone(), ApiPath(id))
    })
    .await
}

/// `POST /ui/events/{id}/ack`.
pub async fn ack(
    State(state): State<AppState>,
    Session(auth): Session,
    ApiPath(id): ApiPath<i64>,
    body: Bytes,
) -> Response {
    submit(&state, &auth, &body, Page::Events, "/ui/events", |_| {
        events::ack(State(state.clone()), auth.clone(), ApiPath(id))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_user_lists() {
        assert_eq!(split_list(""), Vec::<String>::new());
        assert_eq!(split_list(" a, b ,,c d"), vec!["a", "b", "c", "d"]);
    }
}
