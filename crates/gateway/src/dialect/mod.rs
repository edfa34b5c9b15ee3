//! Three dialects at the edge, one metering core. A request in the OpenAI
//! Responses or the Anthropic Messages dialect is read into a chat
//! completions request — which is what is validated, estimated, held and
//! (for a chat-only provider) sent — and its answer is written back in the
//! client's dialect: the whole answer, or the metered chat stream event by
//! event. A provider that speaks the dialect natively gets the original
//! body instead (`native`), and the meter reads its native events
//! (`native::read_event`). Either way the hold, the slices, the cut-off,
//! the hang-up charge and the settle are the chat path's (docs/clients.md).

#[cfg(test)]
mod bench;
pub(crate) mod gemini;
pub(crate) mod messages;
pub(crate) mod native;
pub(crate) mod responses;
mod responses_tools;
pub(crate) mod stream;

use crate::catalog::ModelEntry;
use crate::errors::ApiError;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
pub(crate) use domain::provider::Dialect;
use domain::request::InvalidField;
use serde_json::{json, Value};

/// A request as received, read into the chat request the core works on.
pub(crate) struct Inbound {
    /// The request as chat completions.
    pub chat: Value,
    /// The client's own body (Responses / Messages), kept for a provider
    /// that speaks the dialect natively.
    pub original: Option<Value>,
    /// What only a provider speaking the dialect natively takes (a
    /// Responses tool without a chat equivalent, a Messages server tool, a
    /// Gemini hosted tool): refused for the others.
    pub untranslated: Option<InvalidField>,
    /// Responses `custom` tools, offered to chat as functions.
    pub custom_tools: Vec<String>,
    /// A client-executed Responses `tool_search`, offered to chat as a function.
    pub tool_search: bool,
    /// A Gemini stream asked for without `alt=sse`: Google's JSON array.
    pub json_array: bool,
}

/// What a Gemini call's path says: its model, whether it streams, and
/// whether as a JSON array (no `alt=sse`) rather than server-sent events.
pub(crate) struct PathCall {
    pub model: String,
    pub stream: bool,
    pub json_array: bool,
}

impl Inbound {
    pub fn read(
        dialect: Dialect,
        body: Value,
        path: Option<&PathCall>,
    ) -> Result<Inbound, InvalidField> {
        let (mut tool_search, mut json_array) = (false, false);
        let (chat, untranslated, custom_tools) = match dialect {
            Dialect::Chat => {
                return Ok(Inbound {
                    chat: body,
                    original: None,
                    untranslated: None,
                    custom_tools: Vec::new(),
                    tool_search: false,
                    json_array: false,
                })
            }
            Dialect::Responses => {
                let r = responses::read(&body)?;
                tool_search = r.tool_search;
                (r.chat, r.untranslated, r.custom_tools)
            }
            Dialect::Messages => {
                let (chat, server_tool) = messages::to_chat_native(&body, true)?;
                (chat, server_tool, Vec::new())
            }
            Dialect::Gemini => {
                let p = path.ok_or_else(|| InvalidField {
                    param: "model".into(),
                    message: "the path names no model".into(),
                })?;
                json_array = p.stream && p.json_array;
                let (chat, hosted) = gemini::to_chat_native(&body, &p.model, p.stream)?;
                (chat, hosted, Vec::new())
            }
        };
        // The original may be sent as is: the same refusal of client-chosen
        // upstreams and credentials as a chat body.
        domain::request::refuse_upstream_keys(&body)?;
        Ok(Inbound {
            chat,
            original: Some(body),
            untranslated,
            custom_tools,
            tool_search,
            json_array,
        })
    }
}

/// Whether a `dialect` request for `model` is passed through to the
/// provider's own endpoint of that dialect: the model's provider profile
/// lists it (`apis`). Chat always goes to chat completions, the core's own
/// wire.
pub(crate) fn speaks_natively(model: &ModelEntry, dialect: Dialect) -> bool {
    !matches!(dialect, Dialect::Chat | Dialect::Gemini) && model.profile.speaks(dialect)
}

/// A native body for the provider: its model name, and the held output
/// cap in the dialect's cap field so the provider cannot generate past the
/// hold; a Responses request is never stored upstream either.
pub(crate) fn rewrite_native(body: &mut Value, model: &ModelEntry, dialect: Dialect, cap: i64) {
    body["model"] = Value::String(model.upstream_model.clone());
    match dialect {
        Dialect::Responses => {
            body["max_output_tokens"] = json!(cap);
            body["store"] = Value::Bool(false);
        }
        _ => {
            body["max_tokens"] = json!(cap);
            // Anthropic's `metadata` takes `user_id` only: the entries a
            // client sent as tollgate tags stop here.
            if let Some(m) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                m.retain(|k, _| k == "user_id");
            }
        }
    }
}

