//! The admin usage and cost APIs against a real bound port: what they
//! report is checked against the usage the answers themselves reported.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::{spawn, MockConfig};

const ADMIN: &str = "sk-admin-mock";
const DAY: i64 = 86_400;

/// Today's UTC midnight, Unix seconds.
fn today() -> i64 {
    let now = Utc::now().timestamp();
    now - now.rem_euclid(DAY)
}

async fn mock() -> String {
    let (base, _) = spawn(MockConfig::default()).await;
    base.trim_end_matches("/v1").to_string()
}

async fn post(url: String, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("send")
}

async fn admin(root: &str, settings: Value) {
    let r = post(format!("{root}/mock/admin"), settings).await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
}

/// A chat completion (stream or not) with key `key`; its usage object.
async fn chat(root: &str, key: &str, model: &str, text: &str, stream: bool) -> Value {
    let body = json!({"model": model, "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": text}]});
    let r = reqwest::Client::new()
        .post(format!("{root}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    if !stream {
        return r.json::<Value>().await.unwrap()["usage"].clone();
    }
    let body = r.text().await.unwrap();
    let last = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .last()
        .unwrap();
    last["usage"].clone()
}

/// A Messages answer (stream or not) with `x-api-key: key`; its usage
/// (a stream's `message_start` usage with `message_delta`'s output).
async fn messages(root: &str, key: &str, model: &str, text: &str, stream: bool) -> Value {
    let body = json!({"model": model, "max_tokens": 1000, "stream": stream,
        "messages": [{"role": "user", "content": text}]});
    let r = reqwest::Client::new()
        .post(format!("{root}/v1/messages"))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    if !stream {
        return r.json::<Value>().await.unwrap()["usage"].clone();
    }
    let body = r.text().await.unwrap();
    let mut usage = Value::Null;
    for ev in body.split("\n\n") {
        let Some(data) = ev.lines().find_map(|l| l.strip_prefix("data: ")) else {
            continue;
        };
        let v: Value = serde_json::from_str(data).unwrap();
        match v["type"].as_str() {
            Some("message_start") => usage = v["message"]["usage"].clone(),
            Some("message_delta") => usage["output_tokens"] = v["usage"]["output_tokens"].clone(),
            _ => {}
        }
    }
    usage
}

/// What the tests expect a report to carry.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Use {
    requests: u64,
    uncached: u64,
    cached: u64,
    w5m: u64,
    w1h: u64,
    w30m: u64,
    w12h: u64,
    output: u64,
    web_search: u64,
}

