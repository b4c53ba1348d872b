//! RFC 9457 problem details: every error the API returns, with a 4xx for anything the
//! caller got wrong. A 5xx means a bug or a failing disk, and is logged.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::db::DbError;

/// Media type of problem responses.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// A problem details object.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Problem {
    /// A URI reference identifying the problem type (`about:blank` for plain HTTP errors).
    #[serde(rename = "type")]
    pub kind: String,
    /// Short summary of the problem type.
    pub title: String,
    /// HTTP status code.
    pub status: u16,
    /// What went wrong with this request, for a human.
    pub detail: String,
}

impl Problem {
    /// A problem with the status's standard title.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Problem {
        Problem {
            kind: "about:blank".into(),
            title: status.canonical_reason().unwrap_or("Error").into(),
            status: status.as_u16(),
            detail: detail.into(),
        }
    }

    /// 400.
    pub fn bad_request(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, detail)
    }
    /// 401.
    pub fn unauthorized(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::UNAUTHORIZED, detail)
    }
    /// 403.
    pub fn forbidden(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::FORBIDDEN, detail)
    }
    /// 404.
    pub fn not_found(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::NOT_FOUND, detail)
    }
    /// 422.
    pub fn unprocessable(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
    }
    /// 500: logs the cause; the client sees no internals.
    pub fn internal(cause: &dyn std::fmt::Display) -> Problem {
        tracing::error!(error = %cause, "internal error serving API request");
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error; see the appliance log",
        )
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut resp = (status, body).into_response();
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        resp
    }
}

impl From<DbError> for Problem {
    fn from(err: DbError) -> Problem {
        match err {
            DbError::NotFound(what) => Problem::not_found(format!("{what} not found")),
            DbError::Conflict(why) => Problem::new(StatusCode::CONFLICT, why),
            DbError::Invalid(why) => Problem::unprocessable(why),
            // The pool's file system refused the size: the request asked for too much.
            DbError::Io { context, source } if source.raw_os_error() == Some(libc::EFBIG) => {
                Problem::unprocessable(format!(
                    "{context}: larger than the pool's file system allows"
                ))
            }
            DbError::Io { context, source }
                if matches!(
                    source.raw_os_error(),
                    Some(libc::ENOSPC) | Some(libc::EDQUOT)
                ) =>
            {
                Problem::new(StatusCode::CONFLICT, format!("{context}: the pool is full"))
            }
            DbError::Io { context, source } if source.raw_os_error() == Some(libc::EBUSY) => {
                Problem::new(
                    StatusCode::CONFLICT,
                    format!(
                        "{context}: the managed pool is being created; try again when its job ends"
                    ),
                )
            }
            DbError::Io { context, source }
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                Problem::new(
                    StatusCode::CONFLICT,
                    format!("{context}: a leftover file of that name is in the pool"),
                )
            }
            other => Problem::internal(&other),
        }
    }
}

/// Result alias for handlers.
pub type ApiResult<T> = Result<T, Problem>;
