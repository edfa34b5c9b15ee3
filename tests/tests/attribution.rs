//! Cost attribution below the app (docs/billing.md, "Tags and end users"):
//! tags and end users reach the ledger, the rollups, the bills grouped by a
//! tag or by end user (JSON and CSV), the FOCUS export, the request log and
//! request lookup; malformed or missing tags are refused by name in the
//! client's dialect. Amounts are checked against what the clients were
//! billed, computed here from the usage the mock upstream answered with and
//! the model's prices, and against a direct SQL sum over the ledger.

use domain::attribution::Policy;
use domain::{Limits, MicroUsd};
use e2e::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use store::AppRow;

/// Whole micro-dollars per token, so that each request's cost is exact in
/// micro-USD: a group's line is then the sum of its requests' costs, which
/// is what these tests check (the rounding of fractions of a micro-dollar,
/// once per line, is tests/tests/books_exact.rs's).
const IN_PRICE: i64 = 1_000_000;
const OUT_PRICE: i64 = 3_000_000;

struct Fixture {
    env: TestEnv,
    _srv: server::app::Running,
    base: String,
    admin: String,
    key: String,
}

/// Tenant t; app `a` defaults `env=prod` and requires `project`.
async fn fixture() -> Fixture {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", IN_PRICE, OUT_PRICE).await;
    env.tenant("t", Limits::default(), None).await;
    let policy = Policy {
        default_tags: [("env".to_string(), "prod".to_string())].into(),
        required_tags: vec!["project".into()],
        end_user_limits: None,
    };
    let app = AppRow {
        tenant_id: "t".into(),
        id: "a".into(),
        name: "a".into(),
        limits: Limits::default(),
        allowed_models: None,
        attribution: policy,
    };
    env.store.create_app("test", &app).await.unwrap();
    let (_, key) = env.key("t", "a", Limits::default()).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let admin = login(&base, "admin@x.io").await;
    Fixture {
        env,
        _srv: srv,
        base,
        admin,
        key,
    }
}

/// A chat request with optional attribution headers: (status, body).
async fn chat(f: &Fixture, path: &str, headers: &[(&str, &str)], body: &Value) -> (u16, Value) {
    let mut rb = reqwest::Client::new()
        .post(format!("{}{path}", f.base))
        .bearer_auth(&f.key)
        .json(body);
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// What the client is billed for an answer: its reported usage at the
/// model's prices (micro-USD per million tokens, rounded up).
fn billed(answer: &Value) -> i64 {
    let i = answer["usage"]["prompt_tokens"].as_i64().unwrap();
    let o = answer["usage"]["completion_tokens"].as_i64().unwrap();
    (i * IN_PRICE + o * OUT_PRICE + 999_999) / 1_000_000
}

async fn ledger_rows(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM usage_events")
        .fetch_one(env.store.pool())
        .await
        .unwrap()
}

async fn wait_for_ledger(env: &TestEnv, n: i64) {
    let ok = eventually(Duration::from_secs(10), || async {
        ledger_rows(env).await == n
    })
    .await;
    assert!(ok, "the ledger never held {n} events");
}

async fn get_text(url: &str, token: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// RFC 4180 lines into fields (quoted fields, doubled quotes).
fn csv_rows(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let mut fields = Vec::new();
        let mut cur = String::new();
        let mut quoted = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    cur.push('"');
                    chars.next();
                }
                ('"', _) => quoted = !quoted,
                (',', false) => fields.push(std::mem::take(&mut cur)),
                (c, _) => cur.push(c),
            }
        }
        fields.push(cur);
        rows.push(fields);
    }
    rows
}

/// The CSV's rows as maps from header to field.
fn csv_maps(text: &str) -> Vec<BTreeMap<String, String>> {
    let rows = csv_rows(text);
    let header = rows[0].clone();
    rows[1..]
        .iter()
        .map(|r| header.iter().cloned().zip(r.iter().cloned()).collect())
        .collect()
}

