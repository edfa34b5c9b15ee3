//! Budgets beyond the month's two (docs/limits.md): a limit on tokens,
//! cost or requests over a day, week, month or quarter, on every model or
//! on some only, at tenant, app or key level — checked and taken in the
//! same hold as every other limit, named in refusals, listed by
//! `GET /v1/usage`, and rebuilt from the ledger when Redis loses them.
//!
//! Every expected figure is computed here from what the mock provider
//! reported (each answer's `usage`) and the prices the test set, never
//! from the gateway's code.

use domain::budgets::{Budget, BudgetPeriod};
use domain::{Limits, MicroUsd};
use e2e::*;
use serde_json::{json, Value};
use std::time::Duration;

/// µUSD per million tokens: a dear model and a cheap one.
const BIG: (i64, i64) = (2_500_000, 10_000_000);
const SMALL: (i64, i64) = (150_000, 600_000);
const OUT: i64 = 40;

fn budget(period: BudgetPeriod, models: Option<&[&str]>) -> Budget {
    Budget {
        period,
        models: models.map(|m| m.iter().map(|s| s.to_string()).collect()),
        tokens: None,
        cost_usd: None,
        requests: None,
    }
}

fn with_budgets(b: Vec<Budget>) -> Limits {
    Limits {
        budgets: Some(b),
        ..Default::default()
    }
}

/// One request's cost as booked: exact pico-USD rounded up to the µUSD.
fn cost(price: (i64, i64), input: i64, output: i64) -> i64 {
    (input * price.0 + output * price.1 + 999_999) / 1_000_000
}

/// What a request came to, or how it was refused.
enum Answer {
    Served {
        input: i64,
        output: i64,
    },
    Refused {
        status: u16,
        body: Value,
        retry_after: Option<u64>,
    },
}

async fn ask(base: &str, key: &str, model: &str) -> Answer {
    let mut body = chat_body(&format!("hello [mock:output_tokens={OUT}]"), Some(OUT));
    body["model"] = json!(model);
    let r = post(&format!("{base}/v1/chat/completions"), key, &body).await;
    let status = r.status().as_u16();
    let retry_after = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let v: Value = r.json().await.unwrap_or(Value::Null);
    if status == 200 {
        Answer::Served {
            input: v["usage"]["prompt_tokens"].as_i64().unwrap(),
            output: v["usage"]["completion_tokens"].as_i64().unwrap(),
        }
    } else {
        Answer::Refused {
            status,
            body: v,
            retry_after,
        }
    }
}

async fn usage(base: &str, key: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{base}/v1/usage"))
        .header("x-api-key", key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The line of `doc` for (level, kind, period) scoped as `scope`.
fn line<'a>(doc: &'a Value, level: &str, kind: &str, period: &str, scope: &Value) -> &'a Value {
    doc["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| {
            l["level"] == level
                && l["kind"] == kind
                && l["period"] == period
                && l["scope"] == *scope
        })
        .unwrap_or_else(|| panic!("no {level} {kind} {period} {scope} line in {doc}"))
}

fn usd(micro: i64) -> Value {
    json!(MicroUsd(micro).to_string())
}

/// Sends requests to `model` until one is refused (at most `max`); the
/// served ones' cost at `price`, their count, and the refusal.
async fn spend_until_refused(
    base: &str,
    key: &str,
    model: &str,
    price: (i64, i64),
    max: usize,
) -> (i64, i64, i64, Answer) {
    let (mut spent, mut tokens, mut n) = (0, 0, 0);
    for _ in 0..max {
        match ask(base, key, model).await {
            Answer::Served { input, output } => {
                spent += cost(price, input, output);
                tokens += input + output;
                n += 1;
            }
            refused => return (spent, tokens, n, refused),
        }
    }
    panic!("{max} requests to {model}, none refused");
}

