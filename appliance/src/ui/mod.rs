//! The web UI's HTTP side: server-rendered pages at `/` and `/ui/...`, their form posts,
//! and the embedded static assets. Templates and assets live in the `quarry-webui` crate.
//!
//! Pages authenticate with the session cookie set by login (the same token and table as
//! `POST /api/v1/auth/login`); a page request without a valid session goes to the login
//! page at `/`. Form posts carry the session's CSRF secret in a hidden `csrf` field,
//! checked here before anything runs. Every page and action calls the REST handlers in
//! [`crate::api::routes`] with the caller's [`Auth`], so role checks, validation, audit
//! rows and config-change notifications are the API's own; a refused action renders its
//! page again with the API's problem details and status (a viewer's post gets 403).

mod actions;
mod pages;

use pages::{show, Page};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use quarry_webui::pages::{ErrorPage, Layout, ProblemView};
use quarry_webui::Template;

use crate::api::auth::{constant_time_eq, cookie_token, remote_addr, Auth};
use crate::api::problem::Problem;
use crate::db::Role;
use crate::state::AppState;

/// The UI's routes (merged into the HTTP router beside `/api/v1`).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(pages::index))
        .route("/ui", get(|| async { Redirect::to("/") }))
        .route("/ui/login", post(actions::login))
        .route("/ui/logout", post(actions::logout))
        .route("/ui/shares", show(Page::Shares).post(actions::share_create))
        .route("/ui/shares/{name}/quota", post(actions::share_quota))
        .route("/ui/shares/{name}/access", post(actions::share_access))
        .route("/ui/shares/{name}/delete", post(actions::share_delete))
        .route("/ui/users", show(Page::Users).post(actions::user_create))
        .route("/ui/users/{name}/delete", post(actions::user_delete))
        .route("/ui/users/{name}/edit", post(actions::user_edit))
        .route("/ui/sessions", show(Page::Sessions))
        .route("/ui/sessions/{id}/disconnect", post(actions::disconnect))
        .route("/ui/events", show(Page::Events))
        .route("/ui/events/{id}/ack", post(actions::ack))
        .route("/ui/pool", show(Page::Pool))
        .route(
            "/ui/volumes",
            show(Page::Volumes).post(actions::volume_create),
        )
        .route("/ui/volumes/{name}/resize", post(actions::volume_resize))
        .route("/ui/volumes/{name}/delete", post(actions::volume_delete))
        .route("/ui/nvme", post(actions::subsystem_create))
        .route("/ui/nvme/{nqn}/hosts", post(actions::subsystem_hosts))
        .route("/ui/nvme/{nqn}/delete", post(actions::subsystem_delete))
        .route("/ui/nvme/{nqn}/namespaces", post(actions::namespace_add))
        .route(
            "/ui/nvme/{nqn}/namespaces/{nsid}/delete",
            post(actions::namespace_remove),
        )
        .route("/ui/snapshots", show(Page::Snapshots))
        .route("/ui/tokens", show(Page::Tokens).post(actions::token_create))
        .route("/ui/tokens/{id}/revoke", post(actions::token_revoke))
        .route("/ui/static/app.css", get(css))
        .route("/ui/static/app.js", get(js))
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", quarry_webui::APP_CSS)
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", quarry_webui::APP_JS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// The signed-in caller of a page, from the session cookie only (a bearer token is not a
/// browser session and is ignored here). `None` when there is no valid session.
pub struct MaybeSession(pub Option<Auth>);

impl FromRequestParts<AppState> for MaybeSession {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Some(token) = cookie_token(parts) else {
            return Ok(MaybeSession(None));
        };
        let remote = remote_addr(parts);
        let principal = state
            .db
            .call(move |db| db.authenticate_token(&token))
            .await
            .map_err(|e| error_page(None, Problem::from(e)))?;
        Ok(MaybeSession(
            principal.map(|principal| Auth { principal, remote }),
        ))
    }
}

/// A signed-in caller; without a valid session the request is sent to the login page.
pub struct Session(pub Auth);

impl FromRequestParts<AppState> for Session {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        match MaybeSession::from_request_parts(parts, state).await? {
            MaybeSession(Some(auth)) => Ok(Session(auth)),
            MaybeSession(None) => Err(Redirect::to("/").into_response()),
        }
    }
}

