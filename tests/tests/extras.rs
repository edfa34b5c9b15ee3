//! Service tiers and hosted tools as policy (docs/billing.md, "Service
//! tiers and hosted tools"): a tier or a hosted tool a key may not use is
//! refused 403 in the client's dialect before anything reaches the
//! provider; an allowed one is held at its price (the tier's prices, the
//! tools' call cap × fee and their results' input) and billed as the
//! provider reports it. Expected amounts are computed here from the sheet
//! the test set and what the mock says it served.

use domain::provider::{CapField, Dialect, ProviderProfile};
use domain::{Limits, MicroUsd};
use e2e::*;
use serde_json::{json, Value};
use std::time::Duration;

/// µUSD per million tokens of the test model's sheet.
const INPUT: i64 = 2_000_000;
const OUTPUT: i64 = 8_000_000;
const PRIORITY_INPUT: i64 = 5_000_000;
const PRIORITY_OUTPUT: i64 = 20_000_000;
const SEARCH_FEE: i64 = 10_000;
/// The gateway's documented hold of hosted tools (domain::extras).
const DEFAULT_TOOL_CALLS: i64 = 5;
const RESULT_TOKENS_PER_CALL: i64 = 8_000;

fn sheet() -> Value {
    json!({"input": INPUT, "output": OUTPUT,
        "service_tiers": {"priority": {"input": PRIORITY_INPUT, "output": PRIORITY_OUTPUT}},
        "tool_fees": {"web_search": SEARCH_FEE}})
}

struct Fixture {
    env: TestEnv,
    srv: server::app::Running,
    base: String,
    admin: String,
}

/// Model `m` (every dialect native) and `chat-only` (chat only: Responses
/// and Messages translated), each priced by [`sheet`].
async fn fixture() -> Fixture {
    let env = TestEnv::new().await;
    for (id, apis) in [
        (
            "m",
            vec![Dialect::Chat, Dialect::Responses, Dialect::Messages],
        ),
        ("chat-only", vec![Dialect::Chat]),
    ] {
        env.model(id, "chat", 1, 1).await;
        env.profile(
            id,
            ProviderProfile {
                cap_field: CapField::MaxTokens,
                hidden_reasoning: false,
                apis,
            },
        )
        .await;
    }
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    user(&env, "root@example.com", "platform_admin", None).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let admin = login(&base, "root@example.com").await;
    for m in ["m", "chat-only"] {
        set_sheet(&base, &admin, m, sheet()).await;
    }
    Fixture {
        env,
        srv,
        base,
        admin,
    }
}