impl std::ops::AddAssign for Use {
    fn add_assign(&mut self, o: Use) {
        self.requests += o.requests;
        self.uncached += o.uncached;
        self.cached += o.cached;
        self.w5m += o.w5m;
        self.w1h += o.w1h;
        self.w30m += o.w30m;
        self.w12h += o.w12h;
        self.output += o.output;
        self.web_search += o.web_search;
    }
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// An OpenAI chat usage; its writes were asked at `ttl` ("30m" or "12h").
fn from_chat(u: &Value, ttl: &str) -> Use {
    let cached = n(&u["prompt_tokens_details"]["cached_tokens"]);
    let writes = n(&u["prompt_tokens_details"]["cache_write_tokens"]);
    let mut x = Use {
        requests: 1,
        uncached: n(&u["prompt_tokens"]) - cached - writes,
        cached,
        output: n(&u["completion_tokens"]),
        ..Use::default()
    };
    match ttl {
        "30m" => x.w30m = writes,
        _ => x.w12h = writes,
    }
    x
}

fn from_anthropic(u: &Value) -> Use {
    Use {
        requests: 1,
        uncached: n(&u["input_tokens"]),
        cached: n(&u["cache_read_input_tokens"]),
        w5m: n(&u["cache_creation"]["ephemeral_5m_input_tokens"]),
        w1h: n(&u["cache_creation"]["ephemeral_1h_input_tokens"]),
        output: n(&u["output_tokens"]),
        web_search: n(&u["server_tool_use"]["web_search_requests"]),
        ..Use::default()
    }
}

async fn get(root: &str, path_query: &str, anthropic: bool, key: &str) -> reqwest::Response {
    let mut r = reqwest::Client::new().get(format!("{root}{path_query}"));
    r = if anthropic {
        r.header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
    } else {
        r.bearer_auth(key)
    };
    r.send().await.unwrap()
}

async fn openai(root: &str, path_query: &str) -> Value {
    let r = get(root, path_query, false, ADMIN).await;
    assert_eq!(r.status(), 200, "{path_query}");
    r.json().await.unwrap()
}

async fn anthropic(root: &str, path_query: &str) -> Value {
    let r = get(root, path_query, true, ADMIN).await;
    assert_eq!(r.status(), 200, "{path_query}");
    r.json().await.unwrap()
}

fn rfc(s: i64) -> String {
    chrono::DateTime::from_timestamp(s, 0)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Every result of a report's page, over all its buckets.
fn results(page: &Value) -> Vec<Value> {
    assert_eq!(page["has_more"], false);
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| b["results"].as_array().unwrap().clone())
        .collect()
}

/// A cents string as pico-USD, exactly.
fn cents_pico(s: &str) -> u128 {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    assert!(frac.len() <= 10, "{s}");
    let frac = format!("{frac:0<10}");
    int.parse::<u128>().unwrap() * 10_000_000_000 + frac.parse::<u128>().unwrap()
}

fn default_id(key: &str) -> (String, String) {
    let h: String = Sha256::digest(key.as_bytes())[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    (format!("key_{h}"), format!("wrkspc_{h}"))
}

fn prices() -> Value {
    json!({
        "m-a": {"input": 2_500_000, "cached_input": 1_250_000, "cache_write_5m": 3_125_000,
            "cache_write_1h": 5_000_000, "cache_write_30m": 3_000_000, "cache_write_12h": 4_000_000,
            "output": 10_000_000, "web_search": 10_000},
        "m-b": {"input": 3_000_001, "cached_input": 300_007, "cache_write_5m": 3_750_000,
            "cache_write_1h": 6_000_000, "cache_write_30m": 1, "cache_write_12h": 7,
            "output": 15_000_003, "web_search": 25_000},
    })
}

fn price(model: &str, what: &str) -> u128 {
    u128::from(prices()[model][what].as_u64().unwrap())
}

#[tokio::test]
async fn usage_and_cost_reports_add_up_to_what_the_answers_reported() {
    let root = mock().await;
    admin(
        &root,
        json!({"prices": prices(),
            "keys": {"sk-one": {"id": "key_one", "workspace": "wrkspc_one"}}}),
    )
    .await;
    let long = "x".repeat(400);
    let mut want: BTreeMap<(&str, &str), Use> = BTreeMap::new();
    let t = format!("{long} [mock:cached=10][mock:cache_write_30m=5][mock:output_tokens=7]");
    *want.entry(("sk-one", "m-a")).or_default() +=
        from_chat(&chat(&root, "sk-one", "m-a", &t, false).await, "30m");
    let t = format!("{long} [mock:cache_write_12h=4][mock:output_tokens=3]");
    *want.entry(("sk-two", "m-b")).or_default() +=
        from_chat(&chat(&root, "sk-two", "m-b", &t, true).await, "12h");
    let t = format!("{long} [mock:output_tokens=2]");
    *want.entry(("sk-one", "m-a")).or_default() +=
        from_chat(&chat(&root, "sk-one", "m-a", &t, true).await, "30m");
    let t = format!(
        "{long} [mock:cached=6][mock:cache_write_5m=3][mock:cache_write_1h=2]\
         [mock:web_search=2][mock:output_tokens=4]"
    );
    *want.entry(("sk-one", "m-b")).or_default() +=
        from_anthropic(&messages(&root, "sk-one", "m-b", &t, false).await);
    let t = format!("{long} [mock:cache_write_5m=2][mock:web_search=1][mock:output_tokens=5]");
    *want.entry(("sk-two", "m-a")).or_default() +=
        from_anthropic(&messages(&root, "sk-two", "m-a", &t, true).await);
    let t = format!("{long} [mock:output_tokens=9]");
    *want.entry(("sk-two", "m-a")).or_default() +=
        from_anthropic(&messages(&root, "sk-two", "m-a", &t, false).await);
    // Every counter is exercised.
    let mut all = Use::default();
    want.values().for_each(|u| all += *u);
    assert_eq!(all.requests, 6);
    for (name, v) in [
        ("cached", all.cached),
        ("w5m", all.w5m),
        ("w1h", all.w1h),
        ("w30m", all.w30m),
        ("w12h", all.w12h),
        ("web_search", all.web_search),
    ] {
        assert!(v > 0, "{name} is 0: {all:?}");
    }
    let ids = |k: &str| match k {
        "sk-one" => ("key_one".to_string(), "wrkspc_one".to_string()),
        k => default_id(k),
    };
    // Three days around today, so a midnight during the test changes nothing.
    let (start, end) = (today() - DAY, today() + 2 * DAY);

    // OpenAI usage, by key and model (both spellings of group_by).
    let page = openai(
        &root,
        &format!(
            "/v1/organization/usage/completions?start_time={start}&end_time={end}\
             &bucket_width=1d&group_by=api_key_id&group_by[]=model"
        ),
    )
    .await;
    assert_eq!(page["object"], "page");
    assert_eq!(page["data"].as_array().unwrap().len(), 3);
    let mut got: BTreeMap<(String, String), [u64; 6]> = BTreeMap::new();
    for r in results(&page) {
        assert_eq!(r["object"], "organization.usage.completions.result");
        assert_eq!(r["project_id"], Value::Null);
        let e = got
            .entry((
                r["api_key_id"].as_str().unwrap().into(),
                r["model"].as_str().unwrap().into(),
            ))
            .or_default();
        for (i, f) in [
            "input_tokens",
            "input_cached_tokens",
            "input_cache_write_tokens",
            "input_uncached_tokens",
            "output_tokens",
            "num_model_requests",
        ]
        .iter()
        .enumerate()
        {
            e[i] += n(&r[*f]);
        }
    }
    let expected: BTreeMap<(String, String), [u64; 6]> = want
        .iter()
        .map(|((k, m), u)| {
            let writes = u.w5m + u.w1h + u.w30m + u.w12h;
            (
                (ids(k).0, m.to_string()),
                [
                    u.uncached + u.cached + writes,
                    u.cached,
                    writes,
                    u.uncached,
                    u.output,
                    u.requests,
                ],
            )
        })
        .collect();
    assert_eq!(got, expected);

    // Anthropic usage, by key, workspace and model.
    let page = anthropic(
        &root,
        &format!(
            "/v1/organizations/usage_report/messages?starting_at={}&ending_at={}\
             &group_by[]=api_key_id&group_by[]=workspace_id&group_by[]=model",
            rfc(start),
            rfc(end)
        ),
    )
    .await;
    assert_eq!(page["data"][0]["starting_at"], rfc(start));
    assert_eq!(page["data"][0]["ending_at"], rfc(start + DAY));
    let mut got: BTreeMap<(String, String, String), [u64; 6]> = BTreeMap::new();
    for r in results(&page) {
        let e = got
            .entry((
                r["api_key_id"].as_str().unwrap().into(),
                r["workspace_id"].as_str().unwrap().into(),
                r["model"].as_str().unwrap().into(),
            ))
            .or_default();
        e[0] += n(&r["uncached_input_tokens"]);
        e[1] += n(&r["cache_read_input_tokens"]);
        e[2] += n(&r["cache_creation"]["ephemeral_5m_input_tokens"]);
        e[3] += n(&r["cache_creation"]["ephemeral_1h_input_tokens"]);
        e[4] += n(&r["output_tokens"]);
        e[5] += n(&r["server_tool_use"]["web_search_requests"]);
    }
    let expected: BTreeMap<(String, String, String), [u64; 6]> = want
        .iter()
        .map(|((k, m), u)| {
            let (id, ws) = ids(k);
            (
                (id, ws, m.to_string()),
                // OpenAI's 30m / 12h writes are plain input to Anthropic.
                [
                    u.uncached + u.w30m + u.w12h,
                    u.cached,
                    u.w5m,
                    u.w1h,
                    u.output,
                    u.web_search,
                ],
            )
        })
        .collect();
    assert_eq!(got, expected);

    // OpenAI costs, by line item and key.
    let mut want_lines: BTreeMap<(String, String), u128> = BTreeMap::new();
    let mut total: u128 = 0;
    for ((k, m), u) in &want {
        let p = |w| price(m, w);
        for (item, cost) in [
            ("input", u128::from(u.uncached) * p("input")),
            ("cached input", u128::from(u.cached) * p("cached_input")),
            (
                "cache write",
                u128::from(u.w5m) * p("cache_write_5m")
                    + u128::from(u.w1h) * p("cache_write_1h")
                    + u128::from(u.w30m) * p("cache_write_30m")
                    + u128::from(u.w12h) * p("cache_write_12h"),
            ),
            ("output", u128::from(u.output) * p("output")),
            (
                "web search",
                u128::from(u.web_search) * p("web_search") * 1_000_000,
            ),
        ] {
            if cost > 0 {
                *want_lines
                    .entry((ids(k).0, format!("{m}, {item}")))
                    .or_default() += cost;
                total += cost;
            }
        }
    }
    let page = openai(
        &root,
        &format!(
            "/v1/organization/costs?start_time={start}&end_time={end}\
             &group_by=line_item&group_by=api_key_id"
        ),
    )
    .await;
    let mut got: BTreeMap<(String, String), f64> = BTreeMap::new();
    for r in results(&page) {
        assert_eq!(r["object"], "organization.costs.result");
        assert_eq!(r["amount"]["currency"], "usd");
        let v = r["amount"]["value"].as_f64().unwrap();
        assert!(v > 0.0);
        *got.entry((
            r["api_key_id"].as_str().unwrap().into(),
            r["line_item"].as_str().unwrap().into(),
        ))
        .or_default() += v;
    }
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want_lines.keys().collect::<Vec<_>>()
    );
    for (k, pico) in &want_lines {
        let want = *pico as f64 / 1e12;
        assert!(
            (got[k] - want).abs() <= want * 1e-12,
            "{k:?}: {} {want}",
            got[k]
        );
    }
    // Ungrouped: one total a day.
    let page = openai(
        &root,
        &format!("/v1/organization/costs?start_time={start}&end_time={end}&bucket_width=1d"),
    )
    .await;
    let sum: f64 = results(&page)
        .iter()
        .map(|r| {
            assert_eq!(r["line_item"], Value::Null);
            r["amount"]["value"].as_f64().unwrap()
        })
        .sum();
    assert!((sum - total as f64 / 1e12).abs() < 1e-9);

    // Anthropic costs, by workspace and description: exact cents.
    let mut want_lines: BTreeMap<(String, String, Option<String>), u128> = BTreeMap::new();
    for ((k, m), u) in &want {
        let p = |w| price(m, w);
        for (tt, cost) in [
            (
                Some("uncached_input_tokens"),
                u128::from(u.uncached + u.w30m + u.w12h) * p("input"),
            ),
            (
                Some("cache_read_input_tokens"),
                u128::from(u.cached) * p("cached_input"),
            ),
            (
                Some("cache_creation.ephemeral_5m_input_tokens"),
                u128::from(u.w5m) * p("cache_write_5m"),
            ),
            (
                Some("cache_creation.ephemeral_1h_input_tokens"),
                u128::from(u.w1h) * p("cache_write_1h"),
            ),
            (Some("output_tokens"), u128::from(u.output) * p("output")),
            (None, u128::from(u.web_search) * p("web_search") * 1_000_000),
        ] {
            if cost > 0 {
                *want_lines
                    .entry((ids(k).1, m.to_string(), tt.map(String::from)))
                    .or_default() += cost;
            }
        }
    }
    let page = anthropic(
        &root,
        &format!(
            "/v1/organizations/cost_report?starting_at={}&ending_at={}\
             &group_by[]=workspace_id&group_by[]=description",
            rfc(start),
            rfc(end)
        ),
    )
    .await;
    let mut got: BTreeMap<(String, String, Option<String>), u128> = BTreeMap::new();
    for r in results(&page) {
        assert_eq!(r["currency"], "USD");
        let model = r["model"].as_str().unwrap().to_string();
        let tt = r["token_type"].as_str().map(String::from);
        let desc = r["description"].as_str().unwrap();
        assert!(desc.starts_with(&format!("{model} Usage - ")), "{desc}");
        assert_eq!(
            r["cost_type"],
            if tt.is_some() { "tokens" } else { "web_search" }
        );
        *got.entry((r["workspace_id"].as_str().unwrap().into(), model, tt))
            .or_default() += cents_pico(r["amount"].as_str().unwrap());
    }
    assert_eq!(got, want_lines);
}

#[tokio::test]
async fn pages_of_hour_buckets_are_complete_and_stable() {
    let root = mock().await;
    let usage = chat(&root, "sk-a", "m-a", "hi [mock:output_tokens=4]", false).await;
    admin(&root, json!({"page_size": 2})).await;
    let (start, end) = (today() - DAY, today() + DAY);
    let q = format!(
        "/v1/organization/usage/completions?start_time={start}&end_time={end}&bucket_width=1h"
    );
    let mut starts = vec![];
    let mut output = 0;
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => format!("{q}&page={c}"),
            None => q.clone(),
        };
        let page = openai(&root, &url).await;
        // The same page again is the same page.
        assert_eq!(openai(&root, &url).await, page);
        let data = page["data"].as_array().unwrap();
        assert!(data.len() <= 2);
        for b in data {
            assert_eq!(
                b["end_time"].as_i64().unwrap() - b["start_time"].as_i64().unwrap(),
                3600
            );
            starts.push(b["start_time"].as_i64().unwrap());
            for r in b["results"].as_array().unwrap() {
                assert_eq!(r["model"], Value::Null);
                assert_eq!(r["api_key_id"], Value::Null);
                output += n(&r["output_tokens"]);
            }
        }
        assert_eq!(page["has_more"], page["next_page"].is_string());
        match page["next_page"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let want: Vec<i64> = (0..48).map(|i| start + i * 3600).collect();
    assert_eq!(starts, want);
    assert_eq!(output, n(&usage["completion_tokens"]));

    // Anthropic's pages: limit 5 below page_size? page_size 2 still wins.
    let q = format!(
        "/v1/organizations/usage_report/messages?starting_at={}&ending_at={}&bucket_width=1h&limit=5",
        rfc(start),
        rfc(start + 5 * 3600)
    );
    let page = anthropic(&root, &q).await;
    assert_eq!(page["data"].as_array().unwrap().len(), 2);
    assert_eq!(page["next_page"], (start + 7200).to_string());
    let r = get(&root, &format!("{q}&page=12345"), true, ADMIN).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn fail_next_rate_limits_then_recovers() {
    let root = mock().await;
    admin(&root, json!({"fail_next": 2})).await;
    let (start, end) = (today(), today() + DAY);
    let oa = format!("/v1/organization/costs?start_time={start}&end_time={end}");
    let an = format!(
        "/v1/organizations/cost_report?starting_at={}&ending_at={}",
        rfc(start),
        rfc(end)
    );
    let r = get(&root, &oa, false, ADMIN).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    let r = get(&root, &an, true, ADMIN).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["type"].as_str(), v["error"]["type"].as_str()),
        (Some("error"), Some("rate_limit_error"))
    );
    assert_eq!(get(&root, &oa, false, ADMIN).await.status(), 200);
    assert_eq!(get(&root, &an, true, ADMIN).await.status(), 200);
}

