//! `POST /v1/messages`, natively (Anthropic's Messages API): `N` tokens of
//! `" hello"` as a Message, or as its event stream (`message_start`,
//! `content_block_*`, `message_delta` with usage, `message_stop`).
//! `[mock:tool_call]` with tools given (and no tool result yet) answers
//! with a `tool_use` block for the first tool.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::native::{frame, prompt_tokens, sse, texts, Sse, TOOL_ARGS};
use crate::plan::TOKEN;
use crate::{bad_request, latency_and_faults, Call, Directives, Fault, Shared};

/// The summary a thinking model streams of thoughts it bills in full.
const THOUGHT_SUMMARY: &str = "Considering the request.";

pub(crate) async fn messages(
    State(app): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    app.stats.request(&headers, Some(&body));
    app.stats.messages();
    let arrival = app.ledger.arrival(&headers);
    let req: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_request(e),
    };
    let model = req["model"].as_str().unwrap_or("").to_string();
    app.stats.model(&model);
    let msgs = req["messages"].as_array().cloned().unwrap_or_default();
    let mut all: Vec<Vec<&str>> = msgs.iter().map(|m| texts(&m["content"])).collect();
    if let Some(s) = req["system"].as_str() {
        all.push(vec![s]);
    }
    let prompt = prompt_tokens(all.into_iter());
    let mut dir = Directives::default();
    if let Some(u) = msgs.iter().rev().find(|m| m["role"] == "user") {
        texts(&u["content"]).into_iter().for_each(|t| dir.scan(t));
    }
    let stream = req["stream"] == true;
    if stream {
        app.stats.stream();
    }
    if let Some(r) = latency_and_faults(&app, &dir, stream).await {
        return r;
    }
    let answered = msgs
        .last()
        .and_then(|m| m["content"].as_array())
        .is_some_and(|b| b.iter().any(|b| b["type"] == "tool_result"));
    let first = req["tools"][0]["name"]
        .as_str()
        .filter(|_| dir.tool_call && !answered)
        .map(|n| (n.to_string(), TOOL_ARGS.to_string()));
    // A scripted call, once a conversation, of a tool the request offers.
    let any_result = msgs.iter().any(|m| {
        m["content"]
            .as_array()
            .is_some_and(|b| b.iter().any(|b| b["type"] == "tool_result"))
    });
    let scripted = msgs
        .iter()
        .rev()
        .filter(|m| m["role"] == "user")
        .find_map(|u| texts(&u["content"]).into_iter().find_map(Call::find))
        .filter(|c| {
            let mut offered = req["tools"].as_array().into_iter().flatten();
            !any_result && offered.any(|t| t["name"] == c.name.as_str())
        })
        .map(|c| (c.name, c.args));
    let called = first.or(scripted);
    let tool = called.as_ref().map(|(n, _)| n.as_str());
    let args = called.as_ref().map_or(TOOL_ARGS, |(_, a)| a.as_str());
    let wanted = dir.output_tokens.unwrap_or(app.cfg.output_tokens);
    let cap = req["max_tokens"].as_u64().map(|c| c as u32);
    // Extended thinking (`thinking: {"type": "enabled", "budget_tokens"}`),
    // as Claude 4 does it: the model thinks `[mock:hidden_reasoning=N]`
    // tokens (at most the budget and the cap), all billed as output, and
    // streams only a short summary of them; the answer gets the rest of
    // the cap.
    let mut personality = app.cfg.personality;
    if let Some(u) = msgs.iter().rev().find(|m| m["role"] == "user") {
        texts(&u["content"])
            .into_iter()
            .for_each(|t| personality.scan(t));
    }
    let thinks = matches!(
        req["thinking"]["type"].as_str(),
        Some("enabled" | "adaptive")
    );
    let thought = match thinks {
        true => {
            let budget = req["thinking"]["budget_tokens"]
                .as_u64()
                .map_or(u32::MAX, |b| b as u32);
            personality
                .hidden_reasoning
                .min(budget)
                .min(cap.unwrap_or(u32::MAX))
        }
        false => 0,
    };
    let cap = cap.map(|c| c - thought);
    let n = match tool {
        Some(_) => 5,
        None => cap.map_or(wanted, |c| c.min(wanted)),
    };
    let id = format!("msg_mock_{}", app.next_id.fetch_add(1, Relaxed));
    let stop = match tool {
        Some(_) => "tool_use",
        None if n < wanted => "max_tokens",
        None => "end_turn",
    };
    app.stats.prompt_tokens(prompt);
    let block = |full: bool| match tool {
        Some(name) => json!({"type": "tool_use", "id": format!("toolu_{id}"), "name": name,
            "input": if full { serde_json::from_str::<Value>(args).unwrap_or(json!({})) } else { json!({}) }}),
        None => {
            json!({"type": "text", "text": if full { TOKEN.repeat(n as usize) } else { String::new() }})
        }
    };
    let mut counts = dir.caching.anthropic_counts(prompt);
    let summary =
        json!({"type": "thinking", "thinking": THOUGHT_SUMMARY, "signature": "c2lnbmF0dXJl"});
    if !stream {
        app.stats.completion_tokens(n + thought);
        counts.output = (n + thought).into();
        app.ledger.record(&arrival, &model, counts);
        let content = match thinks {
            true => vec![summary, block(true)],
            false => vec![block(true)],
        };
        return Json(
            json!({"id": id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": null,
            "usage": dir.caching.anthropic(prompt, n + thought)}),
        )
        .into_response();
    }
    let ev = |ty: &str, mut v: Value| {
        v["type"] = json!(ty);
        frame(ty, &v)
    };
    let start = json!({"id": id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": dir.caching.anthropic_start(prompt)});
    let mut head = vec![ev("message_start", json!({"message": start}))];
    // The thinking block first (its summary and signature), then the
    // answer's block.
    let at = usize::from(thinks);
    if thinks {
        app.stats.completion_tokens(thought);
        counts.output = thought.into();
        head.extend([
            ev(
                "content_block_start",
                json!({"index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            ),
            ev(
                "content_block_delta",
                json!({"index": 0, "delta": {"type": "thinking_delta", "thinking": THOUGHT_SUMMARY}}),
            ),
            ev(
                "content_block_delta",
                json!({"index": 0, "delta": {"type": "signature_delta", "signature": "c2lnbmF0dXJl"}}),
            ),
            ev("content_block_stop", json!({"index": 0})),
        ]);
    }
    head.extend([
        ev(
            "content_block_start",
            json!({"index": at, "content_block": block(false)}),
        ),
        ev("ping", json!({})),
    ]);
    let token = match tool {
        Some(_) => {
            head.push(ev(
                "content_block_delta",
                json!({"index": at,
                "delta": {"type": "input_json_delta", "partial_json": args}}),
            ));
            app.stats.completion_tokens(n);
            counts.output += u64::from(n);
            Bytes::new()
        }
        None => ev(
            "content_block_delta",
            json!({"index": at, "delta": {"type": "text_delta", "text": TOKEN}}),
        ),
    };
    let tail = vec![
        ev("content_block_stop", json!({"index": at})),
        ev(
            "message_delta",
            json!({"delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": dir.caching.anthropic_delta(prompt, n + thought)}),
        ),
        ev("message_stop", json!({})),
    ];
    let disconnect_after = match dir.fault {
        Some(Fault::DisconnectAfter(k)) => Some(k),
        _ => None,
    };
    let rec = app.recording(arrival, &model, counts);
    sse(
        Sse {
            head,
            token,
            tokens: if tool.is_some() { 0 } else { n },
            tail,
            delay: Duration::from_millis(dir.chunk_delay_ms.unwrap_or(app.cfg.chunk_delay_ms)),
            disconnect_after,
            rec,
        },
        app.stats.clone(),
    )
}