fn micro(usd: &str) -> i64 {
    MicroUsd::from_usd_str(usd).unwrap().0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tagged_requests_are_billed_by_tag_in_json_csv_and_focus() {
    let f = fixture().await;
    let mut want: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    // Three tagged by header, two by the body's metadata (with an end user).
    for i in 0..3 {
        let body = chat_body(&format!("apollo question {i}"), Some(8));
        let (s, a) = chat(
            &f,
            "/v1/chat/completions",
            &[("x-tollgate-tags", "project=apollo")],
            &body,
        )
        .await;
        assert_eq!(s, 200, "{a}");
        let e = want.entry("apollo").or_default();
        e.0 += 1;
        e.1 += billed(&a);
    }
    for i in 0..2 {
        let mut body = chat_body(&format!("gemini question {i} with more words"), Some(8));
        body["metadata"] = json!({"project": "gemini"});
        body["user"] = json!("customer-42");
        let (s, a) = chat(&f, "/v1/chat/completions", &[], &body).await;
        assert_eq!(s, 200, "{a}");
        let e = want.entry("gemini").or_default();
        e.0 += 1;
        e.1 += billed(&a);
    }
    wait_for_ledger(&f.env, 5).await;

    // The ledger itself, summed by SQL, agrees with what was billed.
    let by_sql: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT tags->>'project', count(*), sum(cost_micro)::int8 FROM usage_events
         GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(f.env.store.pool())
    .await
    .unwrap();
    let want_rows: Vec<(String, i64, i64)> = want
        .iter()
        .map(|(k, (n, c))| (k.to_string(), *n, *c))
        .collect();
    assert_eq!(by_sql, want_rows);
    let end_users: Vec<(String, String)> = sqlx::query_as(
        "SELECT tags->>'env', end_user FROM usage_events WHERE tags->>'project' = 'gemini'",
    )
    .fetch_all(f.env.store.pool())
    .await
    .unwrap();
    assert_eq!(
        end_users,
        vec![("prod".to_string(), "customer-42".to_string()); 2],
        "the app's default tag and the OpenAI `user` are booked"
    );

    // The bill grouped by tag:project.
    let period = this_month();
    let (s, bill) = api(
        "GET",
        &format!(
            "{}/api/v1/bills?period={period}&tenant=t&group_by=tag:project",
            f.base
        ),
        Some(&f.admin),
        None,
    )
    .await;
    assert_eq!(s, 200, "{bill}");
    assert_eq!(bill["group_by"], "tag:project");
    let lines: Vec<(String, i64, i64)> = bill["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["value"].as_str().unwrap_or("<none>").to_string(),
                l["requests"].as_i64().unwrap(),
                micro(l["cost_usd"].as_str().unwrap()),
            )
        })
        .collect();
    assert_eq!(lines, want_rows, "{bill}");
    let want_total: i64 = want.values().map(|(_, c)| c).sum();
    assert_eq!(
        micro(bill["tenants"][0]["cost_usd"].as_str().unwrap()),
        want_total,
        "the groups sum to the tenant's bill: {bill}"
    );

    // The same as CSV.
    let (s, csv) = get_text(
        &format!(
            "{}/api/v1/bills.csv?period={period}&tenant=t&group_by=tag:project",
            f.base
        ),
        &f.admin,
    )
    .await;
    assert_eq!(s, 200, "{csv}");
    let got: Vec<(String, i64, i64)> = csv_maps(&csv)
        .iter()
        .map(|r| {
            (
                r["tag:project"].clone(),
                r["requests"].parse().unwrap(),
                micro(&r["cost_usd"]),
            )
        })
        .collect();
    assert_eq!(got, want_rows, "{csv}");

    // FOCUS carries the tags, and its cost per tag set is what was billed.
    let (s, focus) = get_text(
        &format!("{}/api/v1/bills.focus.csv?period={period}&tenant=t", f.base),
        &f.admin,
    )
    .await;
    assert_eq!(s, 200, "{focus}");
    let mut by_tags: BTreeMap<String, i64> = BTreeMap::new();
    for r in csv_maps(&focus) {
        *by_tags.entry(r["Tags"].clone()).or_default() += micro(&r["BilledCost"]);
    }
    let want_focus: BTreeMap<String, i64> = want
        .iter()
        .map(|(p, (_, c))| (format!("{{\"env\":\"prod\",\"project\":\"{p}\"}}"), *c))
        .collect();
    assert_eq!(by_tags, want_focus, "{focus}");

    // The request log and request lookup show the tags and the end user.
    let (s, log) = api(
        "GET",
        &format!("{}/api/v1/requests?tenant=t&limit=10", f.base),
        Some(&f.admin),
        None,
    )
    .await;
    assert_eq!(s, 200, "{log}");
    let data = log["data"].as_array().unwrap();
    assert_eq!(data.len(), 5);
    let gemini: Vec<&Value> = data
        .iter()
        .filter(|r| r["tags"]["project"] == "gemini")
        .collect();
    assert_eq!(gemini.len(), 2, "{log}");
    assert!(gemini.iter().all(|r| r["end_user"] == "customer-42"));
    let rid = gemini[0]["request_id"].as_str().unwrap();
    let (s, one) = api(
        "GET",
        &format!("{}/api/v1/requests/{rid}", f.base),
        Some(&f.admin),
        None,
    )
    .await;
    assert_eq!(s, 200, "{one}");
    assert_eq!(
        one["usage"]["tags"],
        json!({"env": "prod", "project": "gemini"})
    );
    assert_eq!(one["usage"]["end_user"], "customer-42");

    // Grouped by end user: the two requests of customer-42, the rest none.
    let (s, bill) = api(
        "GET",
        &format!(
            "{}/api/v1/bills?period={period}&tenant=t&group_by=end_user",
            f.base
        ),
        Some(&f.admin),
        None,
    )
    .await;
    assert_eq!(s, 200, "{bill}");
    let lines: Vec<(Value, i64, i64)> = bill["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["value"].clone(),
                l["requests"].as_i64().unwrap(),
                micro(l["cost_usd"].as_str().unwrap()),
            )
        })
        .collect();
    assert_eq!(
        lines,
        vec![
            (Value::Null, 3, want["apollo"].1),
            (json!("customer-42"), 2, want["gemini"].1)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_or_missing_tags_are_refused_by_name_and_book_nothing() {
    let f = fixture().await;
    let body = chat_body("hello", Some(8));
    let url = "/v1/chat/completions";

    // The app requires `project`.
    let (s, e) = chat(&f, url, &[("x-tollgate-tags", "team=search")], &body).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["code"], "missing_required_tag", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"project\""),
        "{e}"
    );

    // Eleven tags (the app's default makes ten of the request's own eleven).
    let eleven: Vec<String> = (0..11).map(|i| format!("k{i}=v")).collect();
    let eleven = eleven.join(",");
    let (s, e) = chat(&f, url, &[("x-tollgate-tags", &eleven)], &body).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["code"], "invalid_tag", "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("11 tags"),
        "{e}"
    );

    // A bad value is named.
    let (s, e) = chat(
        &f,
        url,
        &[("x-tollgate-tags", "project=apollo,cost centre=x")],
        &body,
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["code"], "invalid_tag");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"cost centre\""),
        "{e}"
    );

    // An end user beyond the bound.
    let long = "u".repeat(200);
    let (s, e) = chat(
        &f,
        url,
        &[
            ("x-tollgate-tags", "project=apollo"),
            ("x-tollgate-end-user", &long),
        ],
        &body,
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["code"], "invalid_end_user");

    // Anthropic's dialect gets Anthropic's error shape, with the code.
    let msg = json!({"model": "gpt-4o-mini", "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}]});
    let (s, e) = chat(&f, "/v1/messages", &[("x-tollgate-tags", &eleven)], &msg).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
    assert_eq!(e["error"]["code"], "invalid_tag", "{e}");
    let (s, e) = chat(&f, "/v1/messages", &[], &msg).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["code"], "missing_required_tag", "{e}");

    // Nothing was booked; a valid request then is.
    let (s, a) = chat(&f, url, &[("x-tollgate-tags", "project=apollo")], &body).await;
    assert_eq!(s, 200, "{a}");
    wait_for_ledger(&f.env, 1).await;
    let month = this_month();
    let c = f.env.counters("t", &month).await;
    let tokens = a["usage"]["prompt_tokens"].as_i64().unwrap()
        + a["usage"]["completion_tokens"].as_i64().unwrap();
    // (Held is the replica's lease, in the default lease mode.)
    assert_eq!(
        c.get("t:ut").copied(),
        Some(tokens),
        "only the valid request is counted: {c:?}"
    );

    // The admin API refuses a bad policy naming the field.
    let (s, e) = api(
        "POST",
        &format!("{}/api/v1/tenants/t/apps", f.base),
        Some(&f.admin),
        Some(json!({"id": "b", "name": "B",
            "attribution": {"default_tags": {"env": "prod"}, "required_tags": ["project", "Bad Key"]}})),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "attribution.required_tags[1]", "{e}");
    let (s, ok) = api(
        "POST",
        &format!("{}/api/v1/tenants/t/apps", f.base),
        Some(&f.admin),
        Some(json!({"id": "b", "name": "B",
            "attribution": {"default_tags": {"env": "prod"}, "required_tags": ["project"]}})),
    )
    .await;
    assert_eq!(s, 200, "{ok}");
    assert_eq!(ok["attribution"]["required_tags"], json!(["project"]));
}

