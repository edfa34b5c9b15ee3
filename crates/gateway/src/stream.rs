//! Streams metered as they flow (docs/design.md §6). The first hold covers the input
//! and one slice of output; output is counted from the deltas (every kind:
//! text, reasoning, refusals, tool calls, audio, unknown fields counted
//! whole — `sse::Delta`) and the hold is extended a slice ahead.
//! When an extension is refused — or the stream's wall-clock cap passes — the
//! upstream is dropped (the provider stops), the client gets a final chunk
//! with `finish_reason: "length"`, an `event: error` naming the reason, and
//! `[DONE]`, and the request settles at what was delivered. The provider's
//! usage chunk, always requested, is removed when the client did not ask.
//! A client that goes away drops this stream; `HeldRequest::drop` settles.
//! A provider's native Responses / Messages stream is metered here too: its
//! events are read and its cut written by `dialect::native` (the `wire`).

use crate::dialect::{native, Dialect, Edge};
use crate::metrics_names as m;
use crate::settle::HeldRequest;
use crate::sse::{data_of, Chunk, SseSplitter};
use axum::body::Body;
use bytes::Bytes;
use domain::reason::ReasonCode;
use futures::StreamExt;
use quota::{ExtendOutcome, ExtendRequest};
use serde_json::{json, Value};
use std::time::Instant;

/// Why a stream was stopped by the gateway.
enum Cut {
    Budget(ReasonCode),
    TimeLimit,
    QuotaStoreDown,
}

impl Cut {
    fn reason(&self) -> Option<ReasonCode> {
        match self {
            Cut::Budget(r) => Some(*r),
            Cut::TimeLimit => None,
            Cut::QuotaStoreDown => Some(ReasonCode::QuotaStoreUnavailable),
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Cut::Budget(r) => r.as_str(),
            Cut::TimeLimit => "stream_time_limit_exceeded",
            Cut::QuotaStoreDown => ReasonCode::QuotaStoreUnavailable.as_str(),
        }
    }
}

/// The id, model and shape of the stream, from its chunks, so the
/// gateway's own closing chunks look like the provider's.
#[derive(Default)]
struct Shape {
    id: Option<String>,
    object: Option<String>,
    created: Option<i64>,
    model: Option<String>,
}

impl Shape {
    fn learn(&mut self, c: &Chunk) {
        if self.id.is_none() {
            self.id = c.id.clone();
            self.object = c.object.clone();
            self.created = c.created;
            self.model = c.model.clone();
        }
    }

    fn chunk(&self, choices: Value) -> Value {
        json!({
            "id": self.id.clone().unwrap_or_else(|| "tollgate-cut".into()),
            "object": self.object.clone().unwrap_or_else(|| "chat.completion.chunk".into()),
            "created": self.created.unwrap_or(0),
            "model": self.model.clone().unwrap_or_default(),
            "choices": choices,
        })
    }

    fn is_text_completion(&self) -> bool {
        self.object.as_deref() == Some("text_completion")
    }
}

/// The closing events of a stream the gateway stopped.
fn cut_events(shape: &Shape, cut: &Cut, usage: Option<(i64, i64)>) -> Bytes {
    let mut out = String::new();
    let last = if shape.is_text_completion() {
        json!([{"index": 0, "text": "", "logprobs": null, "finish_reason": "length"}])
    } else {
        json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "length"}])
    };
    out.push_str(&format!("data: {}\n\n", shape.chunk(last)));
    if let Some((input, output)) = usage {
        let mut u = shape.chunk(json!([]));
        u["usage"] = json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output});
        out.push_str(&format!("data: {u}\n\n"));
    }
    // The error rides in a chunk-shaped event under `tollgate_error` (not a
    // top-level `error`), so OpenAI SDKs end the stream normally instead of
    // raising; SSE clients see it as `event: error`.
    let mut e = shape.chunk(json!([]));
    let (kind, msg) = match cut {
        Cut::Budget(r) => (
            r.error_type(),
            match r {
                ReasonCode::Limit(scope, limit) => format!(
                    "stream stopped: {}: {} has no room for more output",
                    r.as_str(),
                    domain::standing::describe(*scope, *limit)
                ),
                _ => format!("stream stopped: {} (budget exhausted)", r.as_str()),
            },
        ),
        Cut::TimeLimit => (
            "rate_limit_error",
            "stream stopped: it reached the gateway's time limit".to_string(),
        ),
        Cut::QuotaStoreDown => (
            "api_error",
            "stream stopped: the quota store is unavailable".to_string(),
        ),
    };
    e["tollgate_error"] = json!({"message": msg, "type": kind, "code": cut.code(), "param": null});
    out.push_str(&format!("event: error\ndata: {e}\n\ndata: [DONE]\n\n"));
    Bytes::from(out)
}