async fn set_sheet(base: &str, admin: &str, model: &str, sheet: Value) {
    let (status, body) = api(
        "POST",
        &format!("{base}/api/v1/models/{model}/prices"),
        Some(admin),
        Some(json!({"sheet": sheet})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The catalog takes the sheet on its change notice.
    tokio::time::sleep(Duration::from_millis(800)).await;
}

/// A key of tenant `t` with `limits` (read on the server's next catalog
/// notice).
async fn key(f: &Fixture, limits: Limits) -> String {
    let (_, k) = f.env.key("t", "a", limits).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    k
}

fn path(dialect: &str) -> &'static str {
    match dialect {
        "chat" => "/v1/chat/completions",
        "responses" => "/v1/responses",
        _ => "/v1/messages",
    }
}

/// A body of `dialect` for `model` with `extra` fields merged in.
fn body(dialect: &str, model: &str, content: &str, extra: Value) -> Value {
    let mut b = match dialect {
        "chat" => json!({"model": model, "max_tokens": 20,
            "messages": [{"role": "user", "content": content}]}),
        "responses" => json!({"model": model, "max_output_tokens": 20, "input": content}),
        _ => json!({"model": model, "max_tokens": 20,
            "messages": [{"role": "user", "content": content}]}),
    };
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

/// Sends; returns status, request id and the body as JSON.
async fn send(f: &Fixture, key: &str, dialect: &str, b: &Value) -> (u16, String, Value) {
    let r = post(&format!("{}{}", f.base, path(dialect)), key, b).await;
    let status = r.status().as_u16();
    let rid = r
        .headers()
        .get("x-request-id")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null);
    (status, rid, v)
}

/// The refusal's reason code and the field it names, in `dialect`'s shape
/// (Anthropic's names the field in its message).
fn refusal(dialect: &str, v: &Value) -> (String, String) {
    let e = &v["error"];
    let code = e["code"].as_str().unwrap_or_default().to_string();
    if dialect == "messages" {
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(e["type"], "permission_error", "{v}");
        let msg = e["message"].as_str().unwrap_or_default();
        let field = msg.split(':').next().unwrap_or_default().to_string();
        return (code, field);
    }
    assert_eq!(e["type"], "permission_error", "{v}");
    (code, e["param"].as_str().unwrap_or_default().to_string())
}

async fn booked(f: &Fixture, rid: &str) -> domain::usage::UsageEvent {
    let ok = eventually(Duration::from_secs(10), || async {
        f.env.usage_event(rid).await.is_some()
    })
    .await;
    assert!(ok, "{rid} booked");
    f.env.usage_event(rid).await.unwrap()
}

/// µUSD of `input` and `output` tokens at (input, output) prices, rounded up.
fn micro(input: i64, output: i64, (pin, pout): (i64, i64)) -> i64 {
    (input * pin + output * pout + 999_999) / 1_000_000
}

/// A tier the key may not use is refused 403 `service_tier_not_allowed`
/// naming `service_tier` in every dialect, before the provider sees it;
/// `auto` and `default` are the default's.
#[tokio::test]
async fn a_service_tier_the_key_may_not_use_is_refused_in_every_dialect() {
    let f = fixture().await;
    let k = key(&f, Limits::default()).await;
    for dialect in ["chat", "responses", "messages"] {
        let before = f.env.mock.snapshot().requests;
        let b = body(dialect, "m", "hi", json!({"service_tier": "priority"}));
        let (status, _, v) = send(&f, &k, dialect, &b).await;
        assert_eq!(status, 403, "{dialect}: {v}");
        assert_eq!(
            refusal(dialect, &v),
            ("service_tier_not_allowed".into(), "service_tier".into()),
            "{dialect}"
        );
        assert_eq!(
            f.env.mock.snapshot().requests,
            before,
            "{dialect}: not forwarded"
        );
    }
    // Anthropic's fast mode is a tier of its own.
    let b = body("messages", "m", "hi", json!({"speed": "fast"}));
    let (status, _, v) = send(&f, &k, "messages", &b).await;
    assert_eq!(status, 403, "{v}");
    assert_eq!(refusal("messages", &v).1, "speed");
    for tier in ["auto", "default"] {
        let b = body("chat", "m", "hi", json!({"service_tier": tier}));
        let (status, _, v) = send(&f, &k, "chat", &b).await;
        assert_eq!(status, 200, "{tier}: {v}");
    }
    f.srv.shutdown().await;
}

/// A key allowed `priority` is held at the priority prices and billed at
/// them (the provider served it at priority); a budget that covers the
/// default price but not priority's refuses it 402 before forwarding.
#[tokio::test]
async fn an_allowed_tier_is_held_and_billed_at_its_price() {
    let f = fixture().await;
    let allowed = Limits {
        allowed_service_tiers: Some(vec!["priority".into()]),
        ..Default::default()
    };
    let k = key(&f, allowed.clone()).await;
    let before = f.env.mock.snapshot();
    let b = body(
        "chat",
        "m",
        "hello there",
        json!({"service_tier": "priority"}),
    );
    let (status, rid, v) = send(&f, &k, "chat", &b).await;
    assert_eq!(status, 200, "{v}");
    let after = f.env.mock.snapshot();
    let (p, c) = (
        (after.prompt_tokens - before.prompt_tokens) as i64,
        (after.completion_tokens - before.completion_tokens) as i64,
    );
    let e = booked(&f, &rid).await;
    let est_in = e.est_tokens - 20;
    assert_eq!(
        e.est_cost_micro,
        micro(est_in, 20, (PRIORITY_INPUT, PRIORITY_OUTPUT)),
        "held at the priority prices ({e:?})"
    );
    assert_eq!(
        e.cost_pico,
        p * PRIORITY_INPUT + c * PRIORITY_OUTPUT,
        "billed at the priority prices"
    );
    // A budget between the two holds: the default passes, priority not.
    let default_hold = micro(est_in, 20, (INPUT, OUTPUT));
    let priority_hold = micro(est_in, 20, (PRIORITY_INPUT, PRIORITY_OUTPUT));
    let budget = (default_hold + priority_hold) / 2;
    let k = key(
        &f,
        Limits {
            monthly_cost_usd: Some(MicroUsd(budget)),
            ..allowed
        },
    )
    .await;
    let before = f.env.mock.snapshot().requests;
    let (status, _, v) = send(&f, &k, "chat", &b).await;
    assert_eq!(status, 402, "priority past the budget: {v}");
    assert_eq!(f.env.mock.snapshot().requests, before, "not forwarded");
    let plain = body("chat", "m", "hello there", json!({}));
    let (status, _, v) = send(&f, &k, "chat", &plain).await;
    assert_eq!(status, 200, "the default fits: {v}");
    f.srv.shutdown().await;
}

/// Hosted tools on a budgeted key: refused 403 `tool_not_allowed` naming
/// `tools[i].type` unless allowed; allowed, the call cap is sent where the
/// client set none, the hold covers cap × fee + the results' input, and a
/// budget that covers the tokens but not the fees refuses before
/// forwarding.
#[tokio::test]
async fn hosted_tools_are_refused_unless_allowed_then_capped_and_held() {
    let f = fixture().await;
    let budget = Limits {
        monthly_cost_usd: Some(MicroUsd(10_000_000)),
        ..Default::default()
    };
    let k = key(&f, budget.clone()).await;
    let tools = json!({"tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}},
        {"type": "web_search"}]});
    let before = f.env.mock.snapshot().requests;
    let (status, _, v) = send(
        &f,
        &k,
        "responses",
        &body("responses", "m", "hi", tools.clone()),
    )
    .await;
    assert_eq!(status, 403, "{v}");
    assert_eq!(
        refusal("responses", &v),
        ("tool_not_allowed".into(), "tools[1].type".into())
    );
    let anthropic_search =
        json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]});
    let (status, _, v) = send(
        &f,
        &k,
        "messages",
        &body("messages", "m", "hi", anthropic_search.clone()),
    )
    .await;
    assert_eq!(status, 403, "{v}");
    assert_eq!(
        refusal("messages", &v),
        ("tool_not_allowed".into(), "tools[0].type".into())
    );
    assert_eq!(f.env.mock.snapshot().requests, before, "nothing forwarded");

    let allowed = Limits {
        allowed_tools: Some(vec!["web_search".into()]),
        ..budget
    };
    let k = key(&f, allowed.clone()).await;
    let (status, rid, v) = send(
        &f,
        &k,
        "responses",
        &body("responses", "m", "hi", tools.clone()),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let seen = f.env.mock.snapshot().last_body.unwrap();
    assert_eq!(
        seen["max_tool_calls"], DEFAULT_TOOL_CALLS,
        "the cap sent: {seen}"
    );
    let e = booked(&f, &rid).await;
    let est_in = e.est_tokens - 20;
    assert!(
        est_in > DEFAULT_TOOL_CALLS * RESULT_TOKENS_PER_CALL,
        "the results' input held ({e:?})"
    );
    assert_eq!(
        e.est_cost_micro,
        micro(est_in, 20, (INPUT, OUTPUT)) + DEFAULT_TOOL_CALLS * SEARCH_FEE,
        "held: tokens + cap × fee ({e:?})"
    );
    // The client's own cap is kept, and held; the searches the provider
    // ran (its `web_search_call` items) billed at the fee each.
    let mut capped = tools.clone();
    capped["max_tool_calls"] = json!(2);
    let before = f.env.mock.snapshot();
    let b = body("responses", "m", "[mock:web_search=2] look it up", capped);
    let (status, rid, _) = send(&f, &k, "responses", &b).await;
    assert_eq!(status, 200);
    let after = f.env.mock.snapshot();
    assert_eq!(after.last_body.as_ref().unwrap()["max_tool_calls"], 2);
    let e = booked(&f, &rid).await;
    assert_eq!(
        e.est_cost_micro,
        micro(e.est_tokens - 20, 20, (INPUT, OUTPUT)) + 2 * SEARCH_FEE
    );
    let (p, c) = (
        (after.prompt_tokens - before.prompt_tokens) as i64,
        (after.completion_tokens - before.completion_tokens) as i64,
    );
    assert_eq!(
        e.cost_pico,
        p * INPUT + c * OUTPUT + 2 * SEARCH_FEE * 1_000_000,
        "two searches billed ({e:?})"
    );
    // The same streamed: the searches arrive as `web_search_call` items of
    // the stream (and of its final response), billed at the fee each.
    let mut streamed = b.clone();
    streamed["stream"] = json!(true);
    let before = f.env.mock.snapshot();
    let (status, rid, _) = send(&f, &k, "responses", &streamed).await;
    assert_eq!(status, 200);
    let after = f.env.mock.snapshot();
    let e = booked(&f, &rid).await;
    let (p, c) = (
        (after.prompt_tokens - before.prompt_tokens) as i64,
        (after.completion_tokens - before.completion_tokens) as i64,
    );
    assert_eq!((e.status.as_str(), e.stream), ("ok", true), "{e:?}");
    assert_eq!(
        e.cost_pico,
        p * INPUT + c * OUTPUT + 2 * SEARCH_FEE * 1_000_000,
        "two streamed searches billed ({e:?})"
    );

    // Anthropic: `max_uses` sent, the searches the provider reports billed
    // at the fee each.
    let before = f.env.mock.snapshot();
    let b = body(
        "messages",
        "m",
        "[mock:web_search=3] find it",
        anthropic_search,
    );
    let (status, rid, v) = send(&f, &k, "messages", &b).await;
    assert_eq!(status, 200, "{v}");
    let after = f.env.mock.snapshot();
    assert_eq!(
        after.last_body.as_ref().unwrap()["tools"][0]["max_uses"],
        DEFAULT_TOOL_CALLS
    );
    let (p, c) = (
        (after.prompt_tokens - before.prompt_tokens) as i64,
        (after.completion_tokens - before.completion_tokens) as i64,
    );
    let e = booked(&f, &rid).await;
    assert_eq!(
        e.cost_pico,
        p * INPUT + c * OUTPUT + 3 * SEARCH_FEE * 1_000_000,
        "three searches billed ({e:?})"
    );

    // A budget that covers the tokens (results included) but not the fees.
    let tokens_hold = micro(est_in, 20, (INPUT, OUTPUT));
    let k = key(
        &f,
        Limits {
            monthly_cost_usd: Some(MicroUsd(tokens_hold + SEARCH_FEE)),
            ..allowed
        },
    )
    .await;
    let before = f.env.mock.snapshot().requests;
    let (status, _, v) = send(
        &f,
        &k,
        "responses",
        &body("responses", "m", "hi", tools.clone()),
    )
    .await;
    assert_eq!(status, 402, "the fees do not fit: {v}");
    assert_eq!(f.env.mock.snapshot().requests, before, "not forwarded");
    f.srv.shutdown().await;
}