#[tokio::test]
async fn a_model_budget_refuses_its_model_only_and_names_it() {
    let env = TestEnv::new().await;
    env.model("frontier", "chat", BIG.0, BIG.1).await;
    env.model("small", "chat", SMALL.0, SMALL.1).await;
    // $0.002 a month on the frontier model: a few requests of ~0.4 m$.
    let limit = 2_000;
    env.tenant(
        "t",
        with_budgets(vec![Budget {
            cost_usd: Some(MicroUsd(limit)),
            ..budget(BudgetPeriod::Month, Some(&["frontier"]))
        }]),
        None,
    )
    .await;
    env.app("t", "a", Limits::default()).await;
    let (_, key) = env.key("t", "a", Limits::default()).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);

    let (spent, _, n, refused) = spend_until_refused(&base, &key, "frontier", BIG, 30).await;
    let Answer::Refused { status, body, .. } = refused else {
        unreachable!()
    };
    assert_eq!(status, 402, "{body}");
    assert_eq!(
        body["error"]["code"], "tenant_model_monthly_cost_exhausted",
        "{body}"
    );
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("the tenant's monthly cost budget on frontier"),
        "{msg}"
    );
    // Never past the budget; refused only when a request's most could
    // not fit (its input and its whole output cap, twice for the
    // estimate's margin).
    assert!(n >= 2, "{n} served before the refusal");
    assert!(spent <= limit, "spent {spent} of {limit}");
    let most = cost(BIG, 64, OUT);
    assert!(
        limit - spent < 2 * most,
        "refused with {} of {limit} left",
        limit - spent
    );

    // The other model is not counted by it.
    for _ in 0..3 {
        assert!(matches!(
            ask(&base, &key, "small").await,
            Answer::Served { .. }
        ));
    }
    // GET /v1/usage names the budget with its model, and what it used.
    let doc = usage(&base, &key).await;
    let l = line(
        &doc,
        "tenant",
        "cost",
        "month",
        &json!({"kind": "models", "models": ["frontier"]}),
    );
    assert_eq!(l["limit"], usd(limit));
    assert_eq!(l["used"], usd(spent));
    assert_eq!(l["reason"], "tenant_model_monthly_cost_exhausted");

    // Redis loses the budget's counters: rebuilt from the ledger, they
    // still refuse (once the ledger has every served request).
    assert!(ledger_reaches(&env, n + 3, Duration::from_secs(10)).await);
    let mut r = env.redis().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*:b:*", env.config().redis.key_prefix))
        .query_async(&mut r)
        .await
        .unwrap();
    assert!(!keys.is_empty(), "the budget's counters are in Redis");
    for k in keys {
        let _: i64 = redis::cmd("DEL").arg(&k).query_async(&mut r).await.unwrap();
    }
    match ask(&base, &key, "frontier").await {
        Answer::Refused { status, body, .. } => {
            assert_eq!(status, 402);
            assert_eq!(body["error"]["code"], "tenant_model_monthly_cost_exhausted");
        }
        Answer::Served { .. } => panic!("served past the budget after Redis lost its counters"),
    }
    let doc = usage(&base, &key).await;
    let l = line(
        &doc,
        "tenant",
        "cost",
        "month",
        &json!({"kind": "models", "models": ["frontier"]}),
    );
    assert_eq!(l["used"], usd(spent), "rebuilt from the ledger");
    srv.shutdown().await;
}

#[tokio::test]
async fn a_daily_and_a_monthly_budget_on_one_key_both_count() {
    let env = TestEnv::new().await;
    env.model("small", "chat", SMALL.0, SMALL.1).await;
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    // $0.0002 a day, $0.01 a month.
    let (day, month) = (200, 10_000);
    let (_, key) = env
        .key(
            "t",
            "a",
            with_budgets(vec![
                Budget {
                    cost_usd: Some(MicroUsd(day)),
                    ..budget(BudgetPeriod::Day, None)
                },
                Budget {
                    cost_usd: Some(MicroUsd(month)),
                    ..budget(BudgetPeriod::Month, None)
                },
            ]),
        )
        .await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let (spent, _, _, refused) = spend_until_refused(&base, &key, "small", SMALL, 50).await;
    let Answer::Refused { status, body, .. } = refused else {
        unreachable!()
    };
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"]["code"], "key_daily_cost_exhausted", "{body}");
    assert!(spent <= day);
    let doc = usage(&base, &key).await;
    let all = json!({"kind": "all"});
    let d = line(&doc, "key", "cost", "day", &all);
    let m = line(&doc, "key", "cost", "month", &all);
    assert_eq!(d["used"], usd(spent));
    assert_eq!(m["used"], usd(spent), "the month counts the same requests");
    assert_eq!(m["remaining"], usd(month - spent));
    // The day starts again at the platform's midnight (UTC here).
    let tomorrow = chrono::Utc::now().date_naive().succ_opt().unwrap();
    assert_eq!(d["resets_at"], json!(format!("{tomorrow}T00:00:00Z")));
    srv.shutdown().await;
}

