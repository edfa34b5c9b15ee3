//! Server-sent events for `"stream": true`.

use std::io;

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::directives::OutputField;
use crate::ledger::Recording;
use crate::plan::{Kind, Plan, TOKEN};
use crate::{aborted, pause, MockStats};

/// Base64 of one audio token's worth of speech, as OpenAI bills it
/// (~ 20 ms per output token): 20 ms of 24 kHz 16-bit mono PCM, 960 bytes
/// (silence), 1,280 base64 characters.
pub(crate) fn audio_token_data() -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode([0u8; 960])
}

/// The delta of output step `i` in the plan's output field.
pub(crate) fn output_delta(plan: &Plan, i: u32, audio_data: &str) -> Value {
    match plan.output {
        OutputField::Content => json!({"content": TOKEN}),
        OutputField::Unknown => json!({"x_future_field": TOKEN}),
        OutputField::Audio => {
            let mut a = if i.is_multiple_of(2) {
                json!({"transcript": TOKEN})
            } else {
                json!({"data": audio_data})
            };
            if i == 0 {
                a["id"] = format!("audio_{}", plan.id).into();
            }
            json!({"audio": a})
        }
    }
}

/// Counts `streams_closed_early` if the body is dropped before it finished;
/// its recording (dropped with it) records the output the stream sent.
pub(crate) struct Guard {
    pub(crate) stats: MockStats,
    pub(crate) finished: bool,
    pub(crate) rec: Recording,
}

impl Guard {
    /// `n` output tokens handed to the connection.
    pub(crate) fn sent(&mut self, n: u32) {
        self.stats.completion_tokens(n);
        self.rec.counts.output += u64::from(n);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.finished {
            self.stats.stream_closed_early();
        }
    }
}

/// role chunk (chat only), one chunk per token, finish chunk, usage chunk (if asked),
/// `[DONE]`. With a disconnect fault: N token chunks, then the body fails.
pub(crate) fn sse(plan: Plan, stats: MockStats, rec: Recording) -> Response {
    let guard = Guard {
        stats: stats.clone(),
        finished: false,
        rec,
    };
    let body = async_stream::stream! {
        let mut guard = guard;
        if plan.kind == Kind::Chat {
            yield Ok::<Bytes, io::Error>(plan.chunk(json!({"role": "assistant", "content": ""}), None, None));
        }
        if plan.personality.unterminated {
            let all = TOKEN.repeat(plan.completion_tokens as usize);
            guard.sent(plan.completion_tokens);
            let ev = plan.chunk(json!({"content": all}), Some(&all), None);
            guard.finished = true;
            yield Ok(ev.slice(..ev.len() - 2));
            return;
        }
        let token = plan.chunk(json!({"content": TOKEN}), Some(TOKEN), None);
        let audio_data = audio_token_data();
        let step = |i: u32| match (plan.kind, plan.output) {
            (Kind::Chat, OutputField::Audio | OutputField::Unknown) => {
                plan.chunk(output_delta(&plan, i, &audio_data), None, None)
            }
            _ => token.clone(),
        };
        let sent = match plan.disconnect_after {
            Some(k) => k.min(plan.completion_tokens),
            None => plan.completion_tokens,
        };
        for i in 0..sent {
            if i > 0 || plan.kind == Kind::Chat {
                pause(plan.chunk_delay.as_millis() as u64).await;
            }
            guard.sent(1);
            yield Ok(step(i));
        }
        if plan.disconnect_after.is_some() {
            guard.finished = true;
            // Let hyper flush what was sent, so the peer sees the chunks, then the cut.
            tokio::task::yield_now().await;
            yield Err(aborted());
            return;
        }
        if plan.kind == Kind::Chat && plan.output == OutputField::Audio {
            // The last audio piece carries only its expiry.
            let expires = plan.created + 3600;
            yield Ok(plan.chunk(json!({"audio": {"id": format!("audio_{}", plan.id), "expires_at": expires}}), None, None));
        }
        yield Ok(plan.chunk(json!({}), Some(""), Some(plan.finish_reason)));
        if plan.include_usage {
            yield Ok(plan.frame(Value::Array(vec![]), plan.usage()));
        }
        guard.finished = true;
        stats.stream_completed();
        yield Ok(Bytes::from_static(b"data: [DONE]\n\n"));
    };
    Response::builder()
        .header(CONTENT_TYPE, "text/event-stream")
        .header(CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .expect("static headers")
}

impl Plan {
    /// One choice: `delta` for chat, `text` for legacy completions.
    fn chunk(&self, delta: Value, text: Option<&str>, finish: Option<&str>) -> Bytes {
        let choice = match self.kind {
            Kind::Chat => {
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            Kind::Text => {
                json!({"text": text.unwrap_or(""), "index": 0, "logprobs": null, "finish_reason": finish})
            }
        };
        self.frame(Value::Array(vec![choice]), Value::Null)
    }

    /// `data: {...}\n\n`; `usage` is present (null on all but the last chunk) only
    /// when the client asked for `include_usage`, as OpenAI does.
    fn frame(&self, choices: Value, usage: Value) -> Bytes {
        let object = match self.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Text => "text_completion",
        };
        let mut v = json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if self.kind == Kind::Chat {
            v["system_fingerprint"] = "fp_mock".into();
            // OpenAI's `ChatCompletionChunk.service_tier`, on every chunk.
            v["service_tier"] = self.caching.served_tier.unwrap_or("default").into();
        }
        if self.include_usage {
            v["usage"] = usage;
        }
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(b"data: ");
        serde_json::to_writer(&mut buf, &v).expect("json to vec");
        buf.extend_from_slice(b"\n\n");
        buf.into()
    }
}