/// A key issued with its own policy: its default tags override the app's,
/// its required keys are added to the app's, and the ledger row carries the
/// merge; the app's other keys keep the app's policy alone. End-user limits
/// are the app's: a key asking for them, or naming a bad tag, is refused by
/// the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_own_tags_override_its_apps_and_its_required_keys_are_added() {
    let f = fixture().await;
    let keys_url = format!("{}/api/v1/tenants/t/apps/a/keys", f.base);
    let (s, e) = api(
        "POST",
        &keys_url,
        Some(&f.admin),
        Some(json!({"name": "k2", "attribution": {"end_user_limits": {"rpm": 5}}})),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "attribution.end_user_limits", "{e}");
    let (s, e) = api(
        "POST",
        &keys_url,
        Some(&f.admin),
        Some(json!({"name": "k2", "attribution": {"default_tags": {"env": "pro d"}}})),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "attribution.default_tags.env", "{e}");
    let (s, made) = api(
        "POST",
        &keys_url,
        Some(&f.admin),
        Some(json!({"name": "k2", "attribution":
            {"default_tags": {"env": "staging", "team": "search"}, "required_tags": ["ticket"]}})),
    )
    .await;
    assert_eq!(s, 201, "{made}");
    let own = Fixture {
        key: made["key"].as_str().unwrap().to_string(),
        ..f
    };
    let body = chat_body("hello", Some(8));
    let url = "/v1/chat/completions";

    // The key's own required key, on top of the app's `project`.
    let (s, e) = chat(&own, url, &[("x-tollgate-tags", "project=apollo")], &body).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["code"], "missing_required_tag", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"ticket\""),
        "{e}"
    );
    let (s, e) = chat(&own, url, &[("x-tollgate-tags", "ticket=T-1")], &body).await;
    assert_eq!(s, 400, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"project\""),
        "the app's required key still applies: {e}"
    );
    let (s, a) = chat(
        &own,
        url,
        &[("x-tollgate-tags", "project=apollo,ticket=T-1")],
        &body,
    )
    .await;
    assert_eq!(s, 200, "{a}");
    wait_for_ledger(&own.env, 1).await;
    let tags: Value = sqlx::query_scalar("SELECT tags FROM usage_events")
        .fetch_one(own.env.store.pool())
        .await
        .unwrap();
    assert_eq!(
        tags,
        json!({"env": "staging", "team": "search", "project": "apollo", "ticket": "T-1"}),
        "the key's defaults over the app's, the request's over both"
    );

    // The app's first key: the app's policy alone (no `ticket` needed).
    let (_, first) = own.env.key("t", "a", Limits::default()).await;
    let plain = Fixture { key: first, ..own };
    let (s, a) = chat(&plain, url, &[("x-tollgate-tags", "project=gemini")], &body).await;
    assert_eq!(s, 200, "{a}");
    wait_for_ledger(&plain.env, 2).await;
    let tags: Vec<Value> = sqlx::query_scalar("SELECT tags FROM usage_events ORDER BY started_at")
        .fetch_all(plain.env.store.pool())
        .await
        .unwrap();
    assert_eq!(tags[1], json!({"env": "prod", "project": "gemini"}));
}

