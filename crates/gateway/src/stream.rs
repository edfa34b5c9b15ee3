//! Streams passed through to the client event by event, with the output
//! counted as it flows and the provider's final usage read from its last
//! chunk. The extra usage chunk tollgate asked for is removed when the client
//! did not ask for it. A dropped client drops this stream, and the held
//! request's `Drop` settles what was generated.

use crate::settle::HeldRequest;
use crate::sse::{data_of, Chunk, SseSplitter};
use axum::body::Body;
use bytes::Bytes;
use futures::StreamExt;

pub fn metered(
    mut held: HeldRequest,
    upstream: reqwest::Response,
    client_wants_usage: bool,
) -> Body {
    let family = held.model.tokenizer;
    let idle = held.gw.cfg.stream_idle_timeout;
    let s = async_stream::stream! {
        let mut up = upstream.bytes_stream();
        let mut split = SseSplitter::default();
        let mut text = String::new();
        let mut broken = false;
        'read: loop {
                        let next = match tokio::time::timeout(idle, up.next()).await {
                Ok(n) => n,
                Err(_) => {
                    tracing::warn!(request_id = %held.request_id, "upstream stream idle too long; closing it");
                    broken = true;
                    break 'read;
                }
            };
            match next {
                Some(Ok(bytes)) => {
                    split.push(&bytes);
                    while let Some(ev) = split.next_event() {
                        if let Some(data) = data_of(&ev) {
                            if data != b"[DONE]" {
                                if let Ok(chunk) = serde_json::from_slice::<Chunk>(data) {
                                    text.clear();
                                    chunk.generated_text(&mut text);
                                    held.counted_output += family.count(&text) as i64;
                                    if let Some(u) = &chunk.usage {
                                        held.provider_usage = Some((u.prompt_tokens, u.completion_tokens));
                                    }
                                    if chunk.is_usage_only() && !client_wants_usage {
                                        continue;
                                    }
                                }
                            }
                        }
                        yield Ok::<Bytes, std::io::Error>(ev);
                    }
                }
                Some(Err(e)) => {
                                        tracing::warn!(request_id = %held.request_id, error = %e.without_url(), "upstream stream broke");
                    broken = true;
                    break 'read;
                }
                None => break 'read,
            }
        }
        if let Some(rest) = split.rest() {
            yield Ok(rest);
        }
        let actual = held.best_known(if broken { "upstream_error" } else { "ok" });
        held.settle(actual).await;
        if broken {
            let err = serde_json::json!({"error": {"message": "the upstream provider closed the stream early",
                "type": "api_error", "code": "upstream_error", "param": null}});
            yield Ok(Bytes::from(format!("data: {err}\n\ndata: [DONE]\n\n")));
        }
    };
    Body::from_stream(s)
}