/// What the meter counts in one event of a provider's stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventCount {
    /// Output tokens, everything in the event.
    pub tokens: i64,
    /// Of which audio (chat's `delta.audio.data`, by the audio-data rule):
    /// a stream that ends without the provider's report bills them at the
    /// audio price.
    pub audio: i64,
    /// The provider's usage-only chunk.
    pub usage_only: bool,
}

/// Output tokens in one event, of which audio, and whether it is the
/// provider's usage-only chunk. What cannot be read as a chunk (an
/// unexpected shape, several `data:` lines) is counted whole, as text:
/// better to overcount than to let output through unmetered.
fn read_event(
    ev: &[u8],
    family: domain::tokens::TokenizerFamily,
    text: &mut String,
    shape: &mut Shape,
    usage: &mut Option<crate::sse::Usage>,
) -> EventCount {
    let Some(data) = data_of(ev) else {
        return EventCount::default();
    };
    if data == b"[DONE]" {
        return EventCount::default();
    }
    let single = ev.windows(5).filter(|w| *w == b"data:").count() == 1;
    match serde_json::from_slice::<Chunk>(data)
        .ok()
        .filter(|_| single)
    {
        Some(chunk) => {
            shape.learn(&chunk);
            if let Some(u) = &chunk.usage {
                let mut u = u.clone();
                if chunk.service_tier.is_some() {
                    // The object as sent kept before the tier goes in
                    // (without a tier, `raw` is as sent: serialised once,
                    // at the settle, not per usage chunk).
                    u.sent = Some(domain::usage::RawUsage::of(&u.raw));
                    u.raw = crate::dialect::native::with_served_tier(
                        u.raw,
                        chunk.service_tier.as_deref(),
                    );
                }
                *usage = Some(u);
            }
            text.clear();
            let (ruled, audio) = chunk.generated_text(text, family);
            EventCount {
                tokens: (family.count(text) + ruled) as i64,
                audio: audio as i64,
                usage_only: chunk.is_usage_only(),
            }
        }
        None => EventCount {
            tokens: family.count(&String::from_utf8_lossy(ev)) as i64,
            ..Default::default()
        },
    }
}

/// What the stream meter counts in one chat completion event (`data:
/// {…}`, its blank line or not): the tokens a chat stream's hold is
/// extended by, of which audio. For the hold engine's property test
/// (`crate::steps`).
pub fn chat_event_tokens(ev: &[u8], family: domain::tokens::TokenizerFamily) -> EventCount {
    let (mut text, mut shape, mut usage) = (String::new(), Shape::default(), None);
    read_event(ev, family, &mut text, &mut shape, &mut usage)
}

/// Makes room for `needed` more output tokens, a slice at a time; the last
/// try asks for exactly what is missing so the final tokens of a budget can
/// still be used. Returns the refusal when the budget cannot cover it.
async fn cover(held: &mut HeldRequest, needed_total: i64, slice: i64) -> Result<(), Cut> {
    while held.est_output < needed_total {
        let missing = needed_total - held.est_output;
        // A slice, but never past the request's own output cap.
        let step = slice.min(held.max_output - held.est_output).max(missing);
        for add in [step, missing] {
            let add_cost = held.hold_price.cost(0, add).0;
            let k = held.key.clone();
            let limits = k.effective_limits(held.gw.now(), &held.month);
            // The hold's budgets, as it took them (its start names the period).
            let started = chrono::DateTime::from_timestamp_millis(held.started_at_ms)
                .unwrap_or_else(|| held.gw.now());
            let budgets = domain::chain_budgets::applicable(
                [&limits[0], &limits[1], &limits[2]],
                &k.app.id,
                &k.id,
                &held.model.id,
                &held.gw.cfg.clock,
                started,
            );
            let req = ExtendRequest {
                request_id: &held.request_id,
                tenant: &k.tenant.id,
                app: &k.app.id,
                key: &k.id,
                month: &held.month,
                add_output: add,
                add_cost,
                limits: [&limits[0], &limits[1], &limits[2]],
                budgets: &budgets,
            };
            let t0 = Instant::now();
            let eu = crate::attribution::end_user_scope(&k, held.attribution.end_user.as_deref());
            let out = held.gw.admission.extend(&req, eu).await;
            metrics::histogram!(m::EXTEND_SECONDS).record(t0.elapsed().as_secs_f64());
            match out {
                Ok(ExtendOutcome::Extended { .. }) => {
                    held.est_output += add;
                    held.est_cost += add_cost;
                    break;
                }
                Ok(ExtendOutcome::Refused(r)) if add == missing => {
                    return Err(Cut::Budget(r.reason()))
                }
                Ok(ExtendOutcome::Refused(_)) => continue,
                Ok(ExtendOutcome::NotHeld { state }) => {
                    tracing::warn!(request_id = %held.request_id, state, "extend found no open hold; stopping the stream");
                    return Err(Cut::QuotaStoreDown);
                }
                Err(e) => {
                    metrics::counter!(m::QUOTA_STORE_ERRORS, "op" => "extend").increment(1);
                    tracing::warn!(request_id = %held.request_id, error = %e, "extend failed; stopping the stream");
                    return Err(Cut::QuotaStoreDown);
                }
            }
        }
    }
    Ok(())
}