#[tokio::test]
async fn a_wrong_admin_key_is_refused_in_each_providers_shape() {
    let root = mock().await;
    let (start, end) = (today(), today() + DAY);
    let oa = format!("/v1/organization/usage/completions?start_time={start}&end_time={end}");
    let an = format!(
        "/v1/organizations/usage_report/messages?starting_at={}&ending_at={}",
        rfc(start),
        rfc(end)
    );
    let r = get(&root, &oa, false, "sk-provider").await;
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["code"], "invalid_api_key");
    assert_eq!(v["error"]["param"], Value::Null);
    let r = get(&root, &an, true, "sk-provider").await;
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "authentication_error");
    // No key at all.
    let r = reqwest::get(format!("{root}{oa}")).await.unwrap();
    assert_eq!(r.status(), 401);
    // The Anthropic API wants its version header.
    let r = reqwest::Client::new()
        .get(format!("{root}{an}"))
        .header("x-api-key", ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // A key of the test's own.
    admin(&root, json!({"admin_key": "sk-admin-other"})).await;
    assert_eq!(get(&root, &oa, false, ADMIN).await.status(), 401);
    assert_eq!(get(&root, &an, true, "sk-admin-other").await.status(), 200);
    // Bad parameters are the provider's 400.
    let r = get(
        &root,
        &format!("{oa}&bucket_width=1w"),
        false,
        "sk-admin-other",
    )
    .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
}

