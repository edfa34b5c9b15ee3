//! What the native Responses and Messages endpoints share: directives and
//! the prompt estimate from a list of messages, the tool call a
//! `[mock:tool_call]` directive asks for, and a token-by-token SSE body.

use std::io;
use std::time::Duration;

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use crate::ledger::{Arrival, Counts, Recording};
use crate::{aborted, pause, MockStats};

/// The texts of a message's `content` (a string, or parts / blocks with `text`).
pub(crate) fn texts(content: &Value) -> Vec<&str> {
    match content {
        Value::String(s) => vec![s.as_str()],
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => vec![],
    }
}

/// `sum(ceil(chars/4) + 3) + 3` over the texts of each message, as the chat mock counts.
pub(crate) fn prompt_tokens<'a>(messages: impl Iterator<Item = Vec<&'a str>>) -> u32 {
    3 + messages
        .map(|t| (t.iter().map(|s| s.chars().count()).sum::<usize>() as u32).div_ceil(4) + 3)
        .sum::<u32>()
}

/// One `event: NAME` + `data: JSON` frame.
pub(crate) fn frame(ty: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {ty}\ndata: {data}\n\n"))
}

/// The mock's tool-call arguments.
pub(crate) const TOOL_ARGS: &str = "{\"arg\":\"hello\"}";

/// Plays `head`, then `tokens` × `token` (each after `delay`), then `tail`.
/// With `disconnect_after`, stops after that many tokens and aborts.
pub(crate) struct Sse {
    pub head: Vec<Bytes>,
    pub token: Bytes,
    pub tokens: u32,
    pub tail: Vec<Bytes>,
    pub delay: Duration,
    pub disconnect_after: Option<u32>,
    /// Recorded when the body is dropped, with the tokens sent added.
    pub rec: Recording,
}

pub(crate) fn sse(s: Sse, stats: MockStats) -> Response {
    let guard = crate::stream::Guard {
        stats: stats.clone(),
        finished: false,
        rec: s.rec,
    };
    let body = async_stream::stream! {
        let mut guard = guard;
        for h in s.head {
            yield Ok::<Bytes, io::Error>(h);
        }
        let sent = s.disconnect_after.map_or(s.tokens, |k| k.min(s.tokens));
        for _ in 0..sent {
            pause(s.delay.as_millis() as u64).await;
            guard.sent(1);
            yield Ok(s.token.clone());
        }
        if s.disconnect_after.is_some() {
            guard.finished = true;
            tokio::task::yield_now().await;
            yield Err(aborted());
            return;
        }
        for t in s.tail {
            yield Ok(t);
        }
        guard.finished = true;
        stats.stream_completed();
    };
    Response::builder()
        .header(CONTENT_TYPE, "text/event-stream")
        .header(CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .expect("static headers")
}

/// How a chat answer is given, and for whom it is recorded.
pub(crate) struct Delivery {
    pub stream: bool,
    pub include_usage: bool,
    pub arrival: Arrival,
}

/// A chat completion (or stream) calling tool `name` with `args`
/// ([`TOOL_ARGS`] for `[mock:tool_call]`; 5 completion tokens), finish
/// reason `tool_calls`.
pub(crate) fn chat_tool_call(
    app: &crate::App,
    model: &str,
    name: &str,
    args: &str,
    prompt: u32,
    Delivery {
        stream,
        include_usage,
        arrival,
    }: Delivery,
) -> Response {
    use axum::response::IntoResponse;
    use serde_json::json;
    app.stats.model(model);
    app.stats.prompt_tokens(prompt);
    app.stats.completion_tokens(5);
    let counts = Counts {
        uncached: prompt.into(),
        output: 5,
        ..Counts::default()
    };
    let n = app
        .next_id
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (id, call_id) = (format!("chatcmpl-mock-{n}"), format!("call_mock_{n}"));
    let usage =
        json!({"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5});
    if !stream {
        app.ledger.record(&arrival, model, counts);
        let call = json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": args}});
        return axum::Json(json!({"id": id, "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [call]},
            "finish_reason": "tool_calls"}], "usage": usage}))
        .into_response();
    }
    app.stats.stream();
    let chunk = |delta: Value, finish: Value| {
        let v = json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        Bytes::from(format!("data: {v}\n\n"))
    };
    let tail = vec![
        chunk(
            json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": call_id,
            "type": "function", "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
    ];
    let rec = app.recording(arrival, model, counts);
    chat_stream(app, &id, model, tail, include_usage.then_some(usage), rec)
}

/// A value of JSON schema `schema`: every property, `"hello"` for a
/// string (an enum's first value), 1 for a number, true, one-item arrays.
pub(crate) fn sample(schema: &Value) -> Value {
    use serde_json::json;
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    let ty = schema["type"]
        .as_str()
        .unwrap_or("object")
        .to_ascii_lowercase();
    match ty.as_str() {
        "object" => Value::Object(
            schema["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), sample(v)))
                .collect(),
        ),
        "array" => json!([sample(&schema["items"])]),
        "string" => json!("hello"),
        "integer" | "number" => json!(1),
        "boolean" => json!(true),
        _ => Value::Null,
    }
}

/// A chat completion (or stream, in one piece) answering `text`, its
/// tokens counted as the mock counts (one per 4 characters).
pub(crate) fn chat_text(
    app: &crate::App,
    model: &str,
    text: &str,
    prompt: u32,
    Delivery {
        stream,
        include_usage,
        arrival,
    }: Delivery,
) -> Response {
    use axum::response::IntoResponse;
    use serde_json::json;
    let n = crate::approx_tokens(text);
    let counts = Counts {
        uncached: prompt.into(),
        output: n.into(),
        ..Counts::default()
    };
    app.stats.model(model);
    app.stats.prompt_tokens(prompt);
    app.stats.completion_tokens(n);
    let k = app
        .next_id
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let id = format!("chatcmpl-mock-{k}");
    let usage =
        json!({"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n});
    if !stream {
        app.ledger.record(&arrival, model, counts);
        return axum::Json(json!({"id": id, "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": null},
            "logprobs": null, "finish_reason": "stop"}], "usage": usage}))
        .into_response();
    }
    app.stats.stream();
    let chunk = |delta: Value, finish: Value| {
        let v = json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
        Bytes::from(format!("data: {v}\n\n"))
    };
    let tail = vec![
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": text}), Value::Null),
        chunk(json!({}), json!("stop")),
    ];
    let rec = app.recording(arrival, model, counts);
    chat_stream(app, &id, model, tail, include_usage.then_some(usage), rec)
}

/// A chat stream of `chunks` at once, then the usage chunk when the client
/// asked for it (`stream_options.include_usage`), then `[DONE]`.
fn chat_stream(
    app: &crate::App,
    id: &str,
    model: &str,
    mut chunks: Vec<Bytes>,
    usage: Option<Value>,
    rec: Recording,
) -> Response {
    if let Some(usage) = usage {
        let v = serde_json::json!({"id": id, "object": "chat.completion.chunk", "created": 0,
            "model": model, "choices": [], "usage": usage});
        chunks.push(Bytes::from(format!("data: {v}\n\n")));
    }
    chunks.push(Bytes::from_static(b"data: [DONE]\n\n"));
    sse(
        Sse {
            head: vec![],
            token: Bytes::new(),
            tokens: 0,
            tail: chunks,
            delay: Duration::ZERO,
            disconnect_after: None,
            rec,
        },
        app.stats.clone(),
    )
}