/// Makes the hold cover `n` more counted output tokens, keeping a quarter
/// slice of headroom ahead of the text up to the request's cap; past the
/// cap (our count can run a little above the provider's) only what the text
/// needs. Err when the budget cannot cover what was counted: the event must
/// not be forwarded.
async fn meter(held: &mut HeldRequest, event: EventCount, slice: i64) -> Result<(), Cut> {
    let n = event.tokens;
    if n <= 0 {
        return Ok(());
    }
    let after = held.counted_output + n;
    let want = if after > held.est_output {
        after
    } else {
        (after + slice / 4).min(held.max_output)
    };
    if want > held.est_output {
        if let Err(c) = cover(held, want, slice).await {
            if after > held.est_output {
                return Err(c);
            }
        }
    }
    held.counted_output = after;
    held.counted_audio += event.audio;
    Ok(())
}

/// One event of the provider's stream in the dialect it speaks (`wire`):
/// its output tokens, and whether it carries only the usage.
fn read_wire(
    wire: Dialect,
    ev: &[u8],
    family: domain::tokens::TokenizerFamily,
    text: &mut String,
    shape: &mut Shape,
    native: &mut native::State,
    usage: &mut Option<crate::sse::Usage>,
) -> EventCount {
    match wire {
        Dialect::Chat => read_event(ev, family, text, shape, usage),
        d => EventCount {
            tokens: native::read_event(d, ev, family, native, usage),
            ..Default::default()
        },
    }
}