#[tokio::test]
async fn requests_and_tokens_per_period_bind_with_their_codes() {
    let env = TestEnv::new().await;
    env.model("small", "chat", SMALL.0, SMALL.1).await;
    // The tenant: 3,000 tokens a day; the app: 4 requests a week; one key
    // of it: 2 requests a day.
    env.tenant(
        "t",
        with_budgets(vec![Budget {
            tokens: Some(3_000),
            ..budget(BudgetPeriod::Day, None)
        }]),
        None,
    )
    .await;
    env.app(
        "t",
        "a",
        with_budgets(vec![Budget {
            requests: Some(4),
            ..budget(BudgetPeriod::Week, None)
        }]),
    )
    .await;
    env.app("t", "b", Limits::default()).await;
    let (_, k1) = env
        .key(
            "t",
            "a",
            with_budgets(vec![Budget {
                requests: Some(2),
                ..budget(BudgetPeriod::Day, None)
            }]),
        )
        .await;
    let (_, k2) = env.key("t", "a", Limits::default()).await;
    let (_, k3) = env.key("t", "b", Limits::default()).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);

    // The key's 2 a day.
    let (_, _, n, refused) = spend_until_refused(&base, &k1, "small", SMALL, 10).await;
    assert_eq!(n, 2);
    let Answer::Refused {
        status,
        body,
        retry_after,
    } = refused
    else {
        unreachable!()
    };
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "key_daily_requests_exhausted");
    // Retried at the next platform midnight.
    let now = chrono::Utc::now();
    let midnight = now
        .date_naive()
        .succ_opt()
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    let secs = (midnight - now).num_seconds() as u64;
    let ra = retry_after.expect("Retry-After");
    assert!(
        ra.abs_diff(secs) <= 5,
        "Retry-After {ra}, midnight in {secs} s"
    );

    // The app's 4 a week: 2 more through its other key.
    let (_, _, n, refused) = spend_until_refused(&base, &k2, "small", SMALL, 10).await;
    assert_eq!(n, 2);
    let Answer::Refused { status, body, .. } = refused else {
        unreachable!()
    };
    assert_eq!(status, 429);
    assert_eq!(
        body["error"]["code"], "app_weekly_requests_exhausted",
        "{body}"
    );

    // The tenant's tokens a day, through the other app.
    let (_, tokens, _, refused) = spend_until_refused(&base, &k3, "small", SMALL, 200).await;
    let Answer::Refused { status, body, .. } = refused else {
        unreachable!()
    };
    assert_eq!(status, 402);
    assert_eq!(
        body["error"]["code"], "tenant_daily_tokens_exhausted",
        "{body}"
    );
    let doc = usage(&base, &k3).await;
    let l = line(&doc, "tenant", "tokens", "day", &json!({"kind": "all"}));
    let all_tokens = l["used"].as_i64().unwrap();
    assert!(all_tokens <= 3_000, "{all_tokens}");
    assert!(
        all_tokens >= tokens,
        "the tenant's line counts k3's {tokens} and the others'"
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn the_admin_api_refuses_a_bad_budget_naming_it() {
    let env = TestEnv::new().await;
    env.model("small", "chat", SMALL.0, SMALL.1).await;
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    user(&env, "pa@x.io", "platform_admin", None).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let token = login(&base, "pa@x.io").await;
    let url = format!("{base}/api/v1/tenants/t/apps/a/limits");
    let put = |limits: Value| {
        let (url, token) = (url.clone(), token.clone());
        async move { api("PUT", &url, Some(&token), Some(json!({"limits": limits}))).await }
    };
    // The API's answer to a bad field: 400 naming it (the console's: 422).
    let (s, b) =
        put(json!({"budgets": [{"period": "day", "models": ["nosuch"], "tokens": 10}]})).await;
    assert_eq!(s, 400, "{b}");
    assert!(b.to_string().contains("budgets[0]"), "{b}");
    let (s, b) = put(
        json!({"budgets": [{"period": "day", "tokens": 10}, {"period": "day", "requests": 1}]}),
    )
    .await;
    assert_eq!(s, 400, "{b}");
    assert!(b.to_string().contains("budgets[1]"), "{b}");
    let (s, b) = put(json!({"budgets": [{"period": "day", "tokens": -3}]})).await;
    assert_eq!(s, 400, "{b}");
    let (s, b) = put(json!({"budgets": [{"period": "fortnight", "tokens": 10}]})).await;
    assert!(s == 422 || s == 400, "{s} {b}");
    let (s, b) =
        put(json!({"budgets": [{"period": "quarter", "models": ["small"], "cost_usd": "500"}]}))
            .await;
    assert_eq!(s, 200, "{b}");
    srv.shutdown().await;
}

#[tokio::test]
async fn a_spent_model_budget_serves_the_models_fallback_at_its_price() {
    let env = TestEnv::new().await;
    env.model("frontier", "chat", BIG.0, BIG.1).await;
    env.model("small", "chat", SMALL.0, SMALL.1).await;
    let limit = 1_000;
    env.tenant(
        "t",
        with_budgets(vec![Budget {
            cost_usd: Some(MicroUsd(limit)),
            ..budget(BudgetPeriod::Month, Some(&["frontier"]))
        }]),
        None,
    )
    .await;
    env.app("t", "a", Limits::default()).await;
    let (_, key) = env.key("t", "a", Limits::default()).await;
    // Set before the server starts (the admin API's own path is
    // fair_degrade's): a setting made while it runs reaches the gateway
    // within a second, and the budget runs out in less.
    env.store
        .set_model_fairness("test", "frontier", Some("small"), None, &[])
        .await
        .unwrap();
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);

    let send = || async {
        let mut body = chat_body(&format!("hello [mock:output_tokens={OUT}]"), Some(OUT));
        body["model"] = json!("frontier");
        post(&format!("{base}/v1/chat/completions"), &key, &body).await
    };
    // The frontier model until its budget is spent (used and held reach
    // it), then the fallback: never a 402.
    let (mut frontier_spent, mut served_small) = (0, 0);
    for _ in 0..30 {
        let r = send().await;
        if r.status() != 200 {
            panic!("{}: {}", r.status(), r.text().await.unwrap());
        }
        let served = r.headers()["x-tollgate-model"]
            .to_str()
            .unwrap()
            .to_string();
        let decision = r.headers()["x-tollgate-decision"]
            .to_str()
            .unwrap()
            .to_string();
        let reason = r
            .headers()
            .get("x-tollgate-reason")
            .map(|v| v.to_str().unwrap().to_string());
        let a: Value = r.json().await.unwrap();
        let (i, o) = (
            a["usage"]["prompt_tokens"].as_i64().unwrap(),
            a["usage"]["completion_tokens"].as_i64().unwrap(),
        );
        if served == "frontier" {
            assert_eq!(
                served_small, 0,
                "back on the frontier model after a fallback"
            );
            frontier_spent += cost(BIG, i, o);
        } else {
            assert_eq!(served, "small");
            assert_eq!(decision, "degrade");
            assert_eq!(
                reason.as_deref(),
                Some("tenant_model_monthly_cost_exhausted")
            );
            served_small += 1;
            if served_small == 3 {
                break;
            }
        }
    }
    assert_eq!(
        served_small, 3,
        "the fallback served once the budget was spent"
    );
    assert!(frontier_spent <= limit);
    // Billed at the fallback's price: the ledger's rows of the small model
    // cost what its prices say.
    assert!(
        eventually(Duration::from_secs(10), || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM usage_events WHERE model = 'small'")
                .fetch_one(env.store.pool())
                .await
                .unwrap()
                == 3
        })
        .await
    );
    let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
        "SELECT model, input_tokens, output_tokens, cost_micro FROM usage_events WHERE model = 'small'",
    )
    .fetch_all(env.store.pool())
    .await
    .unwrap();
    for (_, i, o, c) in rows {
        assert_eq!(c, cost(SMALL, i, o), "billed at the fallback's price");
    }
    srv.shutdown().await;
}
