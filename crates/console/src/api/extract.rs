//! The API's body and path extractors. What does not parse is answered like
//! every other API error — JSON, 400 `invalid_request`, `param` naming the
//! field — instead of axum's plain-text rejection; text holding a NUL
//! (which PostgreSQL cannot store) is refused here, by name.

use crate::ApiError;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, OptionalFromRequest, RawPathParams, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::Value;

const NUL: &str = "must not contain NUL (U+0000) characters";

/// A JSON request body (`Content-Type: application/json`).
pub struct Body<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json") || v.contains("+json"));
        if !json {
            return Err(ApiError::invalid(
                "body",
                "expected Content-Type: application/json",
            ));
        }
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::invalid("body", e.body_text()))?;
        parse(&bytes).map(Body)
    }
}

/// Absent (no `Content-Type` and an empty body) or a JSON body. A body
/// sent without its `Content-Type` is refused, not ignored: ignoring it
/// would apply the defaults the client meant to override (a rotation's
/// 24-hour grace for the `{"grace_secs": 0}` it sent).
impl<T: DeserializeOwned, S: Send + Sync> OptionalFromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Option<Self>, ApiError> {
        if !req.headers().contains_key(CONTENT_TYPE) {
            let bytes = axum::body::Bytes::from_request(req, state)
                .await
                .map_err(|e| ApiError::invalid("body", e.body_text()))?;
            if bytes.iter().all(u8::is_ascii_whitespace) {
                return Ok(None);
            }
            return Err(ApiError::invalid(
                "body",
                "expected Content-Type: application/json",
            ));
        }
        <Self as FromRequest<S>>::from_request(req, state)
            .await
            .map(Some)
    }
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::invalid("body", e.to_string()))?;
    if let Some(at) = nul_at(&v) {
        return Err(ApiError::invalid(at, NUL));
    }
    serde_path_to_error::deserialize(v).map_err(|e| {
        let at = e.path().to_string();
        let at = if at == "." { "body".to_string() } else { at };
        ApiError::invalid(at, e.inner().to_string())
    })
}

/// Where a string holding a NUL is, as serde_path_to_error spells paths.
fn nul_at(v: &Value) -> Option<String> {
    nul_path(v).map(|p| if p.is_empty() { "body".into() } else { p })
}

fn nul_path(v: &Value) -> Option<String> {
    let then = |rest: String| {
        if rest.is_empty() || rest.starts_with('[') {
            rest
        } else {
            format!(".{rest}")
        }
    };
    match v {
        Value::String(s) => s.contains('\0').then(String::new),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| nul_path(item).map(|rest| format!("[{i}]{}", then(rest)))),
        Value::Object(fields) => fields
            .iter()
            .find_map(|(k, item)| nul_path(item).map(|rest| format!("{k}{}", then(rest)))),
        _ => None,
    }
}

/// Path parameters; one that does not parse is named in the error.
pub struct Params<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        if let Ok(raw) = RawPathParams::from_request_parts(parts, state).await {
            if let Some((key, _)) = raw.iter().find(|(_, v)| v.contains('\0')) {
                return Err(ApiError::invalid(key, NUL));
            }
        }
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Params(v)),
            Err(PathRejection::FailedToDeserializePathParams(e)) => {
                use axum::extract::path::ErrorKind::*;
                let key = match e.kind() {
                    ParseErrorAtKey { key, .. }
                    | DeserializeError { key, .. }
                    | InvalidUtf8InPathParam { key } => key.clone(),
                    _ => "path".into(),
                };
                Err(ApiError::invalid(key, e.kind().to_string()))
            }
            Err(e) => Err(ApiError::invalid("path", e.body_text())),
        }
    }
}

/// The version a change is based on: `If-Match: "3"` (the `ETag` a read
/// answered; `W/"3"` and a bare `3` are read alike, `*` is no condition).
/// With a `version` field in the body as well, the two must agree.
pub struct IfMatch(pub Option<i64>);

impl<S: Send + Sync> FromRequestParts<S> for IfMatch {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let Some(v) = parts.headers.get(axum::http::header::IF_MATCH) else {
            return Ok(IfMatch(None));
        };
        let bad = || {
            ApiError::invalid(
                "If-Match",
                "expected a version like \"3\" (the ETag of a read)",
            )
        };
        let v = v.to_str().map_err(|_| bad())?.trim();
        if v == "*" {
            return Ok(IfMatch(None));
        }
        let v = v.strip_prefix("W/").unwrap_or(v).trim_matches('"');
        v.parse::<i64>()
            .map(|n| IfMatch(Some(n)))
            .map_err(|_| bad())
    }
}

impl IfMatch {
    /// The version to check a change against: the header's, the body's
    /// `version`, or none; refused when both are given and differ.
    pub fn with(self, body: Option<i64>) -> Result<Option<i64>, ApiError> {
        match (self.0, body) {
            (Some(h), Some(b)) if h != b => Err(ApiError::invalid(
                "version",
                format!("If-Match says version {h}, the body's version {b}"),
            )),
            (h, b) => Ok(h.or(b)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_nul_is_named_where_it_is() {
        assert_eq!(nul_at(&json!({"name": "ok"})), None);
        assert_eq!(nul_at(&json!({"name": "a\u{0}"})).unwrap(), "name");
        assert_eq!(
            nul_at(&json!({"limits": {"monthly_cost_usd": "\u{0}"}})).unwrap(),
            "limits.monthly_cost_usd"
        );
        assert_eq!(
            nul_at(&json!({"guarantees": [{"tenant_id": "t"}, {"tenant_id": "\u{0}"}]})).unwrap(),
            "guarantees[1].tenant_id"
        );
        assert_eq!(nul_at(&json!("\u{0}")).unwrap(), "body");
    }

    #[test]
    fn what_does_not_parse_is_named() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct In {
            limits: domain::Limits,
        }
        let e = parse::<In>(br#"{"limits": {"monthly_cost_usd": "<b>"}}"#).unwrap_err();
        assert!(
            matches!(&e, ApiError::Invalid { param, .. } if param == "limits.monthly_cost_usd"),
            "{e:?}"
        );
        let e = parse::<In>(b"{").unwrap_err();
        assert!(matches!(&e, ApiError::Invalid { param, .. } if param == "body"));
    }
}
