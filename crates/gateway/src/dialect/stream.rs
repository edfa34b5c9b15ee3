//! A translated stream: the metered chat stream (`crate::stream::metered`,
//! which holds, extends, cuts and settles) read event by event and written
//! in the client's dialect. The meter's own ending of a cut stream — a
//! `finish_reason: "length"` chunk, the usage, `event: error` with
//! `tollgate_error`, `[DONE]` — becomes the dialect's clean ending:
//! Responses `response.incomplete` (`max_output_tokens`), Messages
//! `message_delta` with `stop_reason: "max_tokens"` and `message_stop`.

use super::{gemini, messages, responses, Dialect, Edge};
use crate::sse::{data_of, SseSplitter};
use axum::body::Body;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;

/// The writer of one dialect's events from chat chunks.
pub(crate) enum Writer {
    Responses(responses::Out),
    Messages(messages::Out),
    Gemini(gemini::Out),
}

impl Writer {
    pub fn new(edge: &Edge, est_input: i64) -> Writer {
        match edge.dialect {
            Dialect::Messages => Writer::Messages(messages::Out::new(edge, est_input)),
            Dialect::Gemini => Writer::Gemini(gemini::Out::new(edge)),
            _ => Writer::Responses(responses::Out::new(edge, chrono::Utc::now().timestamp())),
        }
    }

    pub fn start(&mut self) {
        match self {
            Writer::Responses(o) => o.start(),
            Writer::Messages(o) => o.start(),
            Writer::Gemini(_) => {}
        }
    }

    /// One chat chunk (or the meter's `tollgate_error` event).
    pub fn chunk(&mut self, c: &Value) {
        if let Some(e) = c.get("tollgate_error") {
            let code = e["code"].as_str().unwrap_or("").to_string();
            let finished = match self {
                Writer::Responses(o) => o.finish.is_some(),
                Writer::Messages(o) => o.finish.is_some(),
                Writer::Gemini(o) => o.finish.is_some(),
            };
            // After its `length` chunk the meter's error names why it cut;
            // without one the upstream broke off.
            let (cut, failed) = if finished {
                (Some(code), None)
            } else {
                (
                    None,
                    Some(e["message"].as_str().unwrap_or("stream failed").to_string()),
                )
            };
            match self {
                Writer::Responses(o) => (o.cut_reason, o.failed) = (cut, failed),
                Writer::Messages(o) => (o.cut_reason, o.failed) = (cut, failed),
                Writer::Gemini(o) => (o.cut_reason, o.failed) = (cut, failed),
            }
            return;
        }
        if let Some(u) = super::usage_of(Dialect::Chat, c) {
            match self {
                Writer::Responses(o) => o.usage = Some(u),
                Writer::Messages(o) => o.usage = Some(u),
                Writer::Gemini(o) => o.usage = Some(u),
            }
        }
        let Some(choice) = c["choices"].get(0) else {
            return;
        };
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            match self {
                Writer::Responses(o) => o.text_delta(t),
                Writer::Messages(o) => o.text_delta(t),
                Writer::Gemini(o) => o.text_delta(t),
            }
        }
        for (k, call) in delta["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let index = call["index"].as_i64().unwrap_or(k as i64);
            match self {
                Writer::Responses(o) => o.tool_delta(index, call),
                Writer::Messages(o) => o.tool_delta(index, call),
                Writer::Gemini(o) => o.tool_delta(index, call),
            }
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            match self {
                Writer::Responses(o) => o.finish = Some(f.to_string()),
                Writer::Messages(o) => o.finish = Some(f.to_string()),
                Writer::Gemini(o) => o.finish = Some(f.to_string()),
            }
        }
    }

    pub fn finish(&mut self) {
        match self {
            Writer::Responses(o) => o.finish_events(),
            Writer::Messages(o) => o.finish_events(),
            Writer::Gemini(o) => o.finish_events(),
        }
    }

    pub fn take(&mut self) -> String {
        match self {
            Writer::Responses(o) => o.take_events(),
            Writer::Messages(o) => o.take_events(),
            Writer::Gemini(o) => o.take_events(),
        }
    }
}

