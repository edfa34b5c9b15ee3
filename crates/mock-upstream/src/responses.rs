//! `POST /v1/responses`, natively: `N` tokens of `" hello"` as a Response
//! object, or as the Responses event stream (`response.created` …
//! `response.output_text.delta` × N … `response.completed` with usage).
//! `[mock:tool_call]` with tools given (and no function output yet) calls
//! the first tool instead.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::ledger::Counts;
use crate::native::{frame, prompt_tokens, sse, texts, Sse, TOOL_ARGS};
use crate::plan::TOKEN;
use crate::{bad_request, latency_and_faults, Call, Directives, Fault, Shared};

pub(crate) async fn responses(
    State(app): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    app.stats.request(&headers, Some(&body));
    app.stats.responses();
    let arrival = app.ledger.arrival(&headers);
    let req: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_request(e),
    };
    let model = req["model"].as_str().unwrap_or("").to_string();
    app.stats.model(&model);
    let items: Vec<Value> = match &req["input"] {
        Value::String(s) => vec![json!({"role": "user", "content": s})],
        Value::Array(a) => a.clone(),
        _ => vec![],
    };
    let mut msgs: Vec<Vec<&str>> = items.iter().map(|i| texts(&i["content"])).collect();
    if let Some(s) = req["instructions"].as_str() {
        msgs.push(vec![s]);
    }
    let prompt = prompt_tokens(msgs.into_iter());
    let mut dir = Directives::default();
    if let Some(u) = items.iter().rev().find(|i| i["role"] == "user") {
        texts(&u["content"]).into_iter().for_each(|t| dir.scan(t));
    }
    let stream = req["stream"] == true;
    if stream {
        app.stats.stream();
    }
    if let Some(r) = latency_and_faults(&app, &dir, stream).await {
        return r;
    }
    let first = req["tools"][0]["name"].as_str().filter(|_| {
        dir.tool_call
            && items
                .last()
                .is_some_and(|i| i["type"] != "function_call_output")
    });
    let first = first.map(|n| (n.to_string(), TOOL_ARGS.to_string(), false));
    // A scripted call, once a conversation, of a tool the request offers:
    // a `custom` tool's is a `custom_tool_call` with the text as its input.
    let any_output = items.iter().any(|i| {
        i["type"]
            .as_str()
            .is_some_and(|t| t.ends_with("_call_output"))
    });
    let scripted = items
        .iter()
        .rev()
        .filter(|i| i["role"] == "user")
        .find_map(|u| texts(&u["content"]).into_iter().find_map(Call::find))
        .filter(|_| !any_output)
        .and_then(|c| {
            let mut offered = req["tools"].as_array().into_iter().flatten();
            let t = offered.find(|t| t["name"] == c.name.as_str())?;
            Some((c.name, c.args, t["type"] == "custom"))
        });
    let called = first.or(scripted);
    let tool = called.as_ref().map(|(n, _, _)| n.as_str());
    let custom = called.as_ref().is_some_and(|(_, _, c)| *c);
    let args = called.as_ref().map_or(TOOL_ARGS, |(_, a, _)| a.as_str());

    let wanted = dir.output_tokens.unwrap_or(app.cfg.output_tokens);
    let cap = req["max_output_tokens"].as_u64().map(|c| c as u32);
    let n = match tool {
        Some(_) => 5,
        None => cap.map_or(wanted, |c| c.min(wanted)),
    };
    let id = format!("resp_mock_{}", app.next_id.fetch_add(1, Relaxed));
    let call_item_id = if custom {
        format!("ctc_{id}")
    } else {
        format!("fc_{id}")
    };
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let status = if tool.is_none() && n < wanted {
        "incomplete"
    } else {
        "completed"
    };
    let usage = dir.caching.responses(prompt, n);
    let response = |status: &str, output: Value, usage: Value| {
        let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
        json!({"id": id, "object": "response", "created_at": created, "status": status, "model": model,
            "output": output, "usage": usage, "error": null, "incomplete_details": incomplete,
            "parallel_tool_calls": true, "tool_choice": "auto", "tools": [], "store": false,
            "text": {"format": {"type": "text"}}, "metadata": {}})
    };
    app.stats.prompt_tokens(prompt);
    let msg_id = format!("msg_{id}");
    let item = |text: &str, status: &str| match tool {
        Some(name) if custom => {
            json!({"id": call_item_id, "type": "custom_tool_call", "status": status,
            "call_id": format!("call_{id}"), "name": name, "input": text})
        }
        Some(name) => json!({"id": call_item_id, "type": "function_call", "status": status,
            "call_id": format!("call_{id}"), "name": name, "arguments": text}),
        None => json!({"id": msg_id, "type": "message", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}),
    };
    let full = match tool {
        Some(_) => args.to_string(),
        None => TOKEN.repeat(n as usize),
    };
    // `[mock:web_search=N]`: N searches run before the answer, as OpenAI
    // reports them (`web_search_call` items, not in the usage); the answer
    // is the item after them.
    let searches: Vec<Value> = (0..dir.caching.web_search)
        .map(|i| {
            json!({"id": format!("ws_{id}_{i}"), "type": "web_search_call",
            "status": "completed", "action": {"type": "search", "query": "mock"}})
        })
        .collect();
    let at = searches.len();
    let with_searches = |answer: Value| {
        let mut output = searches.clone();
        output.push(answer);
        Value::Array(output)
    };
    let counts = dir.caching.responses_counts(prompt);
    if !stream {
        app.stats.completion_tokens(n);
        let counts = Counts {
            output: n.into(),
            ..counts
        };
        app.ledger.record(&arrival, &model, counts);
        let output = with_searches(item(&full, "completed"));
        return Json(response(status, output, usage)).into_response();
    }
    let seq = std::cell::Cell::new(0u64);
    let ev = |ty: &str, mut v: Value| {
        v["type"] = json!(ty);
        v["sequence_number"] = json!(seq.get());
        seq.set(seq.get() + 1);
        frame(ty, &v)
    };
    let mut head = vec![
        ev(
            "response.created",
            json!({"response": response("in_progress", json!([]), Value::Null)}),
        ),
        ev(
            "response.in_progress",
            json!({"response": response("in_progress", json!([]), Value::Null)}),
        ),
    ];
    // Each search as OpenAI streams it: its item added, in progress,
    // searching, completed, its item done.
    for (i, call) in searches.iter().enumerate() {
        let mut added = call.clone();
        added["status"] = json!("in_progress");
        head.push(ev(
            "response.output_item.added",
            json!({"output_index": i, "item": added}),
        ));
        for phase in ["in_progress", "searching", "completed"] {
            head.push(ev(
                &format!("response.web_search_call.{phase}"),
                json!({"output_index": i, "item_id": call["id"]}),
            ));
        }
        head.push(ev(
            "response.output_item.done",
            json!({"output_index": i, "item": call}),
        ));
    }
    let (token, tokens, mut tail) = match tool {
        Some(_) => {
            let added = item("", "in_progress");
            head.push(ev(
                "response.output_item.added",
                json!({"output_index": at, "item": added}),
            ));
            let (delta, done, field) = if custom {
                (
                    "response.custom_tool_call_input.delta",
                    "response.custom_tool_call_input.done",
                    "input",
                )
            } else {
                (
                    "response.function_call_arguments.delta",
                    "response.function_call_arguments.done",
                    "arguments",
                )
            };
            head.push(ev(
                delta,
                json!({"item_id": call_item_id, "output_index": at, "delta": args}),
            ));
            (
                Bytes::new(),
                0,
                vec![ev(
                    done,
                    json!({"item_id": call_item_id, "output_index": at, field: args}),
                )],
            )
        }
        None => {
            let mut added = item("", "in_progress");
            added["content"] = json!([]);
            head.push(ev(
                "response.output_item.added",
                json!({"output_index": at, "item": added}),
            ));
            head.push(ev("response.content_part.added", json!({"item_id": msg_id, "output_index": at,
                "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})));
            // Every delta event has the same sequence number here: the mock
            // numbers the frames it builds, not the repeated token frame.
            let token = ev(
                "response.output_text.delta",
                json!({"item_id": msg_id, "output_index": at,
                "content_index": 0, "delta": TOKEN, "logprobs": []}),
            );
            let text_done = ev(
                "response.output_text.done",
                json!({"item_id": msg_id, "output_index": at,
                "content_index": 0, "text": full, "logprobs": []}),
            );
            let part_done = ev(
                "response.content_part.done",
                json!({"item_id": msg_id, "output_index": at,
                "content_index": 0, "part": {"type": "output_text", "text": full, "annotations": []}}),
            );
            (token, n, vec![text_done, part_done])
        }
    };
    tail.push(ev(
        "response.output_item.done",
        json!({"output_index": at, "item": item(&full, "completed")}),
    ));
    tail.push(ev(
        &format!("response.{status}"),
        json!({"response": response(status, with_searches(item(&full, "completed")), usage)}),
    ));
    // A tool call's output is counted whole here, text as it is sent.
    let mut counts = counts;
    if tool.is_some() {
        app.stats.completion_tokens(n);
        counts.output = n.into();
    }
    let rec = app.recording(arrival, &model, counts);
    let disconnect_after = match dir.fault {
        Some(Fault::DisconnectAfter(k)) => Some(k),
        _ => None,
    };
    sse(
        Sse {
            head,
            token,
            tokens,
            tail,
            delay: Duration::from_millis(dir.chunk_delay_ms.unwrap_or(app.cfg.chunk_delay_ms)),
            disconnect_after,
            rec,
        },
        app.stats.clone(),
    )
}
