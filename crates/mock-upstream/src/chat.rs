//! `POST /v1/chat/completions` and `POST /v1/completions`.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::plan::{Kind, Plan, TOKEN};
use crate::{
    approx_tokens, bad_request, latency_and_faults, stream, Call, Directives, Fault, Personality,
    Shared,
};

#[derive(Deserialize)]
struct ChatRequest {
    #[serde(default)]
    model: String,
    #[serde(default)]
    messages: Vec<Message>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    tools: Vec<Value>,
    /// The tier asked; served as asked (as OpenAI answers) unless a
    /// `[mock:served_tier=…]` directive says otherwise.
    service_tier: Option<String>,
    #[serde(default)]
    response_format: Value,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    role: String,
    content: Option<Content>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
struct Part {
    text: Option<String>,
}

impl Content {
    fn texts(&self) -> impl Iterator<Item = &str> {
        let (one, parts) = match self {
            Content::Text(s) => (Some(s.as_str()), &[][..]),
            Content::Parts(p) => (None, &p[..]),
        };
        one.into_iter()
            .chain(parts.iter().filter_map(|p| p.text.as_deref()))
    }
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Deserialize)]
struct CompletionRequest {
    #[serde(default)]
    model: String,
    prompt: Option<Input>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<u32>,
}

/// A `prompt` / embedding `input`: text(s) or token id array(s).
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum Input {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

impl Input {
    /// The last text item, where directives are looked for.
    pub(crate) fn last_text(&self) -> Option<&str> {
        match self {
            Input::Text(s) => Some(s),
            Input::Texts(v) => v.last().map(String::as_str),
            _ => None,
        }
    }

    /// Tokens per item: ceil(chars / 4) for text, the length for token arrays.
    pub(crate) fn item_tokens(&self) -> Vec<u32> {
        match self {
            Input::Text(s) => vec![approx_tokens(s)],
            Input::Texts(v) => v.iter().map(|s| approx_tokens(s)).collect(),
            Input::Tokens(t) => vec![t.len() as u32],
            Input::TokenLists(v) => v.iter().map(|t| t.len() as u32).collect(),
        }
    }
}

pub(crate) async fn chat(State(app): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    app.stats.request(&headers, Some(&body));
    app.stats.chat();
    let arrival = app.ledger.arrival(&headers);
    let req: ChatRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    // prompt_tokens = sum(ceil(chars/4) + 3) + 3, directives from the last user message.
    let mut prompt_tokens = 3;
    for m in &req.messages {
        let chars: usize = m
            .content
            .iter()
            .flat_map(Content::texts)
            .map(|t| t.chars().count())
            .sum();
        prompt_tokens += (chars as u32).div_ceil(4) + 3;
    }
    let mut dir = Directives::default();
    let mut personality = app.cfg.personality;
    if let Some(m) = req.messages.iter().rev().find(|m| m.role == "user") {
        m.content.iter().flat_map(Content::texts).for_each(|t| {
            dir.scan(t);
            personality.scan(t);
        });
    }
    let cap = personality.cap(req.max_tokens, req.max_completion_tokens);
    if dir.caching.served_tier.is_none() {
        dir.caching.served_tier = match req.service_tier.as_deref() {
            Some("priority") => Some("priority"),
            Some("flex") => Some("flex"),
            _ => None,
        };
    }
    let include_usage = req.stream_options.is_some_and(|o| o.include_usage);
    let answered = req.messages.last().is_some_and(|m| m.role == "tool");
    let tool = req
        .tools
        .first()
        .and_then(|t| t["function"]["name"].as_str());
    let stream = req.stream == Some(true);
    if let Some(name) = tool.filter(|_| dir.tool_call && !answered) {
        return crate::native::chat_tool_call(
            &app,
            &req.model,
            name,
            crate::native::TOOL_ARGS,
            prompt_tokens,
            crate::native::Delivery {
                stream,
                include_usage,
                arrival,
            },
        );
    }
    // A scripted call, once a conversation, of a tool the request offers.
    let call = req
        .messages
        .iter()
        .rev()
        .filter(|m| m.role == "user")
        .find_map(|m| {
            m.content
                .iter()
                .flat_map(Content::texts)
                .find_map(Call::find)
        })
        .filter(|c| {
            req.tools
                .iter()
                .any(|t| t["function"]["name"] == c.name.as_str())
        })
        .filter(|_| !req.messages.iter().any(|m| m.role == "tool"));
    // Structured output: a JSON value of the asked schema, as a provider
    // enforcing it answers (`"hello"` strings, 1s, trues, one-item arrays).
    if req.response_format["type"] == "json_schema" && call.is_none() {
        let text = crate::native::sample(&req.response_format["json_schema"]["schema"]).to_string();
        return crate::native::chat_text(
            &app,
            &req.model,
            &text,
            prompt_tokens,
            crate::native::Delivery {
                stream,
                include_usage,
                arrival,
            },
        );
    }
    if let Some(c) = call {
        return crate::native::chat_tool_call(
            &app,
            &req.model,
            &c.name,
            &c.args,
            prompt_tokens,
            crate::native::Delivery {
                stream,
                include_usage,
                arrival,
            },
        );
    }
    let spec = Spec {
        kind: Kind::Chat,
        model: req.model,
        prompt_tokens,
        cap,
        stream: req.stream == Some(true),
        include_usage,
        personality,
        arrival,
    };
    answer(&app, spec, dir).await
}

pub(crate) async fn completions(
    State(app): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    app.stats.request(&headers, Some(&body));
    app.stats.completion();
    let arrival = app.ledger.arrival(&headers);
    let req: CompletionRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    let prompt = req.prompt.unwrap_or(Input::Text(String::new()));
    let dir = prompt
        .last_text()
        .map(Directives::parse)
        .unwrap_or_default();
    let mut personality = app.cfg.personality;
    if let Some(t) = prompt.last_text() {
        personality.scan(t);
    }
    let prompt_tokens = prompt.item_tokens().iter().sum();
    let include_usage = req.stream_options.is_some_and(|o| o.include_usage);
    let spec = Spec {
        kind: Kind::Text,
        model: req.model,
        prompt_tokens,
        cap: req.max_tokens,
        stream: req.stream == Some(true),
        include_usage,
        personality,
        arrival,
    };
    answer(&app, spec, dir).await
}

struct Spec {
    kind: Kind,
    model: String,
    prompt_tokens: u32,
    cap: Option<u32>,
    stream: bool,
    include_usage: bool,
    personality: Personality,
    /// When, and with which key, the request came (the usage ledger's).
    arrival: crate::ledger::Arrival,
}

async fn answer(app: &crate::App, spec: Spec, dir: Directives) -> Response {
    app.stats.model(&spec.model);
    if spec.stream {
        app.stats.stream();
    }
    if let Some(r) = latency_and_faults(app, &dir, spec.stream).await {
        return r;
    }
    let wanted = dir.output_tokens.unwrap_or(app.cfg.output_tokens);
    let (reasoning, n) = spec.personality.split(spec.cap, wanted);
    let n_id = app.next_id.fetch_add(1, Relaxed);
    let plan = Plan {
        kind: spec.kind,
        id: match spec.kind {
            Kind::Chat => format!("chatcmpl-mock-{n_id}"),
            Kind::Text => format!("cmpl-mock-{n_id}"),
        },
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: spec.model,
        prompt_tokens: spec.prompt_tokens,
        completion_tokens: n,
        finish_reason: if n < wanted { "length" } else { "stop" },
        chunk_delay: Duration::from_millis(dir.chunk_delay_ms.unwrap_or(app.cfg.chunk_delay_ms)),
        disconnect_after: match dir.fault {
            Some(Fault::DisconnectAfter(k)) => Some(k),
            _ => None,
        },
        include_usage: spec.include_usage && !dir.no_usage,
        reasoning_tokens: reasoning,
        personality: spec.personality,
        caching: dir.caching,
        output: dir.output,
    };
    app.stats.prompt_tokens(plan.prompt_tokens);
    // The usage the answer reports, as billed: hidden reasoning is output;
    // absurd or missing usage reports bill what was really served.
    let counts = crate::ledger::Counts {
        output: reasoning.into(),
        ..plan.caching.chat_counts(plan.prompt_tokens)
    };
    if spec.stream {
        let rec = app.recording(spec.arrival, &plan.model, counts);
        return stream::sse(plan, app.stats.clone(), rec);
    }
    app.stats.completion_tokens(n);
    let counts = crate::ledger::Counts {
        output: counts.output + u64::from(n),
        ..counts
    };
    app.ledger.record(&spec.arrival, &plan.model, counts);
    let text = TOKEN.repeat(n as usize);
    let body = match plan.kind {
        Kind::Chat => json!({
            "id": plan.id,
            "object": "chat.completion",
            "created": plan.created,
            "model": plan.model,
            "system_fingerprint": "fp_mock",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": null},
                "logprobs": null,
                "finish_reason": plan.finish_reason,
            }],
            "usage": plan.usage(),
            "service_tier": plan.caching.served_tier.unwrap_or("default"),
        }),
        Kind::Text => json!({
            "id": plan.id,
            "object": "text_completion",
            "created": plan.created,
            "model": plan.model,
            "choices": [{"text": text, "index": 0, "logprobs": null, "finish_reason": plan.finish_reason}],
            "usage": plan.usage(),
        }),
    };
    let mut body = body;
    if dir.no_usage {
        body.as_object_mut().expect("object").remove("usage");
    }
    if let Some(n) = plan.personality.body_bytes {
        body["padding"] = Value::String("x".repeat(n as usize));
    }
    Json(body).into_response()
}
