//! Priced as the provider bills (docs/billing.md, "What a request is billed
//! for"): the provider's usage breakdown, read in every dialect and stream
//! shape, priced component by component by the sheet in force when the
//! request came, the exact cost kept on the ledger row. Every expected cost
//! here is computed from what the mock provider says it served (its own
//! counters) and the sheet the test set — never from the gateway's code.

use domain::provider::{CapField, Dialect, ProviderProfile};
use domain::Limits;
use e2e::*;
use serde_json::{json, Value};
use std::time::Duration;

/// µUSD per million tokens of the test model's sheet.
const INPUT: i64 = 2_000_000;
const CACHED: i64 = 200_000;
const WRITE_5M: i64 = 2_500_000;
const WRITE_1H: i64 = 4_000_000;
/// OpenAI's write TTLs.
const WRITE_30M: i64 = 3_000_000;
const WRITE_12H: i64 = 5_000_000;
const OUTPUT: i64 = 8_000_000;
const SEARCH_FEE: i64 = 10_000;
/// Above this much input, every token at the tier's prices.
const TIER_ABOVE: i64 = 5_000;
const TIER_INPUT: i64 = 4_000_000;
const TIER_OUTPUT: i64 = 12_000_000;
const AUDIO_OUTPUT: i64 = 40_000_000;

fn sheet() -> Value {
    json!({"input": INPUT, "output": OUTPUT, "cached_input": CACHED,
        "cache_write_5m": WRITE_5M, "cache_write_1h": WRITE_1H,
        "cache_write_30m": WRITE_30M, "cache_write_12h": WRITE_12H,
        "audio_output": AUDIO_OUTPUT,
        "tool_fees": {"web_search": SEARCH_FEE},
        "tiers": [{"above_input_tokens": TIER_ABOVE,
            "prices": {"input": TIER_INPUT, "output": TIER_OUTPUT}}]})
}

struct Fixture {
    env: TestEnv,
    srv: server::app::Running,
    base: String,
    key: String,
    admin: String,
    /// A key of tenant `cut`, whose month allows 1,500 tokens.
    cut_key: String,
}

