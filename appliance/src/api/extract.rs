//! Extractors whose rejections are problem+json 4xx instead of axum's plain-text ones,
//! so a malformed body, an unknown field or a bad path never yields anything else.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::problem::Problem;

/// JSON body extractor with problem+json rejections.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // Parse to a JSON value first: serde would otherwise accept a struct written as an
        // array (`[null, null]`), which no client means and the schema does not allow.
        let value = match axum::Json::<serde_json::Value>::from_request(req, state).await {
            Ok(axum::Json(v)) => v,
            Err(rejection) => return Err(json_problem(rejection)),
        };
        if !value.is_object() {
            return Err(Problem::unprocessable(
                "the request body must be a JSON object",
            ));
        }
        serde_json::from_value(value)
            .map(ApiJson)
            .map_err(|e| Problem::unprocessable(format!("invalid request body: {e}")))
    }
}

fn json_problem(rejection: JsonRejection) -> Problem {
    let status = match &rejection {
        JsonRejection::MissingJsonContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        JsonRejection::JsonDataError(_) => StatusCode::UNPROCESSABLE_ENTITY,
        JsonRejection::JsonSyntaxError(_) => StatusCode::BAD_REQUEST,
        JsonRejection::BytesRejection(_) => StatusCode::PAYLOAD_TOO_LARGE,
        _ => StatusCode::BAD_REQUEST,
    };
    Problem::new(status, rejection.body_text())
}

/// Path parameters extractor with problem+json rejections.
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(ApiPath(v)),
            Err(rejection) => Err(path_problem(rejection)),
        }
    }
}

fn path_problem(rejection: PathRejection) -> Problem {
    Problem::new(StatusCode::NOT_FOUND, rejection.body_text())
}

/// Query string extractor with problem+json rejections.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(rejection) => Err(query_problem(rejection)),
        }
    }
}

fn query_problem(rejection: QueryRejection) -> Problem {
    Problem::bad_request(rejection.body_text())
}

/// Deserialises a field that distinguishes "absent" (`None`) from "null" (`Some(None)`),
/// for PATCH bodies where null means "remove".
pub fn double_option<'de, D, T>(de: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    use serde::Deserialize;
    Option::<T>::deserialize(de).map(Some)
}