/// Refuses a form post whose `csrf` field is not the session's CSRF secret.
fn check_csrf(auth: &Auth, sent: &str) -> Result<(), Problem> {
    match auth.principal.csrf.as_deref() {
        Some(expected) if constant_time_eq(sent.as_bytes(), expected.as_bytes()) => Ok(()),
        _ => Err(Problem::forbidden(
            "missing or wrong CSRF token in the form; reload the page and try again",
        )),
    }
}

/// The layout of a signed-in page.
fn layout(auth: &Auth, active: &'static str, title: &str, error: Option<&Problem>) -> Layout {
    Layout {
        title: title.to_string(),
        active,
        user: auth.principal.user.clone(),
        role: auth.principal.role.as_str().to_string(),
        can_write: auth.principal.role >= Role::Operator,
        is_admin: auth.principal.role >= Role::Admin,
        csrf: auth.principal.csrf.clone().unwrap_or_default(),
        error: error.map(problem_view),
    }
}

fn problem_view(p: &Problem) -> ProblemView {
    ProblemView {
        status: p.status,
        title: p.title.clone(),
        detail: p.detail.clone(),
    }
}

/// Renders a template as an HTML response with `status` and the UI's security headers.
fn html(status: StatusCode, page: &impl Template) -> Response {
    match page.render() {
        Ok(body) => {
            let mut resp = (status, body).into_response();
            let h = resp.headers_mut();
            let headers: [(HeaderName, &'static str); 6] = [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (header::CACHE_CONTROL, "no-store"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                (header::X_FRAME_OPTIONS, "DENY"),
                (header::REFERRER_POLICY, "no-referrer"),
                (
                    header::CONTENT_SECURITY_POLICY,
                    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
                ),
            ];
            for (name, value) in headers {
                h.insert(name, HeaderValue::from_static(value));
            }
            resp
        }
        Err(e) => Problem::internal(&e).into_response(),
    }
}

/// An error page for `problem`, inside the layout when the caller is known.
fn error_page(auth: Option<&Auth>, problem: Problem) -> Response {
    let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let layout = match auth {
        Some(a) => layout(a, "", "Something went wrong", Some(&problem)),
        None => Layout {
            title: "Something went wrong".into(),
            error: Some(problem_view(&problem)),
            ..Layout::default()
        },
    };
    html(status, &ErrorPage { layout })
}

/// Form fields in order, as sent (`application/x-www-form-urlencoded`).
pub struct Fields(Vec<(String, String)>);

impl Fields {
    /// Parses a form body; anything undecodable is a 400 problem.
    fn parse(body: &[u8]) -> Result<Fields, Problem> {
        serde_urlencoded::from_bytes::<Vec<(String, String)>>(body)
            .map(Fields)
            .map_err(|e| Problem::bad_request(format!("malformed form: {e}")))
    }

    /// The first value of `key`, or `""`.
    fn text(&self, key: &str) -> String {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    /// A checkbox: present and not `off`/`false`.
    fn flag(&self, key: &str) -> bool {
        self.0
            .iter()
            .any(|(k, v)| k == key && !matches!(v.as_str(), "off" | "false" | "0"))
    }
}

/// Redirects to `to` with 303 (see other), so a reload does not post again.
fn see_other(to: &str) -> Response {
    Redirect::to(to).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Principal;

    fn auth(csrf: Option<&str>) -> Auth {
        Auth {
            principal: Principal {
                user_id: 1,
                user: "admin".into(),
                role: Role::Admin,
                token_id: 1,
                csrf: csrf.map(String::from),
            },
            remote: "127.0.0.1".into(),
        }
    }

    #[test]
    fn form_fields_parse_and_read() {
        let f = Fields::parse(b"csrf=x&name=a%20b&read_only=on&encrypt=off&name=second")
            .expect("parses");
        assert_eq!(f.text("name"), "a b");
        assert_eq!(f.text("missing"), "");
        assert!(f.flag("read_only"));
        assert!(!f.flag("encrypt"));
        assert!(!f.flag("missing"));
    }

    #[test]
    fn csrf_must_match_the_session() {
        assert!(check_csrf(&auth(Some("secret")), "secret").is_ok());
        assert_eq!(
            check_csrf(&auth(Some("secret")), "secreT").map_err(|p| p.status),
            Err(403)
        );
        assert_eq!(
            check_csrf(&auth(Some("secret")), "").map_err(|p| p.status),
            Err(403)
        );
        // An API token has no CSRF secret: it can never drive the UI's forms.
        assert_eq!(check_csrf(&auth(None), "").map_err(|p| p.status), Err(403));
    }
}