/// Model `m` (every dialect native, a sheet from now on) and a tenant key.
async fn fixture() -> Fixture {
    let env = TestEnv::new().await;
    env.model("m", "chat", 1, 1).await;
    env.profile(
        "m",
        ProviderProfile {
            cap_field: CapField::MaxTokens,
            hidden_reasoning: false,
            apis: vec![Dialect::Chat, Dialect::Responses, Dialect::Messages],
        },
    )
    .await;
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    let (_, key) = env.key("t", "a", Limits::default()).await;
    env.tenant(
        "cut",
        Limits {
            monthly_tokens: Some(1_500),
            ..Default::default()
        },
        None,
    )
    .await;
    env.app("cut", "a", Limits::default()).await;
    let (_, cut_key) = env.key("cut", "a", Limits::default()).await;
    user(&env, "root@example.com", "platform_admin", None).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let admin = login(&base, "root@example.com").await;
    let (status, body) = api(
        "POST",
        &format!("{base}/api/v1/models/m/prices"),
        Some(&admin),
        Some(json!({"sheet": sheet()})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The catalog takes the sheet on its change notice.
    tokio::time::sleep(Duration::from_millis(800)).await;
    Fixture {
        env,
        srv,
        base,
        key,
        admin,
        cut_key,
    }
}

/// A prompt of about `tokens` tokens (the mock counts ~4 characters a
/// token) with the mock's directives.
fn prompt(tokens: usize, directives: &str) -> String {
    format!("{directives} {}", "word ".repeat(tokens * 4 / 5))
}

/// Sends `content` in `dialect`, reads the whole answer; returns the
/// request id and what the mock served (prompt and completion tokens, by
/// its own counters).
async fn served(f: &Fixture, dialect: &str, stream: bool, content: &str) -> (String, i64, i64) {
    let before = f.env.mock.snapshot();
    let (path, body) = match dialect {
        "chat" => (
            "/v1/chat/completions",
            json!({"model": "m", "max_tokens": 20, "stream": stream,
                "messages": [{"role": "user", "content": content}]}),
        ),
        "responses" => (
            "/v1/responses",
            json!({"model": "m", "max_output_tokens": 20, "stream": stream, "input": content}),
        ),
        _ => (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 20, "stream": stream,
                "messages": [{"role": "user", "content": content}]}),
        ),
    };
    let r = reqwest::Client::new()
        .post(format!("{}{path}", f.base))
        .bearer_auth(&f.key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{dialect} stream={stream}");
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let _ = r.bytes().await.unwrap();
    let booked = eventually(Duration::from_secs(10), || async {
        f.env.usage_event(&rid).await.is_some()
    })
    .await;
    assert!(booked, "{dialect} stream={stream}: booked");
    let after = f.env.mock.snapshot();
    (
        rid,
        (after.prompt_tokens - before.prompt_tokens) as i64,
        (after.completion_tokens - before.completion_tokens) as i64,
    )
}

/// This month's bill by component, as the platform admin reads it.
async fn bill_by_component(f: &Fixture) -> Value {
    let (status, bill) = api(
        "GET",
        &format!(
            "{}/api/v1/bills?period={}&by=component",
            f.base,
            this_month()
        ),
        Some(&f.admin),
        None,
    )
    .await;
    assert_eq!(status, 200, "{bill}");
    bill
}

/// Pico-USD as the books' micro-USD: rounded up.
fn micro(pico: i64) -> i64 {
    (pico + 999_999) / 1_000_000
}

async fn assert_cost(f: &Fixture, rid: &str, pico: i64, what: &str) {
    let e = f.env.usage_event(rid).await.unwrap();
    assert_eq!(e.cost_pico, pico, "{what}: exact cost ({e:?})");
    assert_eq!(e.cost_micro, micro(pico), "{what}: micro-USD");
}

/// 900 of ~1,000 input tokens read from the cache: billed at 100 × input +
/// 900 × cached + output × output — per dialect, streaming and not.
#[tokio::test]
async fn cached_input_is_billed_at_the_cached_price_in_every_dialect() {
    let f = fixture().await;
    // What the test expects the books to hold, from the mock's counters
    // and the sheet: (uncached input, cached input, output) tokens and the
    // exact cost.
    let (mut uncached, mut cached, mut output, mut exact) = (0i64, 0i64, 0i64, 0i64);
    for dialect in ["chat", "responses", "messages"] {
        for stream in [false, true] {
            let (rid, p, c) =
                served(&f, dialect, stream, &prompt(1_000, "[mock:cached=900]")).await;
            assert!(p > 900, "{dialect}: a prompt above the cached part ({p})");
            let pico = (p - 900) * INPUT + 900 * CACHED + c * OUTPUT;
            assert_cost(&f, &rid, pico, &format!("{dialect} stream={stream}")).await;
            let e = f.env.usage_event(&rid).await.unwrap();
            let b = e.breakdown.expect("the breakdown is kept");
            assert_eq!((b.cached_input, b.input + b.cached_input), (900, p));
            let ch = e.charges.expect("the charge components are kept");
            assert_eq!(
                ch.total_pico(),
                i128::from(pico),
                "{dialect}: components add up"
            );
            (uncached, cached, output, exact) =
                (uncached + p - 900, cached + 900, output + c, exact + pico);
        }
    }
    // Without a cache hit: the plain input price, no breakdown kept.
    let (rid, p, c) = served(&f, "chat", false, &prompt(1_000, "")).await;
    assert_cost(&f, &rid, p * INPUT + c * OUTPUT, "uncached").await;
    assert!(f.env.usage_event(&rid).await.unwrap().breakdown.is_none());
    (uncached, output, exact) = (uncached + p, output + c, exact + p * INPUT + c * OUTPUT);
    // The bill line is the exact sum rounded once, half up; by component it
    // shows each quantity, and the components add up to the line.
    let bill = bill_by_component(&f).await;
    let usd = |v: &Value| {
        domain::money::MicroUsd::from_usd_str(v.as_str().unwrap())
            .unwrap()
            .0
    };
    let line = (exact + 500_000) / 1_000_000;
    assert_eq!(usd(&bill["tenants"][0]["cost_usd"]), line, "{bill}");
    let lines = bill["lines"].as_array().unwrap();
    let qty = |k: &str| {
        lines
            .iter()
            .find(|l| l["key"] == k)
            .map_or(0, |l| l["quantity"].as_i64().unwrap())
    };
    assert_eq!(
        (qty("input"), qty("cached_input"), qty("output")),
        (uncached, cached, output),
        "{bill}"
    );
    assert_eq!(lines.iter().map(|l| usd(&l["cost_usd"])).sum::<i64>(), line);
    let cached_line = lines.iter().find(|l| l["key"] == "cached_input").unwrap();
    // 5,400 cached tokens at $0.20 per million: $0.00108, to the micro-dollar.
    assert_eq!(usd(&cached_line["cost_usd"]), cached * CACHED / 1_000_000);
    f.srv.shutdown().await;
}

/// Anthropic's cache reads, 5-minute and 1-hour writes, each at its own
/// price; web searches at the fee per call; DeepSeek's hit/miss fields; and
/// a host that splits the input only in `message_delta` is not counted
/// twice.
#[tokio::test]
async fn cache_writes_searches_and_providers_own_field_names() {
    let f = fixture().await;
    let directives =
        "[mock:cached=600] [mock:cache_write_5m=200] [mock:cache_write_1h=100] [mock:web_search=3]";
    for stream in [false, true] {
        let (rid, p, c) = served(&f, "messages", stream, &prompt(1_000, directives)).await;
        let pico = (p - 900) * INPUT
            + 600 * CACHED
            + 200 * WRITE_5M
            + 100 * WRITE_1H
            + c * OUTPUT
            + 3 * SEARCH_FEE * 1_000_000;
        assert_cost(&f, &rid, pico, &format!("anthropic stream={stream}")).await;
        let b = f.env.usage_event(&rid).await.unwrap().breakdown.unwrap();
        assert_eq!(
            (b.cache_write_5m, b.cache_write_1h, b.web_search_calls),
            (200, 100, 3)
        );
    }
    // The split only at the end of the stream.
    let (rid, p, c) = served(
        &f,
        "messages",
        true,
        &prompt(1_000, "[mock:cached=500] [mock:split_late]"),
    )
    .await;
    let e = f.env.usage_event(&rid).await.unwrap();
    assert_eq!(e.input_tokens, p, "the input counted once");
    assert_cost(
        &f,
        &rid,
        (p - 500) * INPUT + 500 * CACHED + c * OUTPUT,
        "split late",
    )
    .await;
    // DeepSeek: prompt_cache_hit_tokens / prompt_cache_miss_tokens.
    for stream in [false, true] {
        let (rid, p, c) = served(
            &f,
            "chat",
            stream,
            &prompt(1_000, "[mock:cached=700] [mock:deepseek]"),
        )
        .await;
        assert_cost(
            &f,
            &rid,
            (p - 700) * INPUT + 700 * CACHED + c * OUTPUT,
            &format!("deepseek stream={stream}"),
        )
        .await;
    }
    f.srv.shutdown().await;
}

/// An audio stream the budget cuts has no report from the provider: it is
/// billed at what the meter counted, and the audio it counted (one token per
/// 640 base64 characters, rounded up per piece: docs/providers.md) at the
/// audio output price, not the text price. The audio tokens are counted
/// here from the pieces the client received.
#[tokio::test]
async fn a_cut_audio_stream_bills_its_audio_at_the_audio_price() {
    let f = fixture().await;
    let body = json!({"model": "m", "stream": true, "max_tokens": 4000,
        "modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "pcm16"},
        "messages": [{"role": "user",
            "content": "hello [mock:output_tokens=4000] [mock:audio] [mock:chunk_delay_ms=1]"}]});
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", f.base))
        .bearer_auth(&f.cut_key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let text = r.text().await.unwrap();
    let mut audio = 0i64;
    for line in text.lines() {
        let Some(v) = line
            .strip_prefix("data: ")
            .and_then(|d| serde_json::from_str::<Value>(d).ok())
        else {
            continue;
        };
        if let Some(d) = v["choices"][0]["delta"]["audio"]["data"].as_str() {
            audio += (d.len() as i64 + 639) / 640;
        }
    }
    assert!(audio > 0, "audio pieces reached the client: {text:.300}");
    let booked = eventually(Duration::from_secs(10), || async {
        f.env.usage_event(&rid).await.is_some()
    })
    .await;
    assert!(booked);
    let e = f.env.usage_event(&rid).await.unwrap();
    assert_eq!(
        (e.status.as_str(), e.usage_source.as_str()),
        ("cut_off", "counted"),
        "{e:?}"
    );
    let ch = e.charges.unwrap();
    use domain::pricing::Component;
    assert_eq!(ch.quantity_of(Component::AudioOutput), audio, "{e:?}");
    assert_eq!(ch.pico_of(Component::AudioOutput), audio * AUDIO_OUTPUT);
    let text_out = e.output_tokens - audio;
    assert_eq!(ch.quantity_of(Component::Output), text_out);
    let pico = e.input_tokens * INPUT + text_out * OUTPUT + audio * AUDIO_OUTPUT;
    assert_cost(&f, &rid, pico, "the cut audio stream").await;
    f.srv.shutdown().await;
}

/// OpenAI's cache writes by TTL, with the openai SDK's field names:
/// Responses reports `cache_write_tokens` split in
/// `cache_write_tokens_details.{ttl_30m_tokens, ttl_12h_tokens}`, each TTL
/// billed at its price; chat reports `cache_write_tokens` unsplit, billed as
/// its only TTL, 30 minutes. Streamed and not; the bill by component shows
/// each TTL's tokens.
#[tokio::test]
async fn openai_cache_writes_are_billed_by_ttl() {
    let f = fixture().await;
    let directives = "[mock:cached=300] [mock:cache_write_30m=200] [mock:cache_write_12h=100]";
    let (mut w30, mut w12) = (0i64, 0i64);
    for stream in [false, true] {
        let (rid, p, c) = served(&f, "responses", stream, &prompt(1_000, directives)).await;
        assert!(p > 600, "{p}");
        let pico =
            (p - 600) * INPUT + 300 * CACHED + 200 * WRITE_30M + 100 * WRITE_12H + c * OUTPUT;
        assert_cost(&f, &rid, pico, &format!("responses stream={stream}")).await;
        let e = f.env.usage_event(&rid).await.unwrap();
        let b = e.breakdown.unwrap();
        assert_eq!(
            (b.cache_write_30m, b.cache_write_12h, b.cache_write_5m),
            (200, 100, 0)
        );
        let ch = e.charges.unwrap();
        use domain::pricing::Component;
        assert_eq!(
            (
                ch.pico_of(Component::CacheWrite30m),
                ch.pico_of(Component::CacheWrite12h)
            ),
            (200 * WRITE_30M, 100 * WRITE_12H)
        );
        (w30, w12) = (w30 + 200, w12 + 100);
    }
    for stream in [false, true] {
        let (rid, p, c) = served(&f, "chat", stream, &prompt(1_000, directives)).await;
        let pico = (p - 600) * INPUT + 300 * CACHED + 300 * WRITE_30M + c * OUTPUT;
        assert_cost(&f, &rid, pico, &format!("chat stream={stream}")).await;
        let b = f.env.usage_event(&rid).await.unwrap().breakdown.unwrap();
        assert_eq!((b.cache_write_30m, b.cache_write_12h), (300, 0));
        w30 += 300;
    }
    let bill = bill_by_component(&f).await;
    let qty = |k: &str| {
        bill["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["key"] == k)
            .map_or(0, |l| l["quantity"].as_i64().unwrap())
    };
    assert_eq!(
        (
            qty("cache_write_30m"),
            qty("cache_write_12h"),
            qty("cache_write_5m")
        ),
        (w30, w12, 0),
        "{bill}"
    );
    f.srv.shutdown().await;
}

/// A prompt above the tier's threshold has every token at the tier's
/// prices; one just below, none.
#[tokio::test]
async fn a_prompt_above_a_tier_is_billed_whole_at_the_tiers_prices() {
    let f = fixture().await;
    let (rid, p, c) = served(&f, "chat", false, &prompt(6_000, "")).await;
    assert!(p > TIER_ABOVE, "{p}");
    assert_cost(&f, &rid, p * TIER_INPUT + c * TIER_OUTPUT, "above").await;
    let (rid, p, c) = served(&f, "chat", false, &prompt(4_900, "")).await;
    assert!(p <= TIER_ABOVE, "{p}");
    assert_cost(&f, &rid, p * INPUT + c * OUTPUT, "below").await;
    // Cached tokens count toward the threshold.
    let (rid, p, c) = served(&f, "responses", false, &prompt(6_000, "[mock:cached=5000]")).await;
    assert_cost(
        &f,
        &rid,
        (p - 5_000) * TIER_INPUT + 5_000 * TIER_INPUT + c * TIER_OUTPUT,
        "above, cached (the tier has no cached price: its input price)",
    )
    .await;
    f.srv.shutdown().await;
}

/// A price change effective at T: requests before T priced by the old
/// sheet, after by the new; the change is audited; a sheet in the past, a
/// typo and a negative price are refused naming the field.
#[tokio::test]
async fn a_price_change_takes_effect_at_its_instant_and_is_audited() {
    let f = fixture().await;
    let prices = format!("{}/api/v1/models/m/prices", f.base);
    let at = chrono::Utc::now() + chrono::Duration::seconds(3);
    let newer = json!({"input": INPUT * 3, "output": OUTPUT * 3});
    let (status, listed) = api(
        "POST",
        &prices,
        Some(&f.admin),
        Some(json!({"sheet": newer, "effective_from": at})),
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["sheets"].as_array().unwrap().len(), 2);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (before, p, c) = served(&f, "chat", false, &prompt(100, "")).await;
    assert_cost(&f, &before, p * INPUT + c * OUTPUT, "before T").await;
    let wait = (at - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(wait + Duration::from_millis(100)).await;
    let (after, p, c) = served(&f, "chat", false, &prompt(100, "")).await;
    assert_cost(&f, &after, p * INPUT * 3 + c * OUTPUT * 3, "after T").await;

    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'model.price_sheet' AND target = 'model:m'",
    )
    .fetch_one(f.env.store.pool())
    .await
    .unwrap();
    assert_eq!(audited, 2);
    for (body, param) in [
        (
            json!({"sheet": {"input": 1, "output": 1}, "effective_from": "2020-01-01T00:00:00Z"}),
            "effective_from",
        ),
        (
            json!({"sheet": {"input": 1, "output": 1, "cahced_input": 1}}),
            "sheet.cahced_input",
        ),
        (json!({"sheet": {"input": -1, "output": 1}}), "sheet.input"),
    ] {
        let (status, e) = api("POST", &prices, Some(&f.admin), Some(body)).await;
        assert_eq!(status, 400, "{e}");
        assert_eq!(e["error"]["param"], param, "{e}");
    }
    // Every role reads the prices; only platform admins set them.
    user(&f.env, "fin@example.com", "finance", None).await;
    let fin = login(&f.base, "fin@example.com").await;
    assert_eq!(api("GET", &prices, Some(&fin), None).await.0, 200);
    let (status, _) = api(
        "POST",
        &prices,
        Some(&fin),
        Some(json!({"sheet": {"input": 1, "output": 1}})),
    )
    .await;
    assert_eq!(status, 403);
    f.srv.shutdown().await;
}

/// The models the import test creates, named (upstream) as LiteLLM's
/// catalog names them, and one it does not price.
const IMPORTED: [&str; 2] = ["gpt-4o-mini", "claude-sonnet-4-5"];
const NOT_IN_CATALOG: &str = "house-model-x";

/// A LiteLLM entry's sheet, computed here from the JSON (not by the
/// gateway's code): USD/token × 10¹² rounded (every price these models have
/// is a whole µUSD per million tokens), the service tiers as the base with
/// their own prices over it, the medium web search in µUSD.
fn expected_sheet(entry: &Value) -> Value {
    let e = entry.as_object().unwrap();
    let mtok = |f: &str| {
        e.get(f)
            .and_then(Value::as_f64)
            .map(|v| (v * 1e12).round() as i64)
    };
    let fields = [
        ("input", "input_cost_per_token"),
        ("output", "output_cost_per_token"),
        ("cached_input", "cache_read_input_token_cost"),
        ("cache_write_5m", "cache_creation_input_token_cost"),
        (
            "cache_write_1h",
            "cache_creation_input_token_cost_above_1hr",
        ),
        (
            "cache_write_12h",
            "cache_creation_input_token_cost_above_12hr",
        ),
        ("audio_input", "input_cost_per_audio_token"),
        ("audio_output", "output_cost_per_audio_token"),
    ];
    let prices = |suffix: &str| {
        let mut p = serde_json::Map::new();
        for (ours, theirs) in fields {
            if let Some(v) = mtok(&format!("{theirs}{suffix}")).or_else(|| mtok(theirs)) {
                p.insert(ours.into(), json!(v));
            }
        }
        Value::Object(p)
    };
    let mut sheet = prices("");
    let mut tiers = serde_json::Map::new();
    for (suffix, name) in [
        ("_priority", "priority"),
        ("_flex", "flex"),
        ("_batches", "batch"),
    ] {
        if e.keys().any(|k| k.ends_with(suffix)) {
            tiers.insert(name.into(), prices(suffix));
        }
    }
    if !tiers.is_empty() {
        sheet["service_tiers"] = Value::Object(tiers);
    }
    let search = &e["search_context_cost_per_query"]["search_context_size_medium"];
    if let Some(usd) = search.as_f64() {
        sheet["tool_fees"] = json!({"web_search": (usd * 1e6).round() as i64});
    }
    sheet
}

async fn sheets(base: &str, admin: &str, model: &str) -> Value {
    let (status, body) = api(
        "GET",
        &format!("{base}/api/v1/models/{model}/prices"),
        Some(admin),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["sheets"].clone()
}

/// LiteLLM's real catalog (the file the `litellm` wheel ships, 4,800+
/// entries): the dry run lists the diff, the unknown and the unmatched and
/// changes nothing (the CLI too); the applied import stores exactly the
/// file's prices, audited; a second import finds nothing to change.
#[tokio::test]
async fn litellms_catalog_imports_as_a_diff_then_as_sheets() {
    let Ok(path) = std::env::var("TOLLGATE_TEST_LITELLM_PRICES") else {
        eprintln!(
            "\n\n*** SKIPPED litellms_catalog_imports_as_a_diff_then_as_sheets: \
             TOLLGATE_TEST_LITELLM_PRICES is unset (scripts/test.sh sets it) ***\n\n"
        );
        return;
    };
    let catalog: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(
        catalog.as_object().unwrap().len() > 4_000,
        "{path}: not the whole catalog"
    );
    let env = TestEnv::new().await;
    for m in IMPORTED {
        assert!(
            catalog[m]["input_cost_per_token"].is_f64(),
            "{path} has no {m}"
        );
        env.model(m, "chat", 1, 2).await;
    }
    env.model(NOT_IN_CATALOG, "chat", 1, 2).await;
    user(&env, "root@example.com", "platform_admin", None).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let admin = login(&base, "root@example.com").await;
    let import = format!("{base}/api/v1/prices/import");
    let before: Vec<Value> = {
        let mut v = Vec::new();
        for m in IMPORTED {
            v.push(sheets(&base, &admin, m).await);
        }
        v
    };

    // The dry run.
    let (status, plan) = api(
        "POST",
        &import,
        Some(&admin),
        Some(json!({"format": "litellm", "catalog": catalog, "apply": false})),
    )
    .await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["applied"], false);
    assert_eq!(plan["refused"], json!([]), "{plan}");
    assert_eq!(plan["unmatched_models"], json!([NOT_IN_CATALOG]));
    for m in IMPORTED {
        assert!(
            plan["matched"]
                .as_array()
                .unwrap()
                .contains(&json!({"model": m, "entry": m})),
            "{m}: {plan}"
        );
        let input = (catalog[m]["input_cost_per_token"].as_f64().unwrap() * 1e12).round() as i64;
        assert!(
            plan["changes"]
                .as_array()
                .unwrap()
                .contains(&json!({"model": m, "field": "input", "old": 1, "new": input})),
            "{m} input: {plan}"
        );
    }
    // gpt-4o-mini's priority prices are a service tier; its FedRAMP uplift
    // is a price tollgate does not map: listed, not dropped.
    assert!(plan["changes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["model"] == "gpt-4o-mini" && c["field"] == "service_tiers.priority.input"));
    if catalog["gpt-4o-mini"]
        .get("fedramp_uplift_multiplier")
        .is_some()
    {
        assert!(plan["unknown_fields"].as_array().unwrap().contains(&json!(
            {"model": "gpt-4o-mini", "entry": "gpt-4o-mini", "field": "fedramp_uplift_multiplier"}
        )), "{plan}");
    }
    for (m, was) in IMPORTED.iter().zip(&before) {
        assert_eq!(
            &sheets(&base, &admin, m).await,
            was,
            "{m}: changed by a dry run"
        );
    }

    // The CLI, same file, without --apply: the same diff, nothing changed.
    let out = std::process::Command::new(tollgate_bin())
        .args(["prices", "import", &path])
        .env("TOLLGATE__DATABASE__URL", &env.db_url)
        .env("TOLLGATE__REDIS__URL", &env.redis_url)
        .env("TOLLGATE__REDIS__KEY_PREFIX", &env.prefix)
        .env("TOLLGATE__KEYS__PEPPER", PEPPER)
        .env("TOLLGATE__KEYS__ENCRYPTION_KEY", ENC_KEY)
        .env("TOLLGATE_LOG", "warn")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for c in plan["changes"].as_array().unwrap() {
        let show = |v: &Value| v.as_i64().map_or("-".to_string(), |v| v.to_string());
        let line = format!(
            "change {} {}: {} -> {}",
            c["model"].as_str().unwrap(),
            c["field"].as_str().unwrap(),
            show(&c["old"]),
            show(&c["new"])
        );
        assert!(
            printed.lines().any(|l| l == line),
            "{line} not printed:\n{printed}"
        );
    }
    assert!(
        printed.contains(&format!("unmatched {NOT_IN_CATALOG}")),
        "{printed}"
    );
    assert!(printed.contains("not applied: 2 model(s)"), "{printed}");
    for (m, was) in IMPORTED.iter().zip(&before) {
        assert_eq!(
            &sheets(&base, &admin, m).await,
            was,
            "{m}: changed by the CLI without --apply"
        );
    }

    // Applied: each matched model's sheet is the file's prices.
    let (status, applied) = api(
        "POST",
        &import,
        Some(&admin),
        Some(json!({"format": "litellm", "catalog": catalog, "apply": true})),
    )
    .await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["applied"], true);
    assert_eq!(applied["changes"], plan["changes"]);
    for m in IMPORTED {
        let listed = sheets(&base, &admin, m).await;
        let listed = listed.as_array().unwrap();
        assert_eq!(listed.len(), 1, "{m}: {listed:?}");
        let stored = domain::pricing::PriceSheet::from_json(&listed[0]["sheet"]).unwrap();
        let want = domain::pricing::PriceSheet::from_json(&expected_sheet(&catalog[m])).unwrap();
        assert_eq!(
            stored, want,
            "{m}: the stored sheet is not the file's prices"
        );
        let (actor, after): (String, Value) = sqlx::query_as(
            "SELECT actor, after FROM audit_log WHERE action = 'model.price_sheet' AND target = $1",
        )
        .bind(format!("model:{m}"))
        .fetch_one(env.store.pool())
        .await
        .unwrap();
        assert!(actor.contains("root@example.com"), "{actor}");
        assert_eq!(after["sheet"], listed[0]["sheet"]);
    }
    assert!(sheets(&base, &admin, NOT_IN_CATALOG)
        .await
        .as_array()
        .unwrap()
        .is_empty());

    // Equal prices: nothing to change, no new sheet.
    let (status, again) = api(
        "POST",
        &import,
        Some(&admin),
        Some(json!({"format": "litellm", "catalog": catalog, "apply": true})),
    )
    .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["changes"], json!([]), "{again}");
    for m in IMPORTED {
        assert_eq!(sheets(&base, &admin, m).await.as_array().unwrap().len(), 1);
    }
    let (status, refused) = api(
        "POST",
        &import,
        Some(&admin),
        Some(json!({"format": "openrouter", "catalog": {}})),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    drop(srv);
}

/// A request is priced by the service tier the provider says it served
/// (the answer's `service_tier`, which can differ from the one asked):
/// served at priority, the priority prices; at default, the base prices.
#[tokio::test]
async fn the_served_service_tier_prices_the_request() {
    let f = fixture().await;
    let prices = format!("{}/api/v1/models/m/prices", f.base);
    let mut s = sheet();
    s["service_tiers"] = json!({"priority": {"input": INPUT * 2, "output": OUTPUT * 2}});
    let (status, body) = api("POST", &prices, Some(&f.admin), Some(json!({"sheet": s}))).await;
    assert_eq!(status, 200, "{body}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (rid, p, c) = served(
        &f,
        "chat",
        false,
        &prompt(100, "[mock:served_tier=priority]"),
    )
    .await;
    assert_cost(
        &f,
        &rid,
        p * INPUT * 2 + c * OUTPUT * 2,
        "served at priority",
    )
    .await;
    let e = f.env.usage_event(&rid).await.unwrap();
    assert_eq!(
        e.breakdown.unwrap().served_tier.as_deref(),
        Some("priority")
    );
    // Streamed: the tier comes on the chunks, the usage on the last one.
    let (rid, p, c) = served(
        &f,
        "chat",
        true,
        &prompt(100, "[mock:served_tier=priority]"),
    )
    .await;
    assert_cost(
        &f,
        &rid,
        p * INPUT * 2 + c * OUTPUT * 2,
        "streamed, served at priority",
    )
    .await;
    let (rid, p, c) = served(
        &f,
        "chat",
        false,
        &prompt(100, "[mock:served_tier=default]"),
    )
    .await;
    assert_cost(&f, &rid, p * INPUT + c * OUTPUT, "served at default").await;
    assert!(f.env.usage_event(&rid).await.unwrap().breakdown.is_none());
    f.srv.shutdown().await;
}

/// The console's price-sheet page: every role reads the history with the
/// sheet in force marked; a platform admin adds a sheet from an instant on
/// (audited, like the API), a refused one keeps what was typed and names
/// the field; other roles get no form and cannot post one.
#[tokio::test]
async fn the_console_lists_the_sheets_and_adds_one() {
    let f = fixture().await;
    let admin = e2e::console_web::Web::login(&f.base, "root@example.com").await;
    let page = admin.get("/console/models/m/price-sheets").await;
    assert_eq!(page.status, 200, "{}", page.body);
    // The fixture's sheet, in force: cached input at $0.20 per million.
    assert!(page.body.contains("in force"), "{}", page.body);
    assert!(page.body.contains("$0.20"), "{}", page.body);
    assert!(page.body.contains("id=\"sheet-form\""));
    let models = admin.get("/console/models").await;
    assert!(models.body.contains("/console/models/m/price-sheets"));

    let at = (chrono::Utc::now() + chrono::Duration::days(2))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let sheet = json!({"input": INPUT * 2, "output": OUTPUT * 2, "cached_input": 123_456});
    let saved = admin
        .post(
            "/console/models/m/price-sheets",
            &[
                ("sheet", &sheet.to_string()),
                ("effective_from", &at),
                ("deployment", ""),
            ],
        )
        .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let page = admin.get("/console/models/m/price-sheets?saved=true").await;
    assert!(page.body.contains("scheduled"), "{}", page.body);
    assert!(page.body.contains("$0.123456"), "{}", page.body);
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'model.price_sheet' AND target = 'model:m'",
    )
    .fetch_one(f.env.store.pool())
    .await
    .unwrap();
    assert_eq!(audited, 2, "the fixture's sheet and this one");

    // A typo is refused naming the field, the text kept.
    let refused = admin
        .post(
            "/console/models/m/price-sheets",
            &[
                ("sheet", r#"{"input": 1, "output": 1, "cahced_input": 1}"#),
                ("effective_from", ""),
            ],
        )
        .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(
        refused.body.contains("sheet.cahced_input"),
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains("cahced_input&quot;: 1")
            || refused.body.contains("cahced_input&#34;: 1"),
        "what was typed is kept: {}",
        refused.body
    );

    // Finance reads the history, gets no form, and cannot add a sheet.
    user(&f.env, "fin2@example.com", "finance", None).await;
    let fin = e2e::console_web::Web::login(&f.base, "fin2@example.com").await;
    let page = fin.get("/console/models/m/price-sheets").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("id=\"sheet-form\""));
    let denied = fin
        .post(
            "/console/models/m/price-sheets",
            &[
                ("sheet", r#"{"input": 1, "output": 1}"#),
                ("effective_from", ""),
            ],
        )
        .await;
    assert_eq!(denied.status, 403, "{}", denied.body);
    f.srv.shutdown().await;
}

/// The provider's usage object in what the client received (the answer is
/// passed through as the provider sent it): a whole answer's `usage`, a
/// chat stream's usage chunk, Responses' `response.completed` usage,
/// Messages' `message_start` usage with `message_delta`'s fields over it.
fn usage_sent(dialect: &str, stream: bool, body: &str) -> Value {
    if !stream {
        let v: Value = serde_json::from_str(body).unwrap();
        return v["usage"].clone();
    }
    let events: Vec<Value> = body
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    match dialect {
        "chat" => events
            .iter()
            .rev()
            .find(|e| e["usage"].is_object())
            .map(|e| e["usage"].clone())
            .unwrap(),
        "responses" => events
            .iter()
            .find(|e| e["type"] == "response.completed")
            .map(|e| e["response"]["usage"].clone())
            .unwrap(),
        _ => {
            let mut u = events
                .iter()
                .find(|e| e["type"] == "message_start")
                .map(|e| e["message"]["usage"].clone())
                .unwrap();
            let delta = events
                .iter()
                .find(|e| e["type"] == "message_delta")
                .map(|e| e["usage"].clone())
                .unwrap();
            for (k, v) in delta.as_object().unwrap() {
                u[k] = v.clone();
            }
            u
        }
    }
}

/// Every ledger row keeps the provider's usage object as it sent it
/// (migration 0029), not only an anomaly's: ordinary requests in each
/// dialect, streaming and not, read back from Postgres equal to what the
/// provider sent; the served tier the gateway reads from beside the usage
/// is not merged into it; the request lookup shows it.
#[tokio::test]
async fn every_ledger_row_keeps_the_providers_usage_object() {
    let f = fixture().await;
    let client = reqwest::Client::new();
    let web = e2e::console_web::Web::login(&f.base, "root@example.com").await;
    for dialect in ["chat", "responses", "messages"] {
        for stream in [false, true] {
            let what = format!("{dialect} stream={stream}");
            let content = prompt(200, "[mock:cached=150] [mock:served_tier=priority]");
            let (path, body) = match dialect {
                "chat" => (
                    "/v1/chat/completions",
                    json!({"model": "m", "max_tokens": 20, "stream": stream,
                        "stream_options": {"include_usage": true},
                        "messages": [{"role": "user", "content": content}]}),
                ),
                "responses" => (
                    "/v1/responses",
                    json!({"model": "m", "max_output_tokens": 20, "stream": stream,
                        "input": content}),
                ),
                _ => (
                    "/v1/messages",
                    json!({"model": "m", "max_tokens": 20, "stream": stream,
                        "messages": [{"role": "user", "content": content}]}),
                ),
            };
            let mut body = body;
            if !stream && dialect == "chat" {
                body.as_object_mut().unwrap().remove("stream_options");
            }
            let r = client
                .post(format!("{}{path}", f.base))
                .bearer_auth(&f.key)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{what}");
            let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
            let text = r.text().await.unwrap();
            let sent = usage_sent(dialect, stream, &text);
            assert!(
                sent["cache_read_input_tokens"].is_number()
                    || sent["prompt_tokens_details"]["cached_tokens"].is_number()
                    || sent["input_tokens_details"]["cached_tokens"].is_number(),
                "{what}: the mock reports its cached share ({sent})"
            );
            let booked = eventually(Duration::from_secs(10), || async {
                f.env.usage_event(&rid).await.is_some()
            })
            .await;
            assert!(booked, "{what}: booked");
            // The row itself, read from Postgres.
            let (stored, anomaly): (Option<Value>, Option<String>) = sqlx::query_as(
                "SELECT raw_usage, usage_anomaly FROM usage_events WHERE request_id = $1",
            )
            .bind(&rid)
            .fetch_one(f.env.store.pool())
            .await
            .unwrap();
            assert_eq!(anomaly, None, "{what}: an ordinary request");
            assert_eq!(stored.as_ref(), Some(&sent), "{what}: the usage as sent");
            // The ledger's own reading of the row.
            let e = f.env.usage_event(&rid).await.unwrap();
            let read: Value = serde_json::from_str(e.raw_usage.unwrap().as_str()).unwrap();
            assert_eq!(read, sent, "{what}: read back");
            // And the request lookup shows it.
            let (status, found) = api(
                "GET",
                &format!("{}/api/v1/requests/{rid}", f.base),
                Some(&f.admin),
                None,
            )
            .await;
            assert_eq!(status, 200, "{found}");
            assert_eq!(found["usage"]["raw_usage"], sent, "{what}: the lookup");
            // The console's request page, the text escaped by the template.
            let page = web.get(&format!("/console/requests?id={rid}")).await.body;
            let shown = page
                .split("data-fact=\"req.raw_usage\">")
                .nth(1)
                .and_then(|rest| rest.split("</pre>").next())
                .unwrap_or_else(|| panic!("{what}: no raw usage on the page: {page}"));
            assert!(!shown.contains('"'), "{what}: escaped: {shown}");
            let unescaped = shown.replace("&#34;", "\"").replace("&quot;", "\"");
            let on_page: Value = serde_json::from_str(&unescaped).unwrap();
            assert_eq!(on_page, sent, "{what}: the console");
        }
    }
    // Translated (a Messages client, a chat-only provider): the upstream
    // chat answer's usage object, which the client never sees.
    f.env.model("c", "chat", 1, 1).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    for stream in [false, true] {
        let r = client
            .post(format!("{}/v1/messages", f.base))
            .bearer_auth(&f.key)
            .json(&json!({"model": "c", "max_tokens": 20, "stream": stream,
                "messages": [{"role": "user", "content": "hello there"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "translated stream={stream}");
        let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
        let _ = r.bytes().await.unwrap();
        let booked = eventually(Duration::from_secs(10), || async {
            f.env.usage_event(&rid).await.is_some()
        })
        .await;
        assert!(booked, "translated stream={stream}: booked");
        let e = f.env.usage_event(&rid).await.unwrap();
        let raw: Value = serde_json::from_str(e.raw_usage.unwrap().as_str()).unwrap();
        assert_eq!(
            raw["prompt_tokens"], e.input_tokens,
            "translated stream={stream}: {raw}"
        );
        assert_eq!(
            raw["completion_tokens"], e.output_tokens,
            "translated stream={stream}: {raw}"
        );
    }
    f.srv.shutdown().await;
}