/// The OpenAI report's uncached input and request count of each model.
async fn uncached_by_model(root: &str) -> BTreeMap<String, (u64, u64)> {
    let (start, end) = (today() - DAY, today() + 2 * DAY);
    let page = openai(
        root,
        &format!(
            "/v1/organization/usage/completions?start_time={start}&end_time={end}&group_by=model"
        ),
    )
    .await;
    let mut out: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for r in results(&page) {
        let e = out.entry(r["model"].as_str().unwrap().into()).or_default();
        e.0 += n(&r["input_uncached_tokens"]);
        e.1 += n(&r["num_model_requests"]);
    }
    out
}

#[tokio::test]
async fn extra_input_pct_raises_only_that_models_input() {
    let root = mock().await;
    admin(&root, json!({"extra_input_pct": {"m-a": 2}})).await;
    let text = "y".repeat(170);
    let a1 = chat(&root, "k", "m-a", &text, false).await;
    let a2 = chat(&root, "k", "m-a", &text, true).await;
    let b = chat(&root, "k", "m-b", &text, false).await;
    // The answers are unchanged: 3 + ceil(170/4) + 3 = 49.
    for u in [&a1, &a2, &b] {
        assert_eq!(u["prompt_tokens"], 49);
    }
    // ceil(49 × 1.02) = ceil(49.98) = 50 a request, rounded per request.
    let got = uncached_by_model(&root).await;
    assert_eq!(got["m-a"], (100, 2));
    assert_eq!(got["m-b"], (49, 1));
}