/// How an admitted request talks to its client and its provider.
#[derive(Debug, Clone)]
pub(crate) struct Edge {
    pub dialect: Dialect,
    /// The provider speaks `dialect` natively: the body goes through as is.
    pub native: bool,
    /// The model as the client named it (translated answers carry it).
    pub model: String,
    pub request_id: String,
    /// Responses `custom` tools: a chat call of one is written back as a
    /// `custom_tool_call` item.
    pub custom_tools: Vec<String>,
    /// The client runs `tool_search`: a chat call of it is written back as
    /// a `tool_search_call` item.
    pub tool_search: bool,
    /// A Gemini stream written as Google's JSON array (`[{…},\r\n{…}]`,
    /// `application/json`) instead of server-sent events.
    pub json_array: bool,
}

impl Edge {
    /// The stream events are the provider's chat chunks, translated (if
    /// at all) after the meter.
    pub fn translated(&self) -> bool {
        self.dialect != Dialect::Chat && !self.native
    }

    /// The meter reads events in this dialect.
    pub fn wire(&self) -> Dialect {
        if self.native {
            self.dialect
        } else {
            Dialect::Chat
        }
    }

    /// A whole (non-stream) answer for the client, and the provider's usage
    /// in it (as the settle bills it) when it reported one.
    pub fn answer(&self, upstream: Bytes) -> (Bytes, Option<domain::usage::Reported>) {
        if !self.translated() {
            // Typed, so the rest of the answer is skipped, not built.
            let usage = native::answer_usage(self.wire(), &upstream);
            return (upstream, usage);
        }
        let Ok(chat) = serde_json::from_slice::<Value>(&upstream) else {
            return (upstream, None);
        };
        let tier = chat.get("service_tier").and_then(Value::as_str);
        let usage = chat.get("usage").filter(|u| u.is_object()).map(|u| {
            let sent = domain::usage::RawUsage::of(u);
            native::reported(Dialect::Chat, native::with_served_tier(u.clone(), tier))
                .with_sent(Some(sent))
        });
        let out = match self.dialect {
            Dialect::Responses => responses::from_chat(&chat, self),
            Dialect::Gemini => gemini::from_chat(&chat, self),
            _ => messages::from_chat(&chat, self),
        };
        (Bytes::from(out.to_string()), usage)
    }
}

/// A refusal in the client's dialect: OpenAI's shape for chat and
/// Responses, Anthropic's `{"type":"error","error":{type,message}}` for
/// Messages. Status and headers (`x-tollgate-reason`, `retry-after`) are the
/// same in every dialect.
pub(crate) fn error_response(dialect: Dialect, mut e: ApiError) -> Response {
    if let Some(p) = e.param.take() {
        e.param = Some(client_field(dialect, &p).to_string());
    }
    if dialect == Dialect::Gemini {
        return google_error_response(e);
    }
    if dialect != Dialect::Messages {
        return e.into_response();
    }
    let status = e.http_status();
    let message = match &e.param {
        Some(p) if !p.is_empty() && !e.message.contains(p.as_str()) => {
            format!("{p}: {}", e.message)
        }
        _ => e.message.clone(),
    };
    let body = json!({"type": "error", "error": {
        "type": anthropic_error_type(status),
        "message": message,
        "code": e.reason.as_str(),
    }, "request_id": e.request_id});
    let mut r = e.into_response();
    *r.body_mut() = axum::body::Body::from(body.to_string());
    r.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut().remove(axum::http::header::CONTENT_LENGTH);
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r
}

/// A refusal in Google's Gemini API shape, `{"error":{code,message,status,
/// details}}` (its `status` the canonical code name of the HTTP status; the
/// message starting with the offending field, as Anthropic's does; the
/// reason code in a `google.rpc.ErrorInfo` detail, as Google's own errors
/// carry theirs); headers as in every dialect.
pub(crate) fn google_error_response(e: ApiError) -> Response {
    let status = e.http_status();
    let message = match &e.param {
        Some(p) if !p.is_empty() && !e.message.contains(p.as_str()) => {
            format!("{p}: {}", e.message)
        }
        _ => e.message.clone(),
    };
    let body = json!({"error": {
        "code": status,
        "message": message,
        "status": google_status(status),
        "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": e.reason.as_str(), "domain": "tollgate"}],
    }});
    let mut r = e.into_response();
    *r.body_mut() = axum::body::Body::from(body.to_string());
    r.headers_mut().remove(axum::http::header::CONTENT_LENGTH);
    r
}