/// A model whose provider does not speak the dialect refuses hosted tools
/// clearly (400 naming the tool), never drops them.
#[tokio::test]
async fn translated_models_refuse_hosted_tools() {
    let f = fixture().await;
    let k = key(&f, Limits::default()).await;
    for (dialect, extra) in [
        ("responses", json!({"tools": [{"type": "web_search"}]})),
        (
            "messages",
            json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
        ),
    ] {
        let before = f.env.mock.snapshot().requests;
        let (status, _, v) = send(&f, &k, dialect, &body(dialect, "chat-only", "hi", extra)).await;
        assert_eq!(status, 400, "{dialect}: {v}");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("tools[0].type") || v["error"]["param"] == "tools[0].type",
            "{dialect}: {v}"
        );
        assert!(msg.contains("natively"), "{dialect}: {v}");
        assert_eq!(
            f.env.mock.snapshot().requests,
            before,
            "{dialect}: not forwarded"
        );
    }
    f.srv.shutdown().await;
}

/// A Gemini request (raw HTTP, as Gemini CLI and the `google-genai` SDK
/// send it).
async fn send_gemini(
    f: &Fixture,
    key: &str,
    model: &str,
    method: &str,
    b: &Value,
) -> (u16, String, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/v1beta/models/{model}:{method}", f.base))
        .header("x-goog-api-key", key)
        .json(b)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let reason = r
        .headers()
        .get("x-tollgate-reason")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null);
    (status, reason, v)
}