// ------------------------------------------------------- end-user limits

/// Tenant t, app `eu` whose end users are limited by `limits`, one key;
/// the server in `mode`.
async fn end_user_fixture(
    limits: domain::attribution::EndUserLimits,
    mode: server::config::AdmissionSetting,
) -> Fixture {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", IN_PRICE, OUT_PRICE).await;
    env.tenant("t", Limits::default(), None).await;
    let app = AppRow {
        tenant_id: "t".into(),
        id: "eu".into(),
        name: "eu".into(),
        limits: Limits::default(),
        allowed_models: None,
        attribution: Policy {
            end_user_limits: Some(limits),
            ..Default::default()
        },
    };
    env.store.create_app("test", &app).await.unwrap();
    let (_, key) = env.key("t", "eu", Limits::default()).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let mut cfg = env.config();
    cfg.gateway.admission = mode;
    let srv = env.server_with(cfg).await;
    let base = format!("http://{}", srv.addr);
    let admin = login(&base, "admin@x.io").await;
    Fixture {
        env,
        _srv: srv,
        base,
        admin,
        key,
    }
}

async fn as_end_user(f: &Fixture, end_user: &str) -> (u16, Value) {
    let body = chat_body("hello there", Some(8));
    chat(
        f,
        "/v1/chat/completions",
        &[("x-tollgate-end-user", end_user)],
        &body,
    )
    .await
}

