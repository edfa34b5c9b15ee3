//! The CPU the dialect edge adds to a request, measured in-process (run with
//! `cargo test --release -p tollgate-gateway --lib translation_cost --
//! --ignored --nocapture`; bench/results/
//! 2026-12-01-dialect-translation-cost.md has a run). For each dialect: the
//! request read into chat (parse, translate, validate, the chat body serialised
//! for the provider), the whole answer written back, and a 64-chunk stream
//! translated event by event. Chat is the baseline: the same parse, validate
//! and serialise with no translation.

use super::{Dialect, Edge, Inbound};
use axum::body::Body;
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::time::Instant;

fn bodies() -> [(Dialect, Value); 3] {
    let text = "Say hello in one short sentence please.";
    [
        (
            Dialect::Chat,
            json!({"model": "m", "max_tokens": 64, "messages": [
                {"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]}),
        ),
        (
            Dialect::Responses,
            json!({"model": "m", "max_output_tokens": 64, "instructions": "Be brief.", "input": text}),
        ),
        (
            Dialect::Messages,
            json!({"model": "m", "max_tokens": 64, "system": "Be brief.",
                "messages": [{"role": "user", "content": text}]}),
        ),
    ]
}

fn chat_answer() -> Bytes {
    Bytes::from(
        json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": " hello".repeat(64)},
        "finish_reason": "stop"}], "usage": {"prompt_tokens": 20, "completion_tokens": 64}})
        .to_string(),
    )
}

fn chat_stream() -> Bytes {
    let mut s = String::new();
    for _ in 0..64 {
        s.push_str(&format!(
            "data: {}\n\n",
            json!({"id": "c", "object": "chat.completion.chunk",
            "created": 1, "model": "m", "choices": [{"index": 0, "delta": {"content": " hello"},
            "finish_reason": null}]})
        ));
    }
    s.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
    s.push_str(
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":64}}\n\n",
    );
    s.push_str("data: [DONE]\n\n");
    Bytes::from(s)
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "a measurement: run it in release with --ignored --nocapture"]
async fn translation_cost() {
    const N: u32 = 20_000;
    let raw: Vec<(Dialect, Vec<u8>)> = bodies()
        .into_iter()
        .map(|(d, b)| (d, serde_json::to_vec(&b).unwrap()))
        .collect();
    let (answer, stream) = (chat_answer(), chat_stream());
    println!("| dialect | request in (µs) | whole answer out (µs) | 64-chunk stream out (µs) |");
    println!("|---|---|---|---|");
    for (dialect, body) in &raw {
        let edge = Edge {
            dialect: *dialect,
            native: false,
            model: "m".into(),
            request_id: "req_0193".into(),
            custom_tools: Vec::new(),
            tool_search: false,
            json_array: false,
        };
        let t0 = Instant::now();
        for _ in 0..N {
            let v: Value = serde_json::from_slice(body).unwrap();
            let inb = Inbound::read(*dialect, v, None).unwrap();
            domain::request::validate(domain::request::Endpoint::ChatCompletions, &inb.chat)
                .unwrap();
            std::hint::black_box(serde_json::to_vec(&inb.chat).unwrap());
        }
        let req_us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(N);
        let t0 = Instant::now();
        for _ in 0..N {
            std::hint::black_box(edge.answer(answer.clone()));
        }
        let ans_us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(N);
        let rounds = N / 10;
        let t0 = Instant::now();
        for _ in 0..rounds {
            let out = if edge.translated() {
                let b = super::stream::translate(edge.clone(), 20, Body::from(stream.clone()));
                b.collect().await.unwrap().to_bytes()
            } else {
                // Chat's stream goes to the client as the meter passes it.
                Body::from(stream.clone())
                    .collect()
                    .await
                    .unwrap()
                    .to_bytes()
            };
            std::hint::black_box(out);
        }
        let st_us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
        println!(
            "| {} | {req_us:.1} | {ans_us:.1} | {st_us:.1} |",
            dialect.as_str()
        );
    }
}