/// Google's canonical status name for an HTTP status.
fn google_status(status: u16) -> &'static str {
    match status {
        400 | 413 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        402 | 429 => "RESOURCE_EXHAUSTED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        405 | 501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    }
}

/// Anthropic's error `type` for an HTTP status.
fn anthropic_error_type(status: u16) -> &'static str {
    match status {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        405 => "invalid_request_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        _ => "api_error",
    }
}

/// The client's name for a field the core names in chat terms.
fn client_field(dialect: Dialect, chat_field: &str) -> &str {
    match (dialect, chat_field) {
        (Dialect::Responses, "max_tokens") => "max_output_tokens",
        (Dialect::Responses, "messages") => "input",
        _ => chat_field,
    }
}

/// The provider's usage (input, output) in a whole answer or a usage
/// event of `dialect`. Anthropic's cached input counts as input.
pub fn usage_of(dialect: Dialect, v: &Value) -> Option<(i64, i64)> {
    let u = match dialect {
        Dialect::Responses if v.get("response").is_some() => &v["response"]["usage"],
        Dialect::Messages if v.get("message").is_some() => &v["message"]["usage"],
        _ => &v["usage"],
    };
    if !u.is_object() {
        return None;
    }
    let n = |k: &str| u[k].as_i64().unwrap_or(0);
    match dialect {
        // Gemini is never a wire: its answers are chat's.
        Dialect::Chat | Dialect::Gemini => Some((n("prompt_tokens"), n("completion_tokens"))),
        Dialect::Responses => Some((n("input_tokens"), n("output_tokens"))),
        Dialect::Messages => Some((
            n("input_tokens") + n("cache_creation_input_tokens") + n("cache_read_input_tokens"),
            n("output_tokens"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::reason::ReasonCode;
    use http_body_util::BodyExt;

    async fn body_of(r: Response) -> Value {
        let b = r.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&b).unwrap()
    }

    #[tokio::test]
    async fn messages_errors_are_anthropic_shaped_and_keep_status_and_reason() {
        let e =
            ApiError::new(ReasonCode::InvalidRequest, "max_tokens is required").param("max_tokens");
        let r = error_response(Dialect::Messages, e);
        assert_eq!(r.status(), 400);
        assert_eq!(r.headers()["x-tollgate-reason"], "invalid_request");
        let v = body_of(r).await;
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["message"], "max_tokens is required");
        let e = ApiError::new(
            ReasonCode::Limit(
                domain::limits::ScopeKind::Tenant,
                domain::limits::LimitKind::MonthlyTokens,
            ),
            "budget",
        );
        let r = error_response(Dialect::Messages, e);
        assert_eq!(r.status(), 402);
        let v = body_of(r).await;
        assert_eq!(v["error"]["type"], "billing_error");
        assert_eq!(v["error"]["code"], "tenant_monthly_budget_exhausted");
    }

    #[tokio::test]
    async fn gemini_errors_are_google_shaped_and_name_the_field_and_the_reason() {
        let e = ApiError::new(
            ReasonCode::ToolNotAllowed,
            "hosted tool \"web_search\" is not allowed",
        )
        .param("tools[1].googleSearch");
        let r = error_response(Dialect::Gemini, e);
        assert_eq!(r.status(), 403);
        assert_eq!(r.headers()["x-tollgate-reason"], "tool_not_allowed");
        let v = body_of(r).await;
        assert_eq!(v["error"]["code"], 403);
        assert_eq!(v["error"]["status"], "PERMISSION_DENIED");
        assert_eq!(
            v["error"]["message"],
            "tools[1].googleSearch: hosted tool \"web_search\" is not allowed"
        );
        assert_eq!(v["error"]["details"][0]["reason"], "tool_not_allowed");
        // A message that names its field already is kept as it is.
        let e = ApiError::new(ReasonCode::InvalidRequest, "contents must be an array")
            .param("contents");
        let v = body_of(error_response(Dialect::Gemini, e)).await;
        assert_eq!(v["error"]["message"], "contents must be an array");
        assert_eq!(v["error"]["details"][0]["reason"], "invalid_request");
    }

    #[tokio::test]
    async fn responses_errors_name_the_responses_field() {
        let e = ApiError::new(ReasonCode::InvalidRequest, "too many").param("max_tokens");
        let v = body_of(error_response(Dialect::Responses, e)).await;
        assert_eq!(v["error"]["param"], "max_output_tokens");
        assert_eq!(v["error"]["code"], "invalid_request");
    }
}
