//! The error responses shared by routes, for the OpenAPI document. Listing them once
//! keeps the document honest about every status a route can return.

use utoipa::IntoResponses;

use super::problem::Problem;

/// Errors any authenticated route can return.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum AuthErrors {
    /// No, malformed, invalid or expired credentials.
    #[response(
        status = 401,
        description = "Not authenticated",
        content_type = "application/problem+json"
    )]
    Unauthorized(Problem),
    /// Authenticated, but the role does not allow this (or a cookie request lacks its CSRF token).
    #[response(
        status = 403,
        description = "Forbidden",
        content_type = "application/problem+json"
    )]
    Forbidden(Problem),
    /// The request took too long.
    #[response(status = 408, description = "Request timeout")]
    Timeout(()),
}

/// Errors of routes that take a JSON body.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum BodyErrors {
    /// The body is not valid JSON.
    #[response(
        status = 400,
        description = "Malformed request",
        content_type = "application/problem+json"
    )]
    BadRequest(Problem),
    /// The body exceeds the size limit.
    #[response(
        status = 413,
        description = "Body too large",
        content_type = "application/problem+json"
    )]
    TooLarge(Problem),
    /// The body is not `application/json`.
    #[response(
        status = 415,
        description = "Unsupported media type",
        content_type = "application/problem+json"
    )]
    MediaType(Problem),
    /// The body is JSON but not acceptable: unknown field, wrong type, failed validation.
    #[response(
        status = 422,
        description = "Invalid request",
        content_type = "application/problem+json"
    )]
    Unprocessable(Problem),
}

/// A named object does not exist.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum NotFound {
    /// Not found.
    #[response(
        status = 404,
        description = "Not found",
        content_type = "application/problem+json"
    )]
    NotFound(Problem),
}

/// The change conflicts with the current state.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum Conflict {
    /// Conflict (duplicate, in use, last admin).
    #[response(
        status = 409,
        description = "Conflict",
        content_type = "application/problem+json"
    )]
    Conflict(Problem),
}

/// Query-string errors.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum QueryErrors {
    /// The query string is malformed.
    #[response(
        status = 400,
        description = "Malformed query",
        content_type = "application/problem+json"
    )]
    BadRequest(Problem),
}