/// Gemini's hosted tools (`googleSearch`, `codeExecution`, `urlContext`, …)
/// follow the same policy as the other dialects' under their policy names:
/// a budgeted key not allowed them is refused 403 `tool_not_allowed` naming
/// `tools[i].googleSearch`, in Google's error shape; allowed, the request
/// is refused 400 naming the tool, as every translated model refuses hosted
/// tools (no provider serves the Gemini API natively: every Gemini request
/// is translated). Never dropped, never forwarded; function declarations
/// alone still pass.
#[tokio::test]
async fn gemini_hosted_tools_follow_the_policy_then_are_refused_as_translated() {
    let f = fixture().await;
    let budget = Limits {
        monthly_cost_usd: Some(MicroUsd(10_000_000)),
        ..Default::default()
    };
    let gemini = |tools: Value| {
        json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "generationConfig": {"maxOutputTokens": 20}, "tools": tools})
    };
    let function =
        json!({"functionDeclarations": [{"name": "ls", "parameters": {"type": "OBJECT"}}]});
    let search = gemini(json!([function, {"googleSearch": {}}]));
    let code = gemini(json!([{"codeExecution": {}}]));
    let before = f.env.mock.snapshot().requests;

    // Not allowed: 403 `tool_not_allowed`, the field named, the reason in
    // the header and in Google's ErrorInfo detail.
    let k = key(&f, budget.clone()).await;
    for (model, method) in [
        ("m", "generateContent"),
        ("chat-only", "streamGenerateContent"),
    ] {
        let (status, reason, v) = send_gemini(&f, &k, model, method, &search).await;
        assert_eq!(status, 403, "{model}: {v}");
        assert_eq!(reason, "tool_not_allowed", "{v}");
        let e = &v["error"];
        assert_eq!(
            (e["code"].as_i64(), e["status"].as_str()),
            (Some(403), Some("PERMISSION_DENIED")),
            "{v}"
        );
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .starts_with("tools[1].googleSearch: "),
            "{v}"
        );
        assert_eq!(e["details"][0]["reason"], "tool_not_allowed", "{v}");
    }
    // Allowed web search only: code execution is still refused by name.
    let k = key(
        &f,
        Limits {
            allowed_tools: Some(vec!["web_search".into()]),
            ..budget.clone()
        },
    )
    .await;
    let (status, reason, v) = send_gemini(&f, &k, "m", "generateContent", &code).await;
    assert_eq!((status, reason.as_str()), (403, "tool_not_allowed"), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("tools[0].codeExecution: "),
        "{v}"
    );

    // Allowed: refused as every translated model refuses hosted tools, 400
    // `invalid_request` naming the tool.
    let (status, reason, v) = send_gemini(&f, &k, "m", "generateContent", &search).await;
    assert_eq!((status, reason.as_str()), (400, "invalid_request"), "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert_eq!(v["error"]["status"], "INVALID_ARGUMENT", "{v}");
    assert!(msg.starts_with("tools[1].googleSearch: "), "{v}");
    assert!(msg.contains("natively"), "{v}");
    assert_eq!(f.env.mock.snapshot().requests, before, "nothing forwarded");

    // Function declarations alone are client tools: served.
    let (status, _, v) =
        send_gemini(&f, &k, "m", "generateContent", &gemini(json!([function]))).await;
    assert_eq!(status, 200, "{v}");
    f.srv.shutdown().await;
}