/// The metered chat stream `chat`, written in `edge`'s dialect. Dropping
/// this body drops the meter's, which settles what was generated; read to
/// its end, the meter settles the stream as what it was.
pub(crate) fn translate(edge: Edge, est_input: i64, chat: Body) -> Body {
    let s = async_stream::stream! {
        let mut up = chat.into_data_stream();
        let mut split = SseSplitter::default();
        let mut w = Writer::new(&edge, est_input);
        w.start();
        let mut done = false;
        'read: while let Some(next) = up.next().await {
            let bytes = match next {
                Ok(b) => b,
                Err(e) => {
                    yield Err(std::io::Error::other(e));
                    return;
                }
            };
            split.push(&bytes);
            while let Some(ev) = split.next_event() {
                match data_of(&ev) {
                    Some(b"[DONE]") => {
                        done = true;
                        break 'read;
                    }
                    Some(d) => {
                        if let Ok(v) = serde_json::from_slice::<Value>(d) {
                            w.chunk(&v);
                        }
                    }
                    None => {}
                }
            }
            let out = w.take();
            if !out.is_empty() {
                yield Ok::<Bytes, std::io::Error>(Bytes::from(out));
            }
        }
        if !done {
            match &mut w {
                Writer::Responses(o) => {
                    o.failed.get_or_insert_with(|| "the stream ended early".into());
                }
                Writer::Gemini(o) => {
                    o.failed.get_or_insert_with(|| "the stream ended early".into());
                }
                Writer::Messages(_) => {}
            }
        }
        w.finish();
        yield Ok(Bytes::from(w.take()));
        // Read the meter to its end: after `[DONE]` it settles the stream
        // as delivered (`ok`) — or, cut, as `cut_off` — before it ends.
        while up.next().await.is_some() {}
    };
    Body::from_stream(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use serde_json::json;

    fn edge(d: Dialect) -> Edge {
        Edge {
            dialect: d,
            native: false,
            model: "m".into(),
            request_id: "req_1".into(),
            custom_tools: Vec::new(),
            tool_search: false,
            json_array: false,
        }
    }

    fn chat_sse(events: &[Value], cut: bool) -> Body {
        let mut s = String::new();
        for e in events {
            s.push_str(&format!("data: {e}\n\n"));
        }
        if cut {
            s.push_str("event: error\ndata: {\"choices\":[],\"tollgate_error\":{\"code\":\"tenant_monthly_budget_exhausted\",\"message\":\"x\"}}\n\n");
        }
        s.push_str("data: [DONE]\n\n");
        Body::from(s)
    }

    async fn out(d: Dialect, body: Body) -> String {
        let b = translate(edge(d), 4, body)
            .collect()
            .await
            .unwrap()
            .to_bytes();
        String::from_utf8(b.to_vec()).unwrap()
    }

    fn deltas() -> Vec<Value> {
        vec![
            json!({"choices": [{"delta": {"role": "assistant", "content": ""}}]}),
            json!({"choices": [{"delta": {"content": " hello"}}]}),
            json!({"choices": [{"delta": {"content": " hello"}}]}),
        ]
    }

    #[tokio::test]
    async fn a_budget_cut_ends_each_dialect_cleanly() {
        let mut ev = deltas();
        ev.push(json!({"choices": [{"delta": {}, "finish_reason": "length"}]}));
        ev.push(json!({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}}));
        let r = out(Dialect::Responses, chat_sse(&ev, true)).await;
        let last = r.trim_end().rsplit("\n\n").next().unwrap();
        assert!(last.starts_with("event: response.incomplete\n"), "{r}");
        assert!(last.contains("\"reason\":\"max_output_tokens\""), "{last}");
        assert!(last.contains("\"output_tokens\":2"), "{last}");
        assert!(last.contains("tenant_monthly_budget_exhausted"), "{last}");
        assert!(!r.contains("event: error"), "{r}");
        let m = out(Dialect::Messages, chat_sse(&ev, true)).await;
        assert!(m.contains("\"stop_reason\":\"max_tokens\""), "{m}");
        assert!(
            m.trim_end()
                .ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}"),
            "{m}"
        );
        assert!(!m.contains("event: error"), "{m}");
    }

    #[tokio::test]
    async fn a_finished_stream_completes_with_usage_and_tool_calls() {
        let mut ev = deltas();
        ev.push(json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "get", "arguments": ""}}]}}]}));
        ev.push(json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]}));
        ev.push(json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}));
        ev.push(json!({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 5}}));
        let r = out(Dialect::Responses, chat_sse(&ev, false)).await;
        assert!(
            r.contains("event: response.function_call_arguments.delta"),
            "{r}"
        );
        let last = r.trim_end().rsplit("\n\n").next().unwrap();
        assert!(last.starts_with("event: response.completed\n"), "{last}");
        assert!(last.contains("\"call_id\":\"call_1\""), "{last}");
        assert!(last.contains("\"input_tokens\":4"), "{last}");
        let m = out(Dialect::Messages, chat_sse(&ev, false)).await;
        assert!(m.contains("\"type\":\"tool_use\""), "{m}");
        assert!(m.contains("\"partial_json\":\"{}\""), "{m}");
        assert!(m.contains("\"stop_reason\":\"tool_use\""), "{m}");
        assert!(
            m.contains("\"usage\":{\"input_tokens\":4,\"output_tokens\":5}"),
            "{m}"
        );
    }

    #[tokio::test]
    async fn a_broken_upstream_fails_in_the_dialect() {
        let body = Body::from(format!(
            "data: {}\n\nevent: error\ndata: {{\"tollgate_error\":{{\"code\":\"upstream_error\",\"message\":\"closed early\"}}}}\n\ndata: [DONE]\n\n",
            json!({"choices": [{"delta": {"content": "x"}}]})
        ));
        let m = out(Dialect::Messages, body).await;
        assert!(
            m.contains("event: error\ndata: {\"error\":{\"message\":\"closed early\""),
            "{m}"
        );
        let body = Body::from("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n");
        let r = out(Dialect::Responses, body).await;
        assert!(r.contains("event: response.failed"), "{r}");
    }
}