/// Every Redis hash and sorted set of the tenant, as raw strings (what a
/// refusal must leave as it was).
async fn tenant_redis(env: &TestEnv) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut c = env.redis().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:{{t:t}}:*", env.prefix))
        .query_async(&mut c)
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for k in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&k)
            .query_async(&mut c)
            .await
            .unwrap();
        let fields: BTreeMap<String, String> = match kind.as_str() {
            "hash" => redis::cmd("HGETALL")
                .arg(&k)
                .query_async(&mut c)
                .await
                .unwrap(),
            "zset" => {
                let v: Vec<String> = redis::cmd("ZRANGE")
                    .arg(&k)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                v.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect()
            }
            _ => BTreeMap::new(),
        };
        out.insert(k, fields);
    }
    out
}

/// Settles run beside the answers: wait until nothing is held.
async fn settled(env: &TestEnv) {
    let month = this_month();
    let ok = eventually(Duration::from_secs(10), || async {
        env.counters("t", &month)
            .await
            .get("t:ht")
            .copied()
            .unwrap_or(0)
            == 0
    })
    .await;
    assert!(ok, "holds never settled");
}

/// Nothing in flight: `n` events in the ledger, the outbox empty.
async fn quiet(env: &TestEnv, n: i64) {
    settled(env).await;
    wait_for_ledger(env, n).await;
    let outbox = format!("{}:{{t:t}}:ob", env.prefix);
    let ok = eventually(Duration::from_secs(10), || async {
        let mut c = env.redis().await;
        let len: i64 = redis::cmd("HLEN")
            .arg(&outbox)
            .query_async(&mut c)
            .await
            .unwrap();
        len == 0
    })
    .await;
    assert!(ok, "the outbox never emptied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_user_past_its_rpm_is_refused_alone_and_the_refusal_changes_nothing() {
    use server::config::AdmissionSetting;
    for mode in [AdmissionSetting::PerRequest, AdmissionSetting::Lease] {
        let limits = domain::attribution::EndUserLimits {
            rpm: Some(5),
            ..Default::default()
        };
        let f = end_user_fixture(limits, mode).await;
        for i in 0..5 {
            let (s, a) = as_end_user(&f, "customer-a").await;
            assert_eq!(s, 200, "{mode:?} request {i}: {a}");
        }
        quiet(&f.env, 5).await;
        let before = tenant_redis(&f.env).await;
        let (s, e) = as_end_user(&f, "customer-a").await;
        assert_eq!(s, 429, "{mode:?}: {e}");
        assert_eq!(e["error"]["code"], "end_user_rpm_exceeded", "{mode:?}: {e}");
        let after = tenant_redis(&f.env).await;
        assert_eq!(before, after, "{mode:?}: the refusal changed a counter");
        // Another end user of the same app is not affected.
        let (s, a) = as_end_user(&f, "customer-b").await;
        assert_eq!(s, 200, "{mode:?}: {a}");
        wait_for_ledger(&f.env, 6).await;
        let per_user: Vec<(String, i64)> =
            sqlx::query_as("SELECT end_user, count(*) FROM usage_events GROUP BY 1 ORDER BY 1")
                .fetch_all(f.env.store.pool())
                .await
                .unwrap();
        assert_eq!(
            per_user,
            vec![("customer-a".into(), 5), ("customer-b".into(), 1)],
            "{mode:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_users_monthly_budget_binds_on_both_admission_paths() {
    use server::config::AdmissionSetting;
    const BUDGET: i64 = 60;
    for mode in [AdmissionSetting::PerRequest, AdmissionSetting::Lease] {
        let limits = domain::attribution::EndUserLimits {
            monthly_tokens: Some(BUDGET),
            ..Default::default()
        };
        let f = end_user_fixture(limits, mode).await;
        let mut answered = 0;
        let mut refusal = Value::Null;
        for _ in 0..20 {
            let (s, a) = as_end_user(&f, "customer-a").await;
            if s == 200 {
                answered += 1;
                settled(&f.env).await;
                continue;
            }
            assert_eq!(s, 402, "{mode:?}: {a}");
            refusal = a;
            break;
        }
        assert!(answered >= 1, "{mode:?}: nothing answered");
        assert_eq!(
            refusal["error"]["code"], "end_user_monthly_budget_exhausted",
            "{mode:?}: {refusal}"
        );
        // Another end user still has its own budget.
        let (s, a) = as_end_user(&f, "customer-b").await;
        assert_eq!(s, 200, "{mode:?}: {a}");
        wait_for_ledger(&f.env, answered + 1).await;
        let used: i64 = sqlx::query_scalar(
            "SELECT COALESCE(sum(input_tokens + output_tokens), 0)::int8 FROM usage_events
             WHERE end_user = 'customer-a'",
        )
        .fetch_one(f.env.store.pool())
        .await
        .unwrap();
        assert!(
            used <= BUDGET,
            "{mode:?}: customer-a used {used} of {BUDGET}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_end_users_per_minute_are_capped() {
    let limits = domain::attribution::EndUserLimits {
        end_users_per_minute: Some(2),
        ..Default::default()
    };
    let f = end_user_fixture(limits, server::config::AdmissionSetting::Lease).await;
    for u in ["u1", "u2", "u1"] {
        let (s, a) = as_end_user(&f, u).await;
        assert_eq!(s, 200, "{u}: {a}");
    }
    quiet(&f.env, 3).await;
    let before = tenant_redis(&f.env).await;
    let (s, e) = as_end_user(&f, "u3").await;
    assert_eq!(s, 429, "{e}");
    assert_eq!(
        e["error"]["code"], "app_end_users_per_minute_exceeded",
        "{e}"
    );
    assert_eq!(
        before,
        tenant_redis(&f.env).await,
        "the refusal changed a counter"
    );
    // The end-user keys expire: Redis memory stays bounded.
    let mut c = f.env.redis().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:{{t:t}}:eu*", f.env.prefix))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(!keys.is_empty());
    for k in keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&k)
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(ttl > 0, "{k} has no expiry ({ttl})");
    }
}

// ------------------------------------------------------ a closed month

/// Tagged events of a past month, some asked for through an alias, billed
/// by tag, by end user and by the name asked for before the rollover
/// (Postgres rollups), after it (ClickHouse `usage_attribution`), and after
/// the purge (ClickHouse alone): the same lines every time, and they sum to
/// the month's bill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_month_is_billed_by_tag_end_user_and_asked_name_from_the_archive() {
    use chrono::{TimeZone, Utc};
    use e2e::books::test_archive;
    use jobs::{JobName, RunResult};
    let env = TestEnv::new().await;
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let archive = test_archive().await;
    let period = "2026-03";
    let events: Vec<domain::usage::UsageEvent> = (0..7)
        .map(|i| {
            let mut tags = domain::attribution::Tags::new();
            match i {
                0..=2 => tags.insert("project".into(), "apollo".into()),
                3..=4 => tags.insert("project".into(), "gemini".into()),
                5 => tags.insert("env".into(), "dev".into()),
                _ => None,
            };
            domain::usage::UsageEvent {
                request_id: format!("req_att_{i}"),
                tenant_id: "t".into(),
                app_id: "a".into(),
                key_id: "k".into(),
                model: "m".into(),
                period: period.into(),
                day: format!("2026-03-0{}", 1 + i % 3),
                input_tokens: 10 + i,
                output_tokens: 5,
                cost_micro: 1_000 * (i + 1),
                cost_pico: 0,
                est_tokens: 20,
                est_cost_micro: 100_000,
                overrun_tokens: 0,
                overrun_cost_micro: 0,
                status: "ok".into(),
                stream: false,
                usage_source: "provider".into(),
                replica: "r".into(),
                started_at_ms: 0,
                settled_at_ms: 0,
                deployment: None,
                breakdown: None,
                charges: None,
                raw_usage: None,
                attribution: domain::attribution::Attribution {
                    tags,
                    end_user: (i % 2 == 0).then(|| format!("user-{}", i % 4)),
                    // Asked through an alias: one with nothing else to
                    // attribute (i = 1), one untagged (i = 6).
                    asked_model: match i {
                        1 | 2 => Some("claude-opus-4-8".into()),
                        6 => Some("gpt-4o".into()),
                        _ => None,
                    },
                    ..Default::default()
                },
                anomaly: None,
            }
        })
        .collect();
    env.store.insert_usage_events(&events).await.unwrap();
    let srv = env.server_with(env.billing_config(&archive)).await;
    let base = format!("http://{}", srv.addr);
    let admin = login(&base, "admin@x.io").await;
    let lines = |group: &'static str| {
        let (base, admin) = (base.clone(), admin.clone());
        async move {
            let (s, b) = api(
                "GET",
                &format!("{base}/api/v1/bills?period={period}&group_by={group}"),
                Some(&admin),
                None,
            )
            .await;
            assert_eq!(s, 200, "{b}");
            (b["source"].clone(), b["lines"].clone())
        }
    };
    // Computed here from the events: cost per project value and per end user.
    let by = |f: &dyn Fn(&domain::usage::UsageEvent) -> Option<String>| {
        let mut m: BTreeMap<Option<String>, i64> = BTreeMap::new();
        for e in &events {
            *m.entry(f(e)).or_default() += e.cost_micro;
        }
        m
    };
    let want_tag = by(&|e| e.attribution.tags.get("project").cloned());
    let want_user = by(&|e| e.attribution.end_user.clone());
    let want_asked = by(&|e| {
        e.attribution
            .asked_model
            .as_ref()
            .map(|a| format!("{a} → {}", e.model))
    });
    assert_eq!(want_asked.len(), 3, "two names asked for and the rest");
    let costs = |lines: &Value| -> BTreeMap<Option<String>, i64> {
        lines
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["value"].as_str().map(str::to_string),
                    micro(l["cost_usd"].as_str().unwrap()),
                )
            })
            .collect()
    };
    let (src, open_tag) = lines("tag:project").await;
    assert_eq!(src, "postgres");
    assert_eq!(costs(&open_tag), want_tag);
    let (_, open_user) = lines("end_user").await;
    assert_eq!(costs(&open_user), want_user);
    let (_, open_asked) = lines("asked_model").await;
    assert_eq!(costs(&open_asked), want_asked);
    // FOCUS rows, sorted (the sources order rows of one day differently).
    let focus = || {
        let (base, admin) = (base.clone(), admin.clone());
        async move {
            let (s, text) = get_text(
                &format!("{base}/api/v1/bills.focus.csv?period={period}"),
                &admin,
            )
            .await;
            assert_eq!(s, 200, "{text}");
            let mut rows = csv_maps(&text);
            rows.sort();
            rows
        }
    };
    let open_focus = focus().await;
    // Cost per tag set, computed here from the events.
    let mut want_focus: BTreeMap<String, i64> = BTreeMap::new();
    for e in &events {
        *want_focus
            .entry(domain::attribution::tags_json(&e.attribution.tags))
            .or_default() += e.cost_micro;
    }
    let focus_costs = |rows: &[BTreeMap<String, String>]| {
        let mut m: BTreeMap<String, i64> = BTreeMap::new();
        for r in rows {
            let tags = if r["Tags"].is_empty() {
                "{}".to_string()
            } else {
                r["Tags"].clone()
            };
            *m.entry(tags).or_default() += micro(&r["BilledCost"]);
        }
        m
    };
    assert_eq!(focus_costs(&open_focus), want_focus, "open month FOCUS");

    let runner = env
        .job_runner(Some(archive.clone()), Default::default(), "replica-a")
        .await;
    let now = Utc.with_ymd_and_hms(2026, 4, 2, 1, 0, 0).unwrap();
    let mut closed = false;
    for _ in 0..30 {
        let run = runner.run(JobName::Rollover, now, None).await.unwrap();
        let RunResult::Ran { report, .. } = &run else {
            panic!("rollover ran: {run:?}")
        };
        if report.counts["closed"] == 1 {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(closed, "the month never closed");
    for later in [now, now + chrono::Duration::days(91)] {
        if later != now {
            let r = runner.run(JobName::Rollover, later, None).await.unwrap();
            let RunResult::Ran { report, .. } = &r else {
                panic!("{r:?}")
            };
            assert_eq!(report.counts["purged"], 1);
        }
        let (src, tag) = lines("tag:project").await;
        assert_eq!(src, "clickhouse");
        assert_eq!(tag, open_tag, "by tag, closed month");
        let (_, user) = lines("end_user").await;
        assert_eq!(user, open_user, "by end user, closed month");
        let (_, asked) = lines("asked_model").await;
        assert_eq!(asked, open_asked, "by the name asked for, closed month");
        let closed_focus = focus().await;
        assert_eq!(
            focus_costs(&closed_focus),
            want_focus,
            "closed month FOCUS tags"
        );
        assert_eq!(
            closed_focus, open_focus,
            "the closed month's FOCUS rows are the open month's"
        );
    }
}

/// The request log by tag and by end user, every outcome alike: an end
/// user refused for their rpm is found under that end user with the tag
/// the refused request carried; a malformed tag filter names the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_log_finds_an_end_users_refusals_and_a_tags_requests() {
    let limits = domain::attribution::EndUserLimits {
        rpm: Some(2),
        ..Default::default()
    };
    let f = end_user_fixture(limits, server::config::AdmissionSetting::PerRequest).await;
    let body = chat_body("hello there", Some(8));
    let mut sent = Vec::new();
    for (user, project) in [
        ("alice", "apollo"),
        ("alice", "apollo"),
        ("alice", "apollo"),
        ("bob", "gemini"),
    ] {
        let tags = format!("project={project}");
        let headers = [
            ("x-tollgate-end-user", user),
            ("x-tollgate-tags", tags.as_str()),
        ];
        sent.push(chat(&f, "/v1/chat/completions", &headers, &body).await.0);
    }
    assert_eq!(sent, [200, 200, 429, 200]);

    let log = |query: &'static str| {
        let (base, admin) = (f.base.clone(), f.admin.clone());
        async move {
            let (s, v) = api(
                "GET",
                &format!("{base}/api/v1/requests?{query}"),
                Some(&admin),
                None,
            )
            .await;
            assert_eq!(s, 200, "{query}: {v}");
            v["data"].as_array().unwrap().clone()
        }
    };
    let stored = eventually(Duration::from_secs(10), || async {
        log("limit=100").await.len() == 4
    })
    .await;
    assert!(stored, "the log never held 4 requests");

    let alice = log("end_user=alice").await;
    let outcomes: Vec<&str> = alice
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["refused", "admitted", "admitted"], "{alice:?}");
    assert_eq!(alice[0]["reason"], "end_user_rpm_exceeded");
    for r in &alice {
        assert_eq!(r["end_user"], "alice", "{r}");
        assert_eq!(r["tags"], json!({"project": "apollo"}), "{r}");
    }
    assert_eq!(log("tag=project:apollo").await.len(), 3);
    let gemini = log("tag=project:gemini").await;
    assert_eq!(gemini.len(), 1);
    assert_eq!(gemini[0]["end_user"], "bob");
    assert_eq!(log("tag=project:apollo&status=refused").await.len(), 1);
    assert_eq!(log("end_user=bob&tag=project:apollo").await.len(), 0);

    let (s, e) = api(
        "GET",
        &format!("{}/api/v1/requests?tag=project", f.base),
        Some(&f.admin),
        None,
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "tag", "{e}");

    // The console's request log filters the same way.
    let w = e2e::console_web::Web::login(&f.base, "admin@x.io").await;
    let page = w.get("/console/requests?end_user=alice").await;
    assert_eq!(page.status, 200);
    assert_eq!(
        page.body.matches("<tr data-request=").count(),
        3,
        "{}",
        page.body
    );
    assert!(page.body.contains(r#"name="end_user" value="alice""#));
    let page = w.get("/console/requests?tag=project%3Agemini").await;
    assert_eq!(page.body.matches("<tr data-request=").count(), 1);
    let page = w.get("/console/requests?tag=project").await;
    assert!(page.body.contains(r#"id="log-bad""#), "{}", page.body);
}

/// Claude Code sends `metadata.user_id` as ~150 bytes of JSON naming its
/// device, account and session: never refused, booked to the account, one
/// end user across sessions. The `x-tollgate-end-user` header stays strict.
#[tokio::test]
async fn claude_codes_metadata_is_booked_to_its_account_across_sessions() {
    let f = fixture().await;
    let account = "5e1c3f0a-7b1d-4c2e-9a8f-0d3b6e2f4a11";
    let mut rids = Vec::new();
    for session in [
        "c0a8012e-0000-4000-8000-000000000001",
        "c0a8012e-0000-4000-8000-000000000002",
    ] {
        let user_id = json!({
            "device_id": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "account_uuid": account,
            "session_id": session,
        })
        .to_string();
        assert!(user_id.len() > 128);
        let msg = json!({"model": "gpt-4o-mini", "max_tokens": 8, "stream": true,
            "metadata": {"user_id": user_id},
            "messages": [{"role": "user", "content": "hi"}]});
        let r = reqwest::Client::new()
            .post(format!("{}/v1/messages", f.base))
            .header("x-api-key", &f.key)
            .header("anthropic-version", "2023-06-01")
            .header("x-tollgate-tags", "project=apollo")
            .json(&msg)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        rids.push(r.headers()["x-request-id"].to_str().unwrap().to_string());
        let body = r.text().await.unwrap();
        assert!(body.contains("message_stop"), "{body}");
    }
    wait_for_ledger(&f.env, 2).await;
    for rid in &rids {
        let e = f.env.usage_event(rid).await.unwrap();
        assert_eq!(e.status, "ok");
        assert_eq!(
            e.attribution.end_user.as_deref(),
            Some(format!("account:{account}").as_str())
        );
    }
    // The header is tollgate's own: still refused past 128 bytes.
    let msg = json!({"model": "gpt-4o-mini", "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}]});
    let long = "u".repeat(200);
    let (s, e) = chat(
        &f,
        "/v1/messages",
        &[
            ("x-tollgate-tags", "project=apollo"),
            ("x-tollgate-end-user", &long),
        ],
        &msg,
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["code"], "invalid_end_user");
}