/// A prompt whose input's upper bound crosses a whole-request tier is held
/// at the tier's prices: a budget that covers the base price but not the
/// tier's refuses it; a short prompt passes.
#[tokio::test]
async fn a_prompt_that_may_cross_a_tier_is_held_at_the_tier() {
    let f = fixture().await;
    let mut s = sheet();
    s["tiers"] = json!([{"above_input_tokens": 5_000,
        "prices": {"input": INPUT * 2, "output": OUTPUT * 2}}]);
    set_sheet(&f.base, &f.admin, "m", s).await;
    // About 3,000 tokens: under the threshold, but its upper bound
    // (1.5 × estimate + 1,024) is above it.
    let long = "word ".repeat(3_000);
    let est_base = micro(3_100, 20, (INPUT, OUTPUT));
    let est_tier = micro(2_900, 20, (INPUT * 2, OUTPUT * 2));
    assert!(est_base < est_tier);
    let k = key(
        &f,
        Limits {
            monthly_cost_usd: Some(MicroUsd((est_base + est_tier) / 2)),
            ..Default::default()
        },
    )
    .await;
    let before = f.env.mock.snapshot().requests;
    let (status, _, v) = send(&f, &k, "chat", &body("chat", "m", &long, json!({}))).await;
    assert_eq!(status, 402, "held at the tier: {v}");
    assert_eq!(f.env.mock.snapshot().requests, before, "not forwarded");
    let (status, _, v) = send(&f, &k, "chat", &body("chat", "m", "hi", json!({}))).await;
    assert_eq!(status, 200, "{v}");
    f.srv.shutdown().await;
}