#[tokio::test]
async fn published_until_hides_later_traffic_until_cleared() {
    let root = mock().await;
    chat(&root, "k", "m-a", "first", false).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let cut = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    tokio::time::sleep(Duration::from_millis(5)).await;
    chat(&root, "k", "m-b", "second", false).await;
    admin(&root, json!({"published_until": cut})).await;
    let got = uncached_by_model(&root).await;
    assert_eq!(got.keys().collect::<Vec<_>>(), ["m-a"]);
    let v: Value = reqwest::get(format!("{root}/mock/admin"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(v["published_until"].is_string());
    admin(&root, json!({"published_until": null})).await;
    let got = uncached_by_model(&root).await;
    assert_eq!(got.keys().collect::<Vec<_>>(), ["m-a", "m-b"]);
}

#[tokio::test]
async fn clock_offset_puts_traffic_on_yesterday_and_reset_clears_all() {
    let root = mock().await;
    let day = today();
    let r = post(format!("{root}/mock/clock"), json!({"offset_secs": -DAY})).await;
    assert_eq!(r.status(), 200);
    let u = messages(&root, "k", "m-a", "hi [mock:output_tokens=6]", false).await;
    post(format!("{root}/mock/clock"), json!({"offset_secs": 0})).await;
    chat(&root, "k", "m-b", "hi [mock:output_tokens=2]", false).await;
    if today() != day {
        return; // midnight passed during the test
    }
    let page = anthropic(
        &root,
        &format!(
            "/v1/organizations/usage_report/messages?starting_at={}&ending_at={}&group_by[]=model",
            rfc(day - DAY),
            rfc(day + DAY)
        ),
    )
    .await;
    let data = page["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    let models = |b: &Value| -> Vec<(String, u64)> {
        b["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["model"].as_str().unwrap().to_string(),
                    n(&r["output_tokens"]),
                )
            })
            .collect()
    };
    assert_eq!(
        models(&data[0]),
        [("m-a".to_string(), n(&u["output_tokens"]))]
    );
    assert_eq!(models(&data[1]), [("m-b".to_string(), 2)]);

    // Reset: no traffic, no offset, default settings.
    admin(&root, json!({"admin_key": "other", "page_size": 1})).await;
    post(format!("{root}/mock/clock"), json!({"offset_secs": 3600})).await;
    assert_eq!(
        post(format!("{root}/mock/reset"), json!({})).await.status(),
        204
    );
    let clock: Value = reqwest::get(format!("{root}/mock/clock"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(clock["offset_secs"], 0);
    let page = anthropic(
        &root,
        &format!(
            "/v1/organizations/usage_report/messages?starting_at={}&ending_at={}",
            rfc(day - DAY),
            rfc(day + DAY)
        ),
    )
    .await;
    assert!(results(&page).is_empty());
}

#[tokio::test]
async fn a_stream_cut_early_records_what_it_sent() {
    let root = mock().await;
    let body = json!({"model": "m-a", "stream": true, "messages": [{"role": "user",
        "content": "go [mock:output_tokens=10][mock:fault=disconnect_after=3]"}]});
    let r = reqwest::Client::new()
        .post(format!("{root}/v1/chat/completions"))
        .bearer_auth("k")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.text().await.is_err());
    let (start, end) = (today() - DAY, today() + 2 * DAY);
    let q = format!("/v1/organization/usage/completions?start_time={start}&end_time={end}");
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let out: u64 = results(&openai(&root, &q).await)
            .iter()
            .map(|r| n(&r["output_tokens"]))
            .sum();
        if out == 3 || Instant::now() > deadline {
            assert_eq!(out, 3);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