pub fn metered(
    mut held: HeldRequest,
    upstream: crate::upstream::Response,
    client_wants_usage: bool,
    edge: Edge,
) -> Body {
    let wire = edge.wire();
    let family = held.model.tokenizer;
    let cfg = held.gw.cfg.clone();
    let slice = cfg.stream_slice_tokens.max(1);
    let deadline = tokio::time::Instant::now() + cfg.stream_max_duration;
    // The tenant's open-stream place, held by the body: given back when the
    // body is dropped, however the stream ended (`open_streams`).
    let open_stream = held.open_stream.take();
    let s = async_stream::stream! {
        let _open_stream = open_stream;
        let mut up = http_body_util::BodyExt::into_data_stream(upstream.into_body());
        let mut split = SseSplitter::default();
        let mut text = String::new();
        let mut shape = Shape::default();
        let mut native = native::State::default();
        let mut broken = false;
        let mut oversized = false;
        let mut cut: Option<Cut> = None;
        'read: loop {
            let wait = cfg.stream_idle_timeout.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
            let next = match tokio::time::timeout(wait, up.next()).await {
                Ok(n) => n,
                Err(_) if tokio::time::Instant::now() >= deadline => {
                    cut = Some(Cut::TimeLimit);
                    break 'read;
                }
                Err(_) => {
                    tracing::warn!(request_id = %held.request_id, "upstream stream idle too long; closing it");
                    broken = true;
                    break 'read;
                }
            };
            let bytes = match next {
                Some(Ok(b)) => b,
                Some(Err(e)) => {
                    tracing::warn!(request_id = %held.request_id, error = %e, "upstream stream broke");
                    broken = true;
                    break 'read;
                }
                None => break 'read,
            };
            split.push(&bytes);
            while let Some(ev) = split.next_event() {
                let n = read_wire(wire, &ev, family, &mut text, &mut shape, &mut native, &mut held.provider_usage);
                if let Err(c) = meter(&mut held, n, slice).await {
                    cut = Some(c);
                    break 'read;
                }
                // The last event: from here a dropped body is a stream
                // delivered whole, not one its client left.
                held.reached_end |= match wire {
                    Dialect::Chat => data_of(&ev) == Some(b"[DONE]".as_slice()),
                    _ => native.ended,
                };
                if n.usage_only && !client_wants_usage {
                    continue;
                }
                yield Ok::<Bytes, std::io::Error>(ev);
            }
            if split.pending() > cfg.max_sse_event_bytes {
                // One event larger than any real chunk: the buffer is not
                // allowed to grow without bound. Nothing of it was sent.
                tracing::warn!(request_id = %held.request_id, limit = cfg.max_sse_event_bytes, "upstream stream event too large; closing it");
                oversized = true;
                break 'read;
            }
        }
        // Stop reading: dropping the body closes the upstream connection.
        drop(up);
        if cut.is_none() && !oversized {
            if let Some(rest) = split.rest() {
                // An unterminated last event (the upstream closed without
                // the blank line): metered like any other, sent terminated.
                let n = read_wire(wire, &rest, family, &mut text, &mut shape, &mut native, &mut held.provider_usage);
                match meter(&mut held, n, slice).await {
                    Err(c) => cut = Some(c),
                    Ok(()) if n.usage_only && !client_wants_usage => {}
                    Ok(()) => yield Ok(crate::sse::terminated(rest)),
                }
            }
        }
        let counted = held.counted_output;
        let model = held.model.id.clone();
        if let Some(c) = cut {
            metrics::counter!(m::STREAM_CUTOFFS, "reason" => c.code()).increment(1);
            if let Some(r) = c.reason() {
                let detail = json!({"delivered_output_tokens": counted, "dialect": edge.dialect.as_str()});
                held.gw.decisions.cut_off(
                    &held.request_id,
                    &held.key,
                    &model,
                    r,
                    detail,
                    &held.attribution,
                );
            }
            let delivered = held.cut_actual(counted);
            let usage = client_wants_usage.then_some((delivered.input, delivered.output));
            held.settle(delivered).await;
            yield Ok(match wire {
                Dialect::Chat => cut_events(&shape, &c, usage),
                d => native::cut_events(d, &native, &edge, c.code(), (delivered.input, delivered.output)),
            });
            return;
        }
        // A provider that breaks off after its last event delivered it all.
        let failed = (broken || oversized) && !held.reached_end;
        let actual = held.best_known(if failed { "upstream_error" } else { "ok" });
        if let (Some(b), false) = (held.billed_report(), failed) {
            metrics::counter!(m::STREAM_TOKENS_COUNTED, "model" => model.clone()).increment(counted as u64);
            metrics::counter!(m::STREAM_TOKENS_REPORTED, "model" => model).increment(b.output as u64);
        }
        held.settle(actual).await;
        if failed {
            let (msg, code) = if oversized {
                ("the upstream provider sent a stream event larger than the gateway accepts",
                    ReasonCode::UpstreamResponseTooLarge.as_str())
            } else {
                ("the upstream provider closed the stream early", ReasonCode::UpstreamError.as_str())
            };
            if wire != Dialect::Chat {
                yield Ok(native::broken_events(wire, &native, &edge, msg));
                return;
            }
            let mut e = shape.chunk(json!([]));
            e["tollgate_error"] = json!({"message": msg, "type": "api_error", "code": code, "param": null});
            yield Ok(Bytes::from(format!("event: error\ndata: {e}\n\ndata: [DONE]\n\n")));
        }
    };
    Body::from_stream(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::limits::{LimitKind, ScopeKind};

    #[test]
    fn a_cut_stream_ends_with_length_error_and_done() {
        let mut shape = Shape::default();
        let c: Chunk = serde_json::from_str(
            r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"delta":{"content":"x"}}]}"#,
        )
        .unwrap();
        shape.learn(&c);
        let cut = Cut::Budget(ReasonCode::Limit(
            ScopeKind::Tenant,
            LimitKind::MonthlyTokens,
        ));
        let out = String::from_utf8(cut_events(&shape, &cut, Some((5, 9))).to_vec()).unwrap();
        let events: Vec<&str> = out.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 4, "{out}");
        let last: Value = serde_json::from_str(events[0].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(last["choices"][0]["finish_reason"], "length");
        assert_eq!(last["id"], "c1");
        let usage: Value = serde_json::from_str(events[1].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(usage["usage"]["total_tokens"], 14);
        let err = events[2].strip_prefix("event: error\ndata: ").unwrap();
        let err: Value = serde_json::from_str(err).unwrap();
        assert_eq!(
            err["tollgate_error"]["code"],
            "tenant_monthly_budget_exhausted"
        );
        assert_eq!(
            err["tollgate_error"]["message"],
            "stream stopped: tenant_monthly_budget_exhausted: the tenant's token budget for the month has no room for more output"
        );
        assert!(err.get("error").is_none());
        assert_eq!(events[3], "data: [DONE]");
    }
}

