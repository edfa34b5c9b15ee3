//! `GET /v1/usage` (docs/clients.md, "What a key has left"): a key asks,
//! with itself, what every limit of its tenant, app and key has left. Every
//! expected figure here is computed from what the test sent and what the
//! mock provider reported (each answer's `usage`), the limits the test set
//! and the model's prices — never from the gateway's code. Run on both
//! admission paths: per request, and on leases (whose chunks count as held
//! until they go back, within a second of idleness).

use domain::Limits;
use domain::MicroUsd;
use e2e::*;
use serde_json::{json, Value};
use server::config::AdmissionSetting;
use std::time::{Duration, Instant};

/// µUSD per million tokens of the test model.
const IN_PRICE: i64 = 150_000;
const OUT_PRICE: i64 = 600_000;

/// How a key is sent.
#[derive(Debug, Clone, Copy)]
enum Auth {
    Bearer,
    XApiKey,
    GoogHeader,
    Query,
}

async fn usage(base: &str, key: &str, auth: Auth) -> (u16, Value) {
    let c = reqwest::Client::new();
    let url = format!("{base}/v1/usage");
    let rb = match auth {
        Auth::Bearer => c.get(&url).bearer_auth(key),
        Auth::XApiKey => c.get(&url).header("x-api-key", key),
        Auth::GoogHeader => c.get(&url).header("x-goog-api-key", key),
        Auth::Query => c.get(format!("{url}?key={key}")),
    };
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// One request's cost as the gateway books it: exact pico-USD, rounded up
/// to the micro-dollar per request.
fn cost(input: i64, output: i64) -> i64 {
    (input * IN_PRICE + output * OUT_PRICE + 999_999) / 1_000_000
}

fn usd(micro: i64) -> Value {
    json!(MicroUsd(micro).to_string())
}

/// What a key's requests came to: tokens in and out, cost, count.
#[derive(Debug, Default, Clone, Copy)]
struct Spent {
    input: i64,
    output: i64,
    cost: i64,
    requests: i64,
}

impl Spent {
    fn tokens(&self) -> i64 {
        self.input + self.output
    }
    fn add(&mut self, o: Spent) {
        self.input += o.input;
        self.output += o.output;
        self.cost += o.cost;
        self.requests += o.requests;
    }
}

/// A plain chat request whose answer says `output` tokens; what the mock
/// reported it served.
async fn chat(base: &str, key: &str, text: &str, output: i64) -> Spent {
    let body = chat_body(&format!("{text} [mock:output_tokens={output}]"), Some(40));
    let r = post(&format!("{base}/v1/chat/completions"), key, &body).await;
    assert_eq!(r.status(), 200);
    let a: Value = r.json().await.unwrap();
    let input = a["usage"]["prompt_tokens"].as_i64().unwrap();
    let out = a["usage"]["completion_tokens"].as_i64().unwrap();
    assert_eq!(out, output);
    Spent {
        input,
        output: out,
        cost: cost(input, out),
        requests: 1,
    }
}

/// The start of next month in the platform's zone (UTC in the tests).
fn month_end() -> String {
    let m = this_month();
    let (y, mo): (i32, u32) = (m[..4].parse().unwrap(), m[5..].parse().unwrap());
    let (y, mo) = if mo == 12 { (y + 1, 1) } else { (y, mo + 1) };
    format!("{y:04}-{mo:02}-01T00:00:00Z")
}

fn day_end() -> String {
    let tomorrow = chrono::Utc::now().date_naive().succ_opt().unwrap();
    format!("{tomorrow}T00:00:00Z")
}

/// One expected line: (level, kind, period) and what it must say.
struct Want {
    level: &'static str,
    kind: &'static str,
    period: Option<&'static str>,
    limit: Value,
    used: Check,
    held: Value,
}

/// A used figure: exact (budgets, in-flight), or within what a bucket
/// refilled since the traffic began (rates).
enum Check {
    Exact(Value),
    Between(i64, i64),
}

/// Every line of `doc` against `want`, in order; an error names the first
/// figure that differs.
fn check(doc: &Value, want: &[Want]) -> Result<(), String> {
    let lines = doc["limits"].as_array().ok_or("no limits")?;
    let got: Vec<(String, String, Value)> = lines
        .iter()
        .map(|l| {
            (
                l["level"].as_str().unwrap_or("").to_string(),
                l["kind"].as_str().unwrap_or("").to_string(),
                l["period"].clone(),
            )
        })
        .collect();
    let expected: Vec<(String, String, Value)> = want
        .iter()
        .map(|w| (w.level.into(), w.kind.into(), json!(w.period)))
        .collect();
    if got != expected {
        return Err(format!("lines {got:?}, want {expected:?}"));
    }
    for (l, w) in lines.iter().zip(want) {
        let what = format!("{} {} {:?}", w.level, w.kind, w.period);
        let num = |v: &Value| -> i64 {
            v.as_i64().unwrap_or_else(|| {
                MicroUsd::from_usd_str(v.as_str().unwrap_or("x"))
                    .map(|m| m.0)
                    .unwrap_or(i64::MIN)
            })
        };
        if l["limit"] != w.limit {
            return Err(format!("{what}: limit {} want {}", l["limit"], w.limit));
        }
        if l["held"] != w.held {
            return Err(format!("{what}: held {} want {}", l["held"], w.held));
        }
        match &w.used {
            Check::Exact(v) if l["used"] != *v => {
                return Err(format!("{what}: used {} want {v}", l["used"]))
            }
            Check::Between(lo, hi) if !(*lo..=*hi).contains(&num(&l["used"])) => {
                return Err(format!("{what}: used {} want {lo}..={hi}", l["used"]))
            }
            _ => {}
        }
        let left = (num(&w.limit) - num(&l["used"]) - num(&w.held)).max(0);
        if num(&l["remaining"]) != left {
            return Err(format!("{what}: remaining {} want {left}", l["remaining"]));
        }
        if l["scope"] != json!({"kind": "all"}) {
            return Err(format!("{what}: scope {}", l["scope"]));
        }
        let resets = match w.period {
            Some("month") => Some(month_end()),
            Some("day") => Some(day_end()),
            _ => None,
        };
        if let Some(r) = resets {
            if l["resets_at"] != json!(r) {
                return Err(format!("{what}: resets_at {} want {r}", l["resets_at"]));
            }
        }
    }
    Ok(())
}

/// How much a bucket of `per_minute` refills in `elapsed`, rounded up.
fn refill(per_minute: i64, elapsed: Duration) -> i64 {
    (elapsed.as_millis() as i64 * per_minute + 59_999) / 60_000 + 1
}

/// The lines of tenant t's key `k1` after its tenant spent `t` (keys k1
/// and k2, one app) and the key `k`, with `held` (tokens, µUSD) open, and
/// `inflight` requests in flight; rates checked against the requests and
/// tokens taken since `since`.
fn wants(t: Spent, k: Spent, held: (i64, i64), inflight: i64, since: Instant) -> Vec<Want> {
    let el = since.elapsed();
    let (ht, hc) = held;
    let w = |level, kind, period, limit: Value, used: Check, held: Value| Want {
        level,
        kind,
        period,
        limit,
        used,
        held,
    };
    use Check::*;
    vec![
        w(
            "tenant",
            "tokens",
            Some("month"),
            json!(1_000_000),
            Exact(json!(t.tokens())),
            json!(ht),
        ),
        w(
            "tenant",
            "cost",
            Some("month"),
            usd(5_000_000),
            Exact(usd(t.cost)),
            usd(hc),
        ),
        w(
            "tenant",
            "cost",
            Some("day"),
            usd(1_000_000),
            Exact(usd(t.cost)),
            usd(0),
        ),
        w(
            "tenant",
            "in_flight",
            None,
            json!(20),
            Exact(json!(inflight)),
            json!(0),
        ),
        w(
            "tenant",
            "requests",
            Some("minute"),
            json!(60),
            Between(t.requests - refill(60, el), t.requests + inflight),
            json!(0),
        ),
        w(
            "app",
            "tokens",
            Some("month"),
            json!(200_000),
            Exact(json!(t.tokens())),
            json!(ht),
        ),
        w(
            "app",
            "in_flight",
            None,
            json!(10),
            Exact(json!(inflight)),
            json!(0),
        ),
        w(
            "app",
            "input_tokens",
            Some("minute"),
            json!(600),
            Between(t.input - refill(600, el), t.input + ht),
            json!(0),
        ),
        w(
            "key",
            "cost",
            Some("month"),
            usd(2_000_000),
            Exact(usd(k.cost)),
            usd(hc),
        ),
        w(
            "key",
            "requests",
            Some("minute"),
            json!(30),
            Between(k.requests - refill(30, el), k.requests + inflight),
            json!(0),
        ),
        w(
            "key",
            "output_tokens",
            Some("minute"),
            json!(300),
            Between(k.output - refill(300, el), k.output + ht),
            json!(0),
        ),
    ]
}

async fn a_key_reads_what_every_limit_has_left(mode: AdmissionSetting) {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", IN_PRICE, OUT_PRICE).await;
    env.tenant(
        "t",
        Limits {
            monthly_tokens: Some(1_000_000),
            monthly_cost_usd: Some(MicroUsd(5_000_000)),
            daily_cost_soft_usd: Some(MicroUsd(1_000_000)),
            rpm: Some(60),
            max_inflight: Some(20),
            ..Default::default()
        },
        None,
    )
    .await;
    env.app(
        "t",
        "a",
        Limits {
            monthly_tokens: Some(200_000),
            input_tpm: Some(600),
            max_inflight: Some(10),
            ..Default::default()
        },
    )
    .await;
    let (_, k1) = env
        .key(
            "t",
            "a",
            Limits {
                monthly_cost_usd: Some(MicroUsd(2_000_000)),
                rpm: Some(30),
                output_tpm: Some(300),
                max_output_tokens: Some(64),
                ..Default::default()
            },
        )
        .await;
    let (k2_id, k2) = env.named_key("t", "a", "k2", Limits::default()).await;
    env.tenant(
        "u",
        Limits {
            monthly_tokens: Some(5_000),
            ..Default::default()
        },
        None,
    )
    .await;
    env.app(
        "u",
        "b",
        Limits {
            rpm: Some(100),
            ..Default::default()
        },
    )
    .await;
    let (_, ku) = env.key("u", "b", Limits::default()).await;
    let mut cfg = env.config();
    cfg.gateway.admission = mode;
    let srv = env.server_with(cfg).await;
    let base = format!("http://{}", srv.addr);

    // Traffic: three requests of k1, two of k2 (same app), one of u's key.
    let since = Instant::now();
    let (mut k, mut t, mut u) = (Spent::default(), Spent::default(), Spent::default());
    for (text, out) in [
        ("hello", 16),
        ("a longer question for the model", 24),
        ("x", 7),
    ] {
        let s = chat(&base, &k1, text, out).await;
        k.add(s);
        t.add(s);
    }
    for (text, out) in [("from the other key", 11), ("again", 5)] {
        t.add(chat(&base, &k2, text, out).await);
    }
    u.add(chat(&base, &ku, "tenant u", 9).await);
    assert!(ledger_reaches(&env, 6, Duration::from_secs(10)).await);
    // Leases (on that path) go back within a second of idleness.
    let month = this_month();
    let quiet = eventually(Duration::from_secs(10), || async {
        let c = env.counters("t", &month).await;
        c.get("t:ht").copied().unwrap_or(0) == 0 && c.get("t:hc").copied().unwrap_or(0) == 0
    })
    .await;
    assert!(quiet, "{mode:?}: holds never went back");

    // Settled: the same document whichever way the key is sent.
    for auth in [Auth::Bearer, Auth::XApiKey, Auth::GoogHeader, Auth::Query] {
        let (s, doc) = usage(&base, &k1, auth).await;
        assert_eq!(s, 200, "{mode:?} {auth:?}: {doc}");
        check(&doc, &wants(t, k, (0, 0), 0, since))
            .unwrap_or_else(|e| panic!("{mode:?} {auth:?}: {e}\n{doc:#}"));
        assert_eq!(doc["object"], "usage");
        assert_eq!(
            (doc["tenant_id"].as_str(), doc["app_id"].as_str()),
            (Some("t"), Some("a"))
        );
        assert_eq!(doc["month"], json!(month));
        assert_eq!(
            doc["spend"],
            json!({"period": "month", "cost_usd": usd(k.cost), "tokens": k.tokens(),
                "held_cost_usd": usd(0), "held_tokens": 0}),
            "{mode:?} {auth:?}"
        );
        assert_eq!(doc["per_request"]["max_output_tokens"], 64);
        assert_eq!(doc["per_request"]["max_context_tokens"], Value::Null);
    }

    // Another tenant's key sees its own tenant only.
    let (s, doc) = usage(&base, &ku, Auth::Bearer).await;
    assert_eq!(s, 200, "{doc}");
    assert_eq!(doc["tenant_id"], "u");
    let lines = doc["limits"].as_array().unwrap();
    assert_eq!(lines.len(), 2, "{doc:#}");
    assert_eq!(
        (
            &lines[0]["level"],
            &lines[0]["kind"],
            &lines[0]["limit"],
            &lines[0]["used"]
        ),
        (
            &json!("tenant"),
            &json!("tokens"),
            &json!(5_000),
            &json!(u.tokens())
        ),
        "{doc:#}"
    );
    assert_eq!(
        (&lines[1]["level"], &lines[1]["kind"]),
        (&json!("app"), &json!("requests"))
    );
    assert_eq!(doc["spend"]["tokens"], u.tokens());

    // A request in flight (a stream: held per request on both paths): its
    // hold shows as held, and as one in flight.
    let body = json!({"model": "gpt-4o-mini", "stream": true, "max_tokens": 32,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "slow [mock:latency_ms=2500] [mock:output_tokens=20]"}]});
    let url = format!("{base}/v1/chat/completions");
    let key = k1.clone();
    let stream = tokio::spawn(async move { post(&url, &key, &body).await });
    let t0 = Instant::now();
    let during = loop {
        let (_, doc) = usage(&base, &k1, Auth::Bearer).await;
        if doc["limits"][3]["used"] == 1 {
            break doc;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "{mode:?}: the stream never showed in flight: {doc:#}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let r = stream.await.unwrap();
    assert_eq!(r.status(), 200);
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let events = sse_events(r).await;
    let reported = events
        .iter()
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|v| v["usage"].is_object())
        .expect("the stream reports its usage");
    assert!(ledger_reaches(&env, 7, Duration::from_secs(10)).await);
    // What the hold was is on the ledger row, written apart from the usage
    // route: (tokens, µUSD) estimated.
    let ev = env.usage_event(&rid).await.unwrap();
    let held = (ev.est_tokens, ev.est_cost_micro);
    assert!(held.0 > 0 && held.1 > 0, "{ev:?}");
    check(&during, &wants(t, k, held, 1, since))
        .unwrap_or_else(|e| panic!("{mode:?} in flight: {e}\n{during:#}"));
    assert_eq!(
        (
            &during["spend"]["held_tokens"],
            &during["spend"]["held_cost_usd"]
        ),
        (&json!(held.0), &usd(held.1))
    );

    // Settled, the stream is used at the provider's count.
    let (i, o) = (
        reported["usage"]["prompt_tokens"].as_i64().unwrap(),
        reported["usage"]["completion_tokens"].as_i64().unwrap(),
    );
    let s = Spent {
        input: i,
        output: o,
        cost: cost(i, o),
        requests: 1,
    };
    k.add(s);
    t.add(s);
    let t0 = Instant::now();
    loop {
        let (_, doc) = usage(&base, &k1, Auth::XApiKey).await;
        match check(&doc, &wants(t, k, (0, 0), 0, since)) {
            Ok(()) => break,
            Err(e) if t0.elapsed() > Duration::from_secs(10) => {
                panic!("{mode:?} after the stream: {e}\n{doc:#}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }

    // A revoked key: 401 in the dialect it came in.
    env.store
        .revoke_key("test", k2_id.parse().unwrap())
        .await
        .unwrap();
    let gone = eventually(Duration::from_secs(2), || async {
        usage(&base, &k2, Auth::Bearer).await.0 == 401
    })
    .await;
    assert!(gone, "{mode:?}: a revoked key still reads its usage");
    let (_, e) = usage(&base, &k2, Auth::Bearer).await;
    assert_eq!(e["error"]["code"], "invalid_api_key", "{e}");
    let (s, e) = usage(&base, &k2, Auth::XApiKey).await;
    assert_eq!(s, 401);
    assert_eq!(
        (&e["type"], &e["error"]["type"]),
        (&json!("error"), &json!("authentication_error")),
        "{e}"
    );
    let (s, e) = usage(&base, &k2, Auth::GoogHeader).await;
    assert_eq!(
        (s, &e["error"]["status"]),
        (401, &json!("UNAUTHENTICATED")),
        "{e}"
    );
    let (s, e) = usage(&base, "tg-not-a-key-at-all-0000000000000000", Auth::Bearer).await;
    assert_eq!(
        (s, &e["error"]["code"]),
        (401, &json!("invalid_api_key")),
        "{e}"
    );

    // A refusal names the limit it hit: level, kind and period.
    let r = post(
        &format!("{base}/v1/chat/completions"),
        &ku,
        &chat_body("too much", Some(8_000)),
    )
    .await;
    assert_eq!(r.status(), 402);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "tenant_monthly_budget_exhausted");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("the tenant's token budget for the month"),
        "{msg}"
    );
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reads_what_every_limit_has_left_per_request() {
    a_key_reads_what_every_limit_has_left(AdmissionSetting::PerRequest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reads_what_every_limit_has_left_on_leases() {
    a_key_reads_what_every_limit_has_left(AdmissionSetting::Lease).await;
}