/// `store: true` and `prediction` are refused with the reason, naming the
/// field, before anything is sent (docs/providers.md, "Fields that change
/// cost or retention"); `store: false` goes through.
#[tokio::test]
async fn store_and_prediction_get_the_documented_treatment() {
    let f = fixture().await;
    let k = key(&f, Limits::default()).await;
    for (extra, param) in [
        (json!({"store": true}), "store"),
        (
            json!({"prediction": {"type": "content", "content": "hello hello"}}),
            "prediction",
        ),
    ] {
        let before = f.env.mock.snapshot().requests;
        let (status, _, v) = send(&f, &k, "chat", &body("chat", "m", "hi", extra)).await;
        assert_eq!(status, 400, "{param}: {v}");
        assert_eq!(v["error"]["param"], param, "{v}");
        assert_eq!(v["error"]["code"], "invalid_request", "{v}");
        assert_eq!(
            f.env.mock.snapshot().requests,
            before,
            "{param}: not forwarded"
        );
    }
    let (status, _, v) = send(
        &f,
        &k,
        "chat",
        &body("chat", "m", "hi", json!({"store": false})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    f.srv.shutdown().await;
}

/// Images are in the input estimate, by the provider's rule (an image of
/// unknown size at the documented bound, 1,600 tokens): ten images on a
/// 5,000-token budget are refused 402 before anything is sent; two fit.
#[tokio::test]
async fn images_are_held_by_the_providers_rule() {
    let f = fixture().await;
    let k = key(
        &f,
        Limits {
            monthly_tokens: Some(5_000),
            ..Default::default()
        },
    )
    .await;
    let with_images = |n: usize| {
        let mut parts = vec![json!({"type": "text", "text": "what is in these?"})];
        for i in 0..n {
            parts.push(json!({"type": "image_url",
                "image_url": {"url": format!("https://images.example.com/{i}.jpg")}}));
        }
        json!({"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": parts}]})
    };
    let before = f.env.mock.snapshot().requests;
    let (status, _, v) = send(&f, &k, "chat", &with_images(10)).await;
    assert_eq!(status, 402, "{v}");
    assert_eq!(f.env.mock.snapshot().requests, before, "not forwarded");
    let (status, rid, v) = send(&f, &k, "chat", &with_images(2)).await;
    assert_eq!(status, 200, "{v}");
    let e = booked(&f, &rid).await;
    assert!(e.est_tokens - 20 >= 2 * 1_600, "two images held ({e:?})");
    f.srv.shutdown().await;
}