#[cfg(test)]
mod read_event_tests {
    use super::*;
    use domain::tokens::TokenizerFamily;
    use proptest::prelude::*;

    #[test]
    fn what_cannot_be_read_is_counted_whole() {
        let (mut text, mut shape, mut usage) = (String::new(), Shape::default(), None);
        let f = TokenizerFamily::O200k;
        // A normal delta: its text.
        let ok = b"data: {\"choices\":[{\"delta\":{\"content\":\" hello hello\"}}]}\n\n";
        assert_eq!(
            read_event(ok, f, &mut text, &mut shape, &mut usage),
            EventCount {
                tokens: 2,
                ..Default::default()
            }
        );
        // A shape the parser does not expect (created as a float): the whole
        // event counts, far more than its text, never less.
        let odd =
            b"data: {\"created\":1.5,\"choices\":[{\"delta\":{\"content\":\" hello hello\"}}]}\n\n";
        assert!(read_event(odd, f, &mut text, &mut shape, &mut usage).tokens > 2);
        // Two data lines: counted whole too.
        let two =
            b"data: {\"choices\":[]}\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
        assert!(read_event(two, f, &mut text, &mut shape, &mut usage).tokens > 1);
        // Comments and [DONE] carry no output.
        assert_eq!(
            read_event(b": keep-alive\n\n", f, &mut text, &mut shape, &mut usage),
            EventCount::default()
        );
        assert_eq!(
            read_event(b"data: [DONE]\n\n", f, &mut text, &mut shape, &mut usage),
            EventCount::default()
        );
        // Refusals and legacy function calls are output as well.
        let refusal = b"data: {\"choices\":[{\"delta\":{\"refusal\":\" hello\"}}]}\n\n";
        assert_eq!(
            read_event(refusal, f, &mut text, &mut shape, &mut usage).tokens,
            1
        );
    }

    fn count(ev: &str) -> i64 {
        let (mut text, mut shape, mut usage) = (String::new(), Shape::default(), None);
        read_event(
            ev.as_bytes(),
            TokenizerFamily::O200k,
            &mut text,
            &mut shape,
            &mut usage,
        )
        .tokens
    }

    fn delta_event(delta: &Value) -> String {
        format!(
            "data: {}\n\n",
            json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]})
        )
    }

    #[test]
    fn every_output_kind_counts() {
        let f = TokenizerFamily::O200k;
        let d = |v: Value| count(&delta_event(&v));
        // The plain text delta, and the role chunk that carries nothing.
        assert_eq!(d(json!({"content": " hello hello"})), 2);
        assert_eq!(d(json!({"role": "assistant", "content": ""})), 0);
        assert_eq!(
            d(json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": null})),
            0
        );
        // Reasoning in both spellings.
        assert_eq!(d(json!({"reasoning_content": " hello"})), 1);
        assert_eq!(d(json!({"reasoning": " hello"})), 1);
        // Tool-call arguments (the call's whole JSON: more than the arguments).
        let args = r#"{\"city\": \"Paris\", \"days\": 3}"#;
        let call = json!({"tool_calls": [{"index": 0, "function": {"arguments": args}}]});
        assert!(d(call) as u64 >= f.count(args));
        // Audio: the transcript as text, the data by the rule.
        assert_eq!(
            d(json!({"audio": {"id": "audio_1", "transcript": " hello hello"}})),
            2
        );
        let data = "A".repeat(1280);
        assert_eq!(d(json!({"audio": {"data": data}})), 2);
        assert_eq!(
            d(json!({"audio": {"data": "AAAA"}})),
            1,
            "rounded up per piece"
        );
        assert_eq!(
            d(json!({"audio": {"id": "audio_1", "expires_at": 1700000000}})),
            0
        );
        assert_eq!(d(json!({"audio": null})), 0);
        // Unknown fields, in the delta or in its audio: counted whole.
        assert!(d(json!({"x_future_field": " hello hello"})) >= 2);
        assert!(d(json!({"audio": {"x_words": " hello hello"}})) >= 2);
        assert_eq!(d(json!({"x_future_field": null})), 0);
        // An image (OpenRouter's `images`) is an unknown field: whole; a
        // large one bounded at one token per byte, not tokenized.
        let small = json!({"images": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo"}}]});
        assert!(d(small) >= 10);
        let big = "A".repeat(100_000);
        let big = json!({"images": [{"type": "image_url", "image_url": {"url": big}}]});
        assert!(d(big) >= 100_000);
        // A field twice: the whole event is counted.
        let twice =
            "data: {\"choices\":[{\"delta\":{\"content\":\" hello\",\"content\":\"\"}}]}\n\n";
        assert!(count(twice) >= 1);
    }

    /// Arbitrary JSON for unknown fields.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "\\PC{0,24}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A delta: known fields (often of the wrong type), audio pieces,
    /// unknown fields.
    fn any_delta() -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            Just("content".to_string()),
            Just("reasoning_content".to_string()),
            Just("reasoning".to_string()),
            Just("refusal".to_string()),
            Just("tool_calls".to_string()),
            Just("function_call".to_string()),
            Just("images".to_string()),
            "x_[a-z]{1,8}",
            "[a-z]{1,6}",
        ];
        let text_or_any = prop_oneof![4 => "\\PC{0,32}".prop_map(Value::from), 1 => any_json()];
        let audio = (
            prop::option::of("audio_[a-z0-9]{1,6}"),
            prop::option::of("\\PC{0,32}"),
            prop::option::of("[A-Za-z0-9+/]{0,3000}"),
            prop::option::of(any::<u32>()),
            prop::option::of(("x_[a-z]{1,6}", any_json())),
        )
            .prop_map(|(id, transcript, data, expires, extra)| {
                let mut a = serde_json::Map::new();
                id.map(|v| a.insert("id".into(), v.into()));
                transcript.map(|v| a.insert("transcript".into(), v.into()));
                data.map(|v| a.insert("data".into(), v.into()));
                expires.map(|v| a.insert("expires_at".into(), v.into()));
                extra.map(|(k, v)| a.insert(k, v));
                Value::Object(a)
            });
        (
            prop::option::of(Just("assistant")),
            prop::collection::btree_map(key, text_or_any, 0..4),
            prop::option::of(audio),
        )
            .prop_map(|(role, fields, audio)| {
                let mut d = serde_json::Map::new();
                role.map(|r| d.insert("role".into(), r.into()));
                d.extend(fields);
                audio.map(|a| d.insert("audio".into(), a));
                Value::Object(d)
            })
    }

    /// The output a delta carries, as texts: every string in it but the
    /// role, the audio's id and its data (counted by the rule instead).
    fn text_content(v: &Value, path: &[&str], out: &mut Vec<String>) {
        match v {
            Value::String(s) => {
                let skip = matches!(path, ["role"] | ["audio", "id"] | ["audio", "data"]);
                if !skip && !s.is_empty() {
                    out.push(s.clone());
                }
            }
            Value::Array(a) => a.iter().for_each(|x| text_content(x, path, out)),
            Value::Object(m) => m.iter().for_each(|(k, x)| {
                let mut p = path.to_vec();
                p.push(k);
                text_content(x, &p, out)
            }),
            _ => {}
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// No delta shape counts fewer tokens than its text content would,
        /// plus its audio data by the rule: whatever field the output is in.
        /// The texts are tokenized one by one here and together (in the
        /// meter's order) by the meter: where two meet, a token may merge or
        /// split differently, so one token per meeting is allowed.
        #[test]
        fn no_delta_counts_less_than_its_text(delta in any_delta()) {
            let f = TokenizerFamily::O200k;
            let mut texts = Vec::new();
            text_content(&delta, &[], &mut texts);
            let text: u64 = texts.iter().map(|t| f.count(t)).sum();
            let meetings = texts.len().saturating_sub(1) as u64;
            // The documented rule, restated here: one token per 10 ms of
            // 24 kHz 16-bit PCM, 480 bytes, 640 base64 characters.
            let audio = delta["audio"]["data"]
                .as_str()
                .map_or(0, |d| d.len().div_ceil(640) as u64);
            let got = count(&delta_event(&delta)) as u64;
            prop_assert!(
                got + meetings >= text + audio,
                "{delta}: counted {got}, its texts {text} ({} of them) + audio {audio}",
                texts.len()
            );
        }
    }
}