/// The policy is edited through the admin API like every limit: a bad name
/// is refused naming the field, a good list is versioned (and audited) and
/// reaches the running gateway.
#[tokio::test]
async fn the_policy_is_set_through_the_admin_api() {
    let f = fixture().await;
    let (id, k) = f.env.key("t", "a", Limits::default()).await;
    let url = format!("{}/api/v1/keys/{id}/limits", f.base);
    let (status, body) = api(
        "PUT",
        &url,
        Some(&f.admin),
        Some(json!({"limits": {"allowed_service_tiers": ["pri ority"]}})),
    )
    .await;
    assert!((400..500).contains(&status), "{status} {body}");
    assert!(body.to_string().contains("allowed_service_tiers"), "{body}");
    let (status, body) = api(
        "PUT",
        &url,
        Some(&f.admin),
        Some(json!({"limits": {"allowed_service_tiers": ["priority"]}})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, versions) = api("GET", &format!("{url}/versions"), Some(&f.admin), None).await;
    assert!(
        versions.to_string().contains("allowed_service_tiers"),
        "{versions}"
    );
    let b = body_of_tier("priority");
    let ok = eventually(Duration::from_secs(5), || async {
        send(&f, &k, "chat", &b).await.0 == 200
    })
    .await;
    assert!(ok, "the key may use priority once the change is in");
    f.srv.shutdown().await;
}

fn body_of_tier(tier: &str) -> Value {
    body("chat", "m", "hi", json!({"service_tier": tier}))
}

/// Gemini's `serviceTier` is the same policy as every dialect's tier: a key
/// not allowed `priority` is refused 403 `service_tier_not_allowed` naming
/// `serviceTier`, in Google's shape, before anything is sent; an allowed
/// one reaches the chat provider as `service_tier` and is held and billed
/// at the priority prices. Cached content and audio answers cannot be
/// translated: refused naming the field, never dropped.
#[tokio::test]
async fn a_gemini_service_tier_is_a_policy_and_reaches_the_provider() {
    let f = fixture().await;
    let gemini = |extra: Value| {
        let mut b = json!({"contents": [{"role": "user", "parts": [{"text": "hello there"}]}],
            "generationConfig": {"maxOutputTokens": 20}});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let before = f.env.mock.snapshot().requests;
    let k = key(&f, Limits::default()).await;
    let priority = gemini(json!({"serviceTier": "priority"}));
    let (status, reason, v) = send_gemini(&f, &k, "m", "generateContent", &priority).await;
    assert_eq!(
        (status, reason.as_str()),
        (403, "service_tier_not_allowed"),
        "{v}"
    );
    assert_eq!(v["error"]["status"], "PERMISSION_DENIED", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("serviceTier: "),
        "{v}"
    );
    for (extra, field) in [
        (
            json!({"cachedContent": "cachedContents/abc"}),
            "cachedContent",
        ),
        (
            json!({"generationConfig": {"maxOutputTokens": 20, "responseModalities": ["AUDIO"]}}),
            "generationConfig.responseModalities",
        ),
    ] {
        let (status, reason, v) = send_gemini(&f, &k, "m", "generateContent", &gemini(extra)).await;
        assert_eq!((status, reason.as_str()), (400, "invalid_request"), "{v}");
        // The field named (first, unless the message names it already).
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(field), "{v}");
    }
    assert_eq!(f.env.mock.snapshot().requests, before, "nothing forwarded");

    let k = key(
        &f,
        Limits {
            allowed_service_tiers: Some(vec!["priority".into()]),
            ..Default::default()
        },
    )
    .await;
    let before = f.env.mock.snapshot();
    let r = reqwest::Client::new()
        .post(format!("{}/v1beta/models/m:generateContent", f.base))
        .header("x-goog-api-key", &k)
        .json(&priority)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let after = f.env.mock.snapshot();
    assert_eq!(
        after.last_body.as_ref().unwrap()["service_tier"],
        "priority",
        "the tier sent to the provider"
    );
    let (p, c) = (
        (after.prompt_tokens - before.prompt_tokens) as i64,
        (after.completion_tokens - before.completion_tokens) as i64,
    );
    let e = booked(&f, &rid).await;
    assert_eq!(
        e.est_cost_micro,
        micro(e.est_tokens - 20, 20, (PRIORITY_INPUT, PRIORITY_OUTPUT)),
        "held at the priority prices ({e:?})"
    );
    assert_eq!(
        e.cost_pico,
        p * PRIORITY_INPUT + c * PRIORITY_OUTPUT,
        "billed at the priority prices ({e:?})"
    );
    f.srv.shutdown().await;
}

/// A WAV of `seconds` at 16 kHz mono 16-bit, as base64.
fn wav_b64(seconds: u32) -> String {
    use base64::Engine;
    let data = 32_000 * seconds;
    let mut b = b"RIFF".to_vec();
    b.extend_from_slice(&(36 + data).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&16u32.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&16_000u32.to_le_bytes());
    b.extend_from_slice(&32_000u32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&16u16.to_le_bytes());
    b.extend_from_slice(b"data");
    b.extend_from_slice(&data.to_le_bytes());
    b.resize(b.len() + data as usize, 0);
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// Audio input is held by its duration (documented: 32 tokens a second),
/// not by its base64 read as text; a file part the gateway cannot size is
/// held at the model's context window (128,000 tokens for a model whose
/// window tollgate does not know): refused 402 before forwarding on a
/// budget below it, served and held at it without one.
#[tokio::test]
async fn audio_and_files_are_held_by_their_documented_bounds() {
    let f = fixture().await;
    let k = key(&f, Limits::default()).await;
    let with = |part: Value| {
        json!({"model": "m", "max_tokens": 20, "messages": [{"role": "user",
            "content": [{"type": "text", "text": "what is this?"}, part]}]})
    };
    // Ten seconds of audio: 320 tokens (352 with the header's rounding),
    // where its 427 KB of base64 read as text would be ~100 times more.
    let audio = with(json!({"type": "input_audio",
        "input_audio": {"data": wav_b64(10), "format": "wav"}}));
    let (status, rid, v) = send(&f, &k, "chat", &audio).await;
    assert_eq!(status, 200, "{v}");
    let e = booked(&f, &rid).await;
    let held_in = e.est_tokens - 20;
    assert!(
        (10 * 32..=11 * 32 + 50).contains(&held_in),
        "ten seconds held as ~320 tokens ({e:?})"
    );

    let file = with(json!({"type": "file", "file": {"file_id": "file-abc123"}}));
    let budgeted = key(
        &f,
        Limits {
            monthly_tokens: Some(100_000),
            ..Default::default()
        },
    )
    .await;
    let before = f.env.mock.snapshot().requests;
    let (status, _, v) = send(&f, &budgeted, "chat", &file).await;
    assert_eq!(status, 402, "a file id held at the window: {v}");
    assert_eq!(f.env.mock.snapshot().requests, before, "not forwarded");
    let (status, rid, v) = send(&f, &k, "chat", &file).await;
    assert_eq!(status, 200, "{v}");
    let e = booked(&f, &rid).await;
    assert!(
        e.est_tokens - 20 >= 128_000,
        "the file held at the window ({e:?})"
    );
    f.srv.shutdown().await;
}
