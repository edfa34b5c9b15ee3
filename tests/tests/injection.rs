//! Promise 7, second half: SQL-injection and XSS payloads in every admin API
//! field and every console form field are stored and shown inert — read back
//! byte for byte, escaped on every page that shows them — or refused with a
//! 4xx that names the field, changing nothing. Never a 5xx, never raw markup
//! on a page, and the database keeps its tables.
//!
//! Driven by what the server serves, so a new field is covered without
//! touching this file: the OpenAPI document lists the API's state-changing
//! operations and their string fields (bodies, nested objects, arrays, path
//! parameters); a crawl of the console lists its forms and their fields. The
//! tables below give each route and form an otherwise-valid request; the test
//! fails when the server lists a route, form or field they do not cover.
//!
//! Each payload goes in as it is and, when that is refused, after a valid
//! value (`http://host/v1<script>…`, `u1@x.io<script>…`): a format check must
//! not let markup through behind a valid prefix. Every value carries a
//! `~n` tag, so reading it back finds this request's copy and no other.

use domain::Limits;
use e2e::console_web::{Page, Web};
use e2e::hostile::{esc, raw_marker, PAYLOADS};
use e2e::*;
use regex::Regex;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::LazyLock;

// ---------------------------------------------------------------- fixture

struct Platform {
    env: TestEnv,
    srv: server::app::Running,
    base: String,
    admin: String,
    ta: String,
    /// A user whose role the role forms change.
    victim: String,
}

/// Tenant `t` (app `a`), a core tenant `core`, models `gpt-4o-mini` and
/// `cheap`, and users: a platform admin, t's admin, `login@x.io` (whose
/// password the login forms try) and a victim for role changes.
async fn platform() -> Platform {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.model("cheap", "chat", 1_000, 2_000).await;
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    user(&env, "login@x.io", "finance", None).await;
    let victim = user(&env, "victim@x.io", "finance", None).await;
    env.tenant("core", Limits::default(), None).await;
    sqlx::query("UPDATE tenants SET priority = 'core' WHERE id = 'core'")
        .execute(env.store.pool())
        .await
        .unwrap();
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    Platform {
        ta: login(&base, "ta@x.io").await,
        admin: login(&base, "admin@x.io").await,
        victim,
        env,
        srv,
        base,
    }
}

impl Platform {
    /// A pending quota request of tenant t, made by its admin; its id.
    async fn pending_request(&self) -> String {
        let body = json!({"tenant_id": "t", "tokens": 5, "expires_at": "2099-01-01T00:00:00Z", "reason": "x"});
        let url = format!("{}/api/v1/quota-requests", self.base);
        let (status, q) = api("POST", &url, Some(&self.ta), Some(body)).await;
        assert_eq!(status, 201, "{q}");
        q["id"].as_str().unwrap().to_string()
    }

    /// A fresh key of app t/a; its id.
    async fn key(&self) -> String {
        self.env.key("t", "a", Limits::default()).await.0
    }

    /// Every page a platform admin and t's admin reach by links: no payload
    /// markup unescaped.
    async fn sweep(&self, found: &mut Findings) {
        // The hostile sign-ins put 127.0.0.1 in its back-off; the sweep's
        // own sign-ins come from the same address, so its run is ended.
        let run = quota::KeySpace::new(self.env.prefix.clone()).login("ip:127.0.0.1");
        let _: () = redis::cmd("DEL")
            .arg(run)
            .query_async(&mut self.env.redis().await)
            .await
            .unwrap();
        for who in ["admin@x.io", "ta@x.io"] {
            found.no_raw_markup(&crawl(&Web::login(&self.base, who).await).await);
        }
    }
}

/// Every table's content as a digest, to show that a refusal changed
/// nothing; and the tenants stored.
struct Db {
    pool: sqlx::PgPool,
    tables: Vec<String>,
    tenants: i64,
    /// Tenants created since (the runs count what was answered 2xx/3xx).
    created: i64,
}

impl Db {
    async fn new(env: &TestEnv) -> Db {
        let pool = env.store.pool().clone();
        let mut db = Db {
            tables: Self::table_names(&pool).await,
            pool,
            tenants: 0,
            created: 0,
        };
        db.tenants = db.count_tenants().await;
        db
    }

    /// Every table a request could change. `job_runs` is left out: the
    /// server's housekeeping jobs write it on their own schedule (a run
    /// that closed an abandoned hold or freed a lease), not a request.
    async fn table_names(pool: &sqlx::PgPool) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = 'public' AND table_type = 'BASE TABLE'
               AND table_name <> 'job_runs' ORDER BY 1",
        )
        .fetch_all(pool)
        .await
        .unwrap()
    }

    async fn digest(&self) -> BTreeMap<String, String> {
        let sql = self
            .tables
            .iter()
            .map(|t| {
                format!(
                    "SELECT '{t}', md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM \"{t}\" x"
                )
            })
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        sqlx::query_as::<_, (String, String)>(&sql)
            .fetch_all(&self.pool)
            .await
            .unwrap()
            .into_iter()
            .collect()
    }

    /// Tables whose content differs, but for those a refusal may write.
    fn changed(
        before: &BTreeMap<String, String>,
        after: &BTreeMap<String, String>,
        may_write: &[&str],
    ) -> Vec<String> {
        after
            .iter()
            .filter(|(t, h)| before.get(*t) != Some(h) && !may_write.contains(&t.as_str()))
            .map(|(t, _)| t.clone())
            .collect()
    }

    async fn count_tenants(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM tenants")
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// The tables are all still there, and every new tenant row is one a
    /// creation was answered for.
    async fn assert_intact(&self) {
        assert_eq!(Self::table_names(&self.pool).await, self.tables);
        assert_eq!(self.count_tenants().await, self.tenants + self.created);
    }
}

/// What went wrong, all of it, reported at the end.
#[derive(Default)]
struct Findings {
    failures: Vec<String>,
    tried: usize,
    accepted: usize,
    refused: usize,
}

impl Findings {
    fn fail(&mut self, what: &str, value: &str, why: impl std::fmt::Display) {
        self.failures.push(format!("{what} = {value:?}: {why}"));
    }

    fn check(&mut self, ok: bool, what: &str, value: &str, why: impl std::fmt::Display) {
        if !ok {
            self.fail(what, value, why);
        }
    }

    fn no_raw_markup(&mut self, c: &Crawl) {
        println!("{} console pages crawled", c.pages);
        for (page, m) in &c.raw {
            self.fail(page, m, "raw markup on the page");
        }
    }

    fn assert_none(&self, part: &str) {
        println!(
            "{part}: {} values tried, {} stored, {} refused",
            self.tried, self.accepted, self.refused
        );
        assert!(
            self.failures.is_empty(),
            "{part}: {} failures:\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
    }
}

/// The payload as it is, then (tried when that is refused) after a valid
/// value; both tagged with the request's number.
fn variants(valid: &str, payload: &str, n: usize) -> Vec<String> {
    let bare = format!("{payload}~{n}");
    if valid.is_empty() {
        return vec![bare];
    }
    vec![bare, format!("{valid}{payload}~{n}")]
}

/// A path segment, percent-encoded.
fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A path template's `{name}`s replaced from `vars`, percent-encoded.
fn fill(template: &str, vars: &BTreeMap<String, String>) -> String {
    vars.iter().fold(template.to_string(), |t, (k, v)| {
        t.replace(&format!("{{{k}}}"), &segment(v))
    })
}

/// Checks a page's copy of a value: never raw markup; escaped when `shown`.
fn page_shows(page: &str, value: &str) -> Result<bool, String> {
    if let Some(m) = raw_marker(page) {
        return Err(format!("raw {m:?} on the page"));
    }
    if esc(value) != value && page.contains(value) {
        return Err("shown unescaped".into());
    }
    Ok(page.contains(&esc(value)))
}

// ------------------------------------------------------------- admin API

/// A string the OpenAPI document lets a client send.
#[derive(Debug, Clone)]
struct ApiField {
    /// As the API's errors name it: `limits.monthly_cost_usd`,
    /// `allowed_models[0]`, `guarantees[0].tenant_id`, `id`.
    name: String,
    at: At,
    /// What the document says the value must be (enum, pattern, format).
    constraint: Option<String>,
    write_only: bool,
}

#[derive(Debug, Clone)]
enum At {
    Body(Vec<Step>),
    Path(String),
}

#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Each,
}

struct Operation {
    /// `POST /api/v1/tenants`
    id: String,
    fields: Vec<ApiField>,
}

/// Every POST, PUT, PATCH and DELETE of the document with its string
/// fields; panics on a JSON body documented without properties.
fn operations(doc: &Value) -> Vec<Operation> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if !["post", "put", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            let id = format!("{} {path}", method.to_uppercase());
            let mut fields = Vec::new();
            for p in op["parameters"].as_array().into_iter().flatten() {
                if p["in"] == "path" && p["schema"]["type"] == "string" {
                    let name = p["name"].as_str().unwrap().to_string();
                    fields.push(ApiField {
                        at: At::Path(name.clone()),
                        constraint: constraint(&p["schema"]),
                        write_only: false,
                        name,
                    });
                }
            }
            let schema = &op["requestBody"]["content"]["application/json"]["schema"];
            if !schema.is_null() {
                strings(doc, &id, schema, &mut Vec::new(), &mut fields);
            }
            ops.push(Operation { id, fields });
        }
    }
    ops
}

fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => {
            let name = r.strip_prefix("#/components/schemas/").expect("local $ref");
            &doc["components"]["schemas"][name]
        }
        None => schema,
    }
}

/// The string leaves of a schema, with their paths. Panics on a schema it
/// cannot see into (an object without properties, a union, no type): no
/// field goes untried unnoticed.
fn strings(doc: &Value, op: &str, schema: &Value, at: &mut Vec<Step>, out: &mut Vec<ApiField>) {
    let schema = resolve(doc, schema);
    let unknown = |what: &str| -> ! { panic!("{op} body {:?}: {what}", api_name(at)) };
    match schema["type"].as_str() {
        // A map of strings (`additionalProperties`): tried under the key of
        // its documented `example`.
        Some("object")
            if schema["properties"].is_null() && schema["additionalProperties"].is_object() =>
        {
            let key = schema["example"].as_object().and_then(|o| o.keys().next());
            let key = key.unwrap_or_else(|| unknown("a map without an example key"));
            at.push(Step::Key(key.clone()));
            strings(doc, op, &schema["additionalProperties"], at, out);
            at.pop();
        }
        Some("object") => {
            let props = schema["properties"].as_object().filter(|p| !p.is_empty());
            let props = props.unwrap_or_else(|| unknown("an object without documented properties"));
            for (k, sub) in props {
                at.push(Step::Key(k.clone()));
                strings(doc, op, sub, at, out);
                at.pop();
            }
        }
        Some("array") => {
            at.push(Step::Each);
            strings(doc, op, &schema["items"], at, out);
            at.pop();
        }
        Some("string") => out.push(ApiField {
            name: api_name(at),
            at: At::Body(at.clone()),
            constraint: constraint(schema),
            write_only: schema["writeOnly"] == true,
        }),
        Some("integer" | "number" | "boolean") => {}
        _ => unknown(&format!("a schema this test cannot see into: {schema}")),
    }
}

fn api_name(at: &[Step]) -> String {
    let mut s = String::new();
    for step in at {
        match step {
            Step::Key(k) if s.is_empty() => s.push_str(k),
            Step::Key(k) => s.push_str(&format!(".{k}")),
            Step::Each => s.push_str("[0]"),
        }
    }
    s
}

fn constraint(schema: &Value) -> Option<String> {
    ["enum", "pattern", "format"]
        .into_iter()
        .find(|c| !schema[*c].is_null())
        .map(|c| format!("{c} {}", schema[c]))
}

/// The value at `at` in `body`, if the body has one there.
fn get<'a>(body: &'a Value, at: &[Step]) -> Option<&'a Value> {
    at.iter().try_fold(body, |v, step| match step {
        Step::Key(k) => v.get(k),
        Step::Each => v.get(0),
    })
}

fn set(body: &mut Value, at: &[Step], value: &str) {
    let slot = at.iter().fold(body, |v, step| match step {
        Step::Key(k) => &mut v[k.as_str()],
        Step::Each => &mut v[0],
    });
    *slot = Value::String(value.into());
}

/// `{n}` in every string of a body template.
fn numbered(v: &Value, n: usize) -> Value {
    match v {
        Value::String(s) => Value::String(s.replace("{n}", &n.to_string())),
        Value::Array(a) => Value::Array(a.iter().map(|x| numbered(x, n)).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, x)| (k.clone(), numbered(x, n))).collect())
        }
        other => other.clone(),
    }
}

fn has_string(v: &Value, f: &dyn Fn(&str) -> bool) -> bool {
    match v {
        Value::String(s) => f(s),
        Value::Array(a) => a.iter().any(|x| has_string(x, f)),
        Value::Object(o) => o.iter().any(|(k, x)| f(k) || has_string(x, f)),
        _ => false,
    }
}

/// Where a path parameter's valid value comes from.
#[derive(Clone, Copy)]
enum Param {
    Fixed(&'static str),
    PendingRequest,
    FreshKey,
    Victim,
    /// The newest limits version of the owner the earlier parameters name
    /// (the route's path up to `/versions`).
    LimitVersion,
}

/// How to send a valid request to one operation, and where what it stores
/// can be seen.
struct Route {
    op: &'static str,
    params: &'static [(&'static str, Param)],
    /// A valid body (`{n}` numbers what must be unique); Null: none.
    body: Value,
    /// Where stored values read back (`{id}`: path parameters, `{body.id}`);
    /// "": the audit log, which records every change with its values.
    read: &'static str,
    /// Console pages that show the route's values.
    pages: &'static [&'static str],
    /// Stored, but on no console page, and why.
    not_shown: &'static [(&'static str, &'static str)],
    /// Fields stored trimmed and lower-cased.
    lowered: &'static [&'static str],
    /// Sent without a token; refusals name no field, by design (a failed
    /// login does not say which of email and password was wrong), and are
    /// audited.
    login: bool,
}

/// The table's request for `op` that carries `field` (an operation may have
/// several: a model is created with top-level upstream fields or with
/// `deployments`, never both).
fn route_for<'a>(routes: &'a [Route], op: &str, field: &ApiField) -> Option<&'a Route> {
    routes
        .iter()
        .filter(|r| r.op == op)
        .find(|r| match &field.at {
            At::Body(at) => get(&r.body, at).is_some_and(Value::is_string),
            At::Path(name) => r.params.iter().any(|(p, _)| p == name),
        })
}

/// Logging out and changing one's password end the caller's sessions.
const ENDS_SESSION: [&str; 2] = ["POST /api/v1/auth/logout", "POST /api/v1/auth/password"];

fn routes() -> Vec<Route> {
    const NONE: &[(&str, &str)] = &[];
    let limits = json!({"monthly_cost_usd": "10", "daily_cost_soft_usd": "1"});
    let route = |op, params, body, read, pages| Route {
        op,
        params,
        body,
        read,
        pages,
        not_shown: NONE,
        lowered: &[],
        login: false,
    };
    let decide = |op| {
        let note = json!({"note": "note {n}"});
        let pages: &[&str] = &["/console/quota-requests"];
        route(
            op,
            &[("id", Param::PendingRequest)],
            note,
            "/api/v1/quota-requests",
            pages,
        )
    };
    vec![
        Route {
            login: true,
            lowered: &["email"],
            ..route(
                "POST /api/v1/auth/login",
                &[],
                json!({"email": "login@x.io", "password": PASSWORD}),
                "",
                &["/console/audit"],
            )
        },
        Route {
            lowered: &["email"],
            ..route(
                "POST /api/v1/users",
                &[],
                json!({"email": "u{n}@x.io", "password": "long enough password", "role": "tenant_admin", "tenant_id": "t"}),
                "",
                &["/console/users"],
            )
        },
        route(
            "POST /api/v1/users/{id}/role",
            &[("id", Param::Victim)],
            json!({"role": "tenant_admin", "tenant_id": "t"}),
            "",
            &["/console/users"],
        ),
        route(
            "POST /api/v1/users/{id}/disable",
            &[("id", Param::Victim)],
            json!({"disabled": false}),
            "",
            &["/console/users"],
        ),
        route(
            "POST /api/v1/models",
            &[],
            json!({"id": "m-{n}", "kind": "chat", "upstream_base_url": "http://127.0.0.1:9/v1",
                "upstream_model": "up-{n}", "upstream_api_key": "sk-up-{n}",
                "input_price_per_mtok_usd": "1.5", "output_price_per_mtok_usd": "2",
                "tokenizer": "o200k", "default_max_output_tokens": 64,
                "cap_field": "max_tokens", "hidden_reasoning": false, "apis": ["chat"]}),
            "",
            &["/console/models"],
        ),
        route(
            "POST /api/v1/models",
            &[],
            json!({"id": "md-{n}", "kind": "chat",
                "input_price_per_mtok_usd": "1.5", "output_price_per_mtok_usd": "2",
                "deployments": [{"name": "d{n}", "upstream_base_url": "http://127.0.0.1:9/v1",
                    "upstream_model": "up-{n}", "upstream_api_key": "sk-dep-{n}", "weight": 1,
                    "priority": 0, "cap_field": "max_tokens", "hidden_reasoning": false,
                    "apis": ["chat"]}],
                "fallbacks": ["cheap"]}),
            "",
            &["/console/models"],
        ),
        route(
            "PUT /api/v1/models/{id}/deployments/{name}",
            &[
                ("id", Param::Fixed("gpt-4o-mini")),
                ("name", Param::Fixed("inj")),
            ],
            json!({"name": "inj", "upstream_base_url": "http://127.0.0.1:9/v1", "upstream_model": "up-{n}",
                "upstream_api_key": "sk-dep-{n}", "weight": 1, "priority": 5,
                "cap_field": "max_tokens", "hidden_reasoning": false, "apis": ["chat"]}),
            "",
            &["/console/models"],
        ),
        route(
            "PATCH /api/v1/models/{id}/deployments/{name}",
            &[
                ("id", Param::Fixed("gpt-4o-mini")),
                ("name", Param::Fixed("inj")),
            ],
            json!({"enabled": true}),
            "",
            &["/console/models"],
        ),
        route(
            "PUT /api/v1/models/{id}/fallbacks",
            &[("id", Param::Fixed("gpt-4o-mini"))],
            json!({"fallbacks": ["cheap"]}),
            "",
            &["/console/models"],
        ),
        route(
            "PATCH /api/v1/models/{id}",
            &[("id", Param::Fixed("gpt-4o-mini"))],
            json!({"cap_field": "max_tokens", "hidden_reasoning": false, "apis": ["chat"]}),
            "/api/v1/models/{id}",
            &["/console/models"],
        ),
        route(
            "POST /api/v1/tenants",
            &[],
            json!({"id": "inj-{n}", "name": "Tenant {n}", "cost_center": "CC-{n}", "priority": "standard",
                "limits": limits, "allowed_models": ["gpt-4o-mini"]}),
            "/api/v1/tenants/{body.id}",
            &["/console/tenants", "/console/tenants/{body.id}"],
        ),
        route(
            "PATCH /api/v1/tenants/{id}",
            &[("id", Param::Fixed("t"))],
            json!({"name": "T {n}", "cost_center": "CC-{n}", "priority": "standard",
                "limits": limits, "allowed_models": ["gpt-4o-mini"]}),
            "/api/v1/tenants/{id}",
            &["/console/tenants", "/console/tenants/{id}"],
        ),
        Route {
            not_shown: &[("allowed_models[0]", "the apps page lists no app's models")],
            ..route(
                "POST /api/v1/tenants/{id}/apps",
                &[("id", Param::Fixed("t"))],
                json!({"id": "app-{n}", "name": "App {n}", "limits": limits, "allowed_models": ["gpt-4o-mini"],
                    "attribution": {"default_tags": {"env": "prod"}, "required_tags": ["project"],
                        "end_user_limits": {"rpm": 5, "monthly_cost_usd": "1.5"}}}),
                "",
                &["/console/tenants/{id}/apps"],
            )
        },
        Route {
            not_shown: &[("allowed_models[0]", "the apps page lists no key's models")],
            ..route(
                "POST /api/v1/tenants/{id}/apps/{app}/keys",
                &[("id", Param::Fixed("t")), ("app", Param::Fixed("a"))],
                json!({"name": "key {n}", "expires_at": "2099-01-01T00:00:00Z", "limits": limits,
                    "allowed_models": ["gpt-4o-mini"]}),
                "",
                &["/console/tenants/{id}/apps"],
            )
        },
        route(
            "DELETE /api/v1/keys/{id}",
            &[("id", Param::FreshKey)],
            Value::Null,
            "",
            &[],
        ),
        route(
            "POST /api/v1/quota-requests",
            &[],
            json!({"tenant_id": "t", "app_id": "a", "tokens": 5, "cost_usd": "1.5",
                "expires_at": "2099-01-01T00:00:00Z", "reason": "launch {n}"}),
            "/api/v1/quota-requests",
            &["/console/quota-requests"],
        ),
        decide("POST /api/v1/quota-requests/{id}/approve"),
        decide("POST /api/v1/quota-requests/{id}/reject"),
        route(
            "POST /api/v1/tenants/{id}/limits/versions/{version}/restore",
            &[("id", Param::Fixed("t")), ("version", Param::LimitVersion)],
            json!({"reason": "rollback {n}"}),
            "",
            &["/console/tenants/{id}/limits"],
        ),
        route(
            "POST /api/v1/tenants/{id}/apps/{app}/limits/versions/{version}/restore",
            &[
                ("id", Param::Fixed("t")),
                ("app", Param::Fixed("a")),
                ("version", Param::LimitVersion),
            ],
            json!({"reason": "rollback {n}"}),
            "",
            &["/console/tenants/{id}/apps/{app}/limits"],
        ),
        route(
            "POST /api/v1/keys/{id}/limits/versions/{version}/restore",
            &[("id", Param::FreshKey), ("version", Param::LimitVersion)],
            json!({"reason": "rollback {n}"}),
            "",
            &["/console/keys/{id}/limits"],
        ),
        route(
            "PUT /api/v1/pool",
            &[],
            json!({"monthly_tokens": 1000, "monthly_cost_usd": "10", "max_borrow_share": 0.05,
                "reclaim_below_share": 0.2}),
            "/api/v1/pool",
            &["/console/borrowing"],
        ),
        route(
            "PUT /api/v1/models/{id}/fairness",
            &[("id", Param::Fixed("gpt-4o-mini"))],
            json!({"degrade_to": "cheap", "pool_capacity": 10, "guarantees": [{"tenant_id": "core", "slots": 1}]}),
            "",
            &["/console/models"],
        ),
    ]
}

struct ApiRun<'a> {
    p: &'a Platform,
    web: Web,
    db: Db,
    found: Findings,
}

impl ApiRun<'_> {
    /// Valid path parameters (a pending request or a key made for the
    /// request when the route needs one).
    async fn params(&self, route: &Route) -> BTreeMap<String, String> {
        let mut vars = BTreeMap::new();
        for (name, param) in route.params {
            let v = match param {
                Param::Fixed(v) => v.to_string(),
                Param::PendingRequest => self.p.pending_request().await,
                Param::FreshKey => self.p.key().await,
                Param::Victim => self.p.victim.clone(),
                Param::LimitVersion => {
                    let (_, path) = route.op.split_once(' ').unwrap();
                    let list = &path[..path.find("/versions").unwrap() + "/versions".len()];
                    let url = format!("{}{}", self.p.base, fill(list, &vars));
                    let (status, h) = api("GET", &url, Some(&self.p.admin), None).await;
                    assert_eq!(status, 200, "{url}: {h}");
                    h["versions"][0]["version"].to_string()
                }
            };
            vars.insert(name.to_string(), v);
        }
        vars
    }

    /// The route's valid request numbered `n`, with `field` set to `value`;
    /// adds `body.id` to `vars`.
    async fn send(
        &mut self,
        route: &Route,
        field: Option<&ApiField>,
        value: &str,
        n: usize,
        vars: &mut BTreeMap<String, String>,
    ) -> (u16, Value) {
        let mut body = numbered(&route.body, n);
        match field.map(|f| &f.at) {
            Some(At::Body(at)) => set(&mut body, at, value),
            Some(At::Path(name)) => {
                vars.insert(name.clone(), value.to_string());
            }
            None => {}
        }
        if let Some(id) = body["id"].as_str() {
            vars.insert("body.id".into(), id.to_string());
        }
        let (method, path) = route.op.split_once(' ').unwrap();
        let url = format!("{}{}", self.p.base, fill(path, vars));
        let token = (!route.login).then_some(self.p.admin.as_str());
        let (status, resp) = api(method, &url, token, (!body.is_null()).then_some(body)).await;
        if route.op == "POST /api/v1/tenants" && status == 200 {
            self.db.created += 1;
        }
        (status, resp)
    }

    /// One hostile value in one field; true when it was stored.
    async fn try_value(&mut self, route: &Route, field: &ApiField, value: &str, n: usize) -> bool {
        let what = format!("{} {}", route.op, field.name);
        self.found.tried += 1;
        let mut vars = self.params(route).await;
        let before = self.db.digest().await;
        let (status, resp) = self.send(route, Some(field), value, n, &mut vars).await;
        match status {
            200..=299 => {
                self.found.accepted += 1;
                self.stored(route, field, value, &resp, &vars).await;
                true
            }
            400..=499 => {
                self.found.refused += 1;
                self.refused(route, field, value, (status, &resp), &before)
                    .await;
                false
            }
            s => {
                self.found
                    .fail(&what, value, format!("answered {s}: {resp}"));
                false
            }
        }
    }

    /// Reads back byte for byte (a write-only value: never), shown escaped
    /// on the route's pages.
    async fn stored(
        &mut self,
        route: &Route,
        field: &ApiField,
        value: &str,
        resp: &Value,
        vars: &BTreeMap<String, String>,
    ) {
        let what = &format!("{} {}", route.op, field.name);
        if route.login {
            return self.found.fail(what, value, "a hostile login succeeded");
        }
        if let Some(rule) = &field.constraint {
            self.found.fail(
                what,
                value,
                format!("stored although the document says {rule}"),
            );
        }
        let expected = if route.lowered.contains(&field.name.as_str()) {
            value.trim().to_lowercase()
        } else {
            value.to_string()
        };
        let read = Some(route.read)
            .filter(|r| !r.is_empty())
            .unwrap_or("/api/v1/audit");
        let url = format!("{}{}", self.p.base, fill(read, vars));
        let (status, stored) = api("GET", &url, Some(&self.p.admin), None).await;
        self.found
            .check(status == 200, what, value, format!("GET {read}: {status}"));
        if field.write_only {
            let leaked = |v: &Value| has_string(v, &|s| s.contains(value));
            let returned = leaked(&stored) || leaked(resp);
            self.found
                .check(!returned, what, value, "a write-only value was returned");
        } else {
            let back = has_string(&stored, &|s| s == expected);
            self.found.check(
                back,
                what,
                value,
                format!("not read back byte for byte from {read}"),
            );
        }
        let mut shown = false;
        for page in route.pages {
            let path = fill(page, vars);
            let got = self.web.get(&path).await;
            self.found.check(
                got.status == 200,
                what,
                value,
                format!("{path}: {}", got.status),
            );
            match page_shows(&got.body, &expected) {
                Ok(s) => shown |= s,
                Err(e) => self.found.fail(what, value, format!("{path}: {e}")),
            }
        }
        if field.write_only {
            self.found
                .check(!shown, what, value, "a write-only value is on a page");
        } else if !route.not_shown.iter().any(|(f, _)| *f == field.name) {
            self.found.check(
                shown,
                what,
                value,
                format!("stored, on none of {:?}", route.pages),
            );
        }
    }

    /// A JSON error naming the field, and nothing changed.
    async fn refused(
        &mut self,
        route: &Route,
        field: &ApiField,
        value: &str,
        (status, resp): (u16, &Value),
        before: &BTreeMap<String, String>,
    ) {
        let what = &format!("{} {}", route.op, field.name);
        let e = &resp["error"];
        let message = e["message"].as_str().unwrap_or("");
        let json = !message.is_empty() && e["code"].is_string();
        self.found.check(
            json,
            what,
            value,
            format!("{status} without a JSON error: {resp}"),
        );
        let named = e["param"] == field.name.as_str()
            || (status == 404 && message.contains(value))
            || route.login;
        self.found.check(
            named,
            what,
            value,
            format!("{status} names no field: {resp}"),
        );
        let may_write: &[&str] = if route.login { &["audit_log"] } else { &[] };
        let changed = Db::changed(before, &self.db.digest().await, may_write);
        let why = format!("refused with {status}, yet changed {changed:?}");
        self.found.check(changed.is_empty(), what, value, why);
        // A failed login is audited: the audit page shows it escaped.
        for page in route.pages.iter().filter(|_| route.login) {
            if let Err(e) = page_shows(&self.web.get(page).await.body, value) {
                self.found.fail(what, value, format!("{page}: {e}"));
            }
        }
    }
}

#[tokio::test]
async fn every_api_string_field_is_stored_inert_or_refused_by_name() {
    let p = platform().await;
    let doc: Value = reqwest::get(format!("{}/api/v1/openapi.json", p.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // Operations that end the caller's own sessions (every request here
    // is the platform admin's) are left to console_security.rs.
    let ops: Vec<Operation> = operations(&doc)
        .into_iter()
        .filter(|o| !ENDS_SESSION.contains(&o.id.as_str()))
        .collect();
    let routes = routes();
    // Coverage: every documented operation and field has a valid request
    // in the table, and the table names nothing the document does not.
    let documented: BTreeSet<&str> = ops.iter().map(|o| o.id.as_str()).collect();
    for r in &routes {
        assert!(documented.contains(r.op), "{}: not in the document", r.op);
    }
    for op in &ops {
        assert!(
            routes.iter().any(|r| r.op == op.id),
            "{}: no valid request in the table",
            op.id
        );
        for f in &op.fields {
            assert!(
                route_for(&routes, &op.id, f).is_some(),
                "{} {}: no valid value in the table",
                op.id,
                f.name
            );
        }
    }
    let fields: usize = ops.iter().map(|o| o.fields.len()).sum();
    println!("{} operations, {fields} string fields", ops.len());

    let db = Db::new(&p.env).await;
    let mut run = ApiRun {
        web: Web::login(&p.base, "admin@x.io").await,
        db,
        p: &p,
        found: Findings::default(),
    };
    // The deployment the PATCH of the table enables (made before the sweep:
    // operations run in the document's order).
    let (status, made) = api(
        "PUT",
        &format!("{}/api/v1/models/gpt-4o-mini/deployments/inj", p.base),
        Some(&p.admin),
        Some(
            json!({"upstream_base_url": "http://127.0.0.1:9/v1", "upstream_model": "up-inj",
            "priority": 5}),
        ),
    )
    .await;
    assert!((200..300).contains(&status), "{made}");
    let mut n = 0;
    for op in &ops {
        for route in routes.iter().filter(|r| r.op == op.id) {
            n += 1;
            let mut vars = run.params(route).await;
            let (status, resp) = run.send(route, None, "", n, &mut vars).await;
            assert!(
                (200..300).contains(&status),
                "{}: the table's request is refused: {resp}",
                op.id
            );
        }
        for field in &op.fields {
            let route = route_for(&routes, &op.id, field).unwrap();
            let template = match &field.at {
                At::Body(at) => get(&route.body, at).unwrap().as_str().unwrap(),
                At::Path(_) => "",
            };
            for payload in PAYLOADS {
                n += 1;
                let valid = template.replace("{n}", &n.to_string());
                for value in variants(&valid, payload, n) {
                    if run.try_value(route, field, &value, n).await {
                        break;
                    }
                }
            }
        }
    }
    // The database kept its tables, and every tenant row is one created here.
    run.db.assert_intact().await;
    let (_, chain) = api(
        "GET",
        &format!("{}/api/v1/audit/verify", p.base),
        Some(&p.admin),
        None,
    )
    .await;
    assert_eq!(chain["intact"], true, "{chain}");
    p.sweep(&mut run.found).await;
    run.found.assert_none("admin API");
    p.srv.shutdown().await;
}

// --------------------------------------------------------------- console

static FORM: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?s)<form\b([^>]*)>(.*?)</form>").unwrap());
static CONTROL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"<(?:input|textarea|select|button)\b([^>]*)>").unwrap());
static ATTR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"([a-zA-Z_-]+)(?:="([^"]*)"|='([^']*)')?"#).unwrap());
static LINK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r##"href="(/console[^"#]*)""##).unwrap());

fn unescape(s: &str) -> String {
    s.replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&#38;", "&")
        .replace("&amp;", "&")
}

fn attrs(s: &str) -> BTreeMap<String, String> {
    ATTR.captures_iter(s)
        .map(|c| {
            let v = c.get(2).or(c.get(3)).map_or("", |m| m.as_str());
            (c[1].to_string(), unescape(v))
        })
        .collect()
}

/// A form as a page has it: where it goes and the fields it sends.
#[derive(Debug, Clone)]
struct PageForm {
    method: String,
    action: String,
    /// The names of its inputs, text areas, selects and buttons.
    fields: Vec<String>,
}

fn forms_of(html: &str) -> Vec<PageForm> {
    let mut out = Vec::new();
    for f in FORM.captures_iter(html) {
        let a = attrs(&f[1]);
        let mut fields = Vec::new();
        let mut actions = vec![a.get("action").cloned().unwrap_or_default()];
        for c in CONTROL.captures_iter(&f[2]) {
            let ca = attrs(&c[1]);
            if let Some(to) = ca.get("formaction") {
                actions.push(to.clone());
            }
            let Some(name) = ca.get("name").filter(|n| *n != "_csrf") else {
                continue;
            };
            if !fields.contains(name) {
                fields.push(name.clone());
            }
        }
        for action in actions {
            out.push(PageForm {
                method: a.get("method").cloned().unwrap_or_else(|| "get".into()),
                action,
                fields: fields.clone(),
            });
        }
    }
    out
}

struct Crawl {
    pages: usize,
    forms: Vec<PageForm>,
    /// Pages with payload markup on them unescaped, and the markup.
    raw: Vec<(String, &'static str)>,
}

/// Every console page reachable from the dashboard by links and redirects
/// (CSV exports aside), and the forms on them.
async fn crawl(web: &Web) -> Crawl {
    let mut seen = BTreeSet::new();
    let mut queue = VecDeque::from(["/console".to_string()]);
    let (mut forms, mut raw) = (Vec::new(), Vec::new());
    while let Some(path) = queue.pop_front() {
        if seen.len() >= 400 || !seen.insert(path.clone()) {
            continue;
        }
        let page = web.get(&path).await;
        assert!(page.status < 500, "{path}: {}", page.status);
        if let Some(to) = page.location.filter(|to| to.starts_with("/console")) {
            queue.push_back(to);
        }
        if page.status != 200 {
            continue;
        }
        for l in LINK.captures_iter(&page.body) {
            let link = unescape(&l[1]);
            if !link.contains(".csv") {
                queue.push_back(link);
            }
        }
        forms.extend(forms_of(&page.body));
        raw.extend(raw_marker(&page.body).map(|m| (path, m)));
    }
    Crawl {
        pages: seen.len(),
        forms,
        raw,
    }
}

/// Where a form's values are shown, and how.
#[derive(Clone, Copy, PartialEq)]
enum Shown {
    /// As typed.
    Same,
    /// Trimmed and lower-cased (emails).
    Lower,
    /// Split at commas and spaces, joined with ", " (model lists).
    List,
    /// Never: secrets, check boxes, hidden fields the server ignores.
    Never,
}

/// What a form's action has in its `{}` segments.
#[derive(Clone, Copy)]
enum Target {
    /// Tenant t, then its app a.
    TenantApp,
    /// A pending quota request, made for the request.
    Request,
    /// The victim user.
    Victim,
    /// Model gpt-4o-mini's deployment `inj` (made by the form before it).
    ModelDeployment,
    /// Tenant t, then the oldest version of its limits (an earlier one,
    /// whose restore form the history shows).
    TenantLimitVersion,
}

struct FormCase {
    /// The form's action, `{}` standing for one path segment.
    pattern: &'static str,
    method: &'static str,
    /// What the request fills the `{}`s with.
    target: Target,
    signed_in: bool,
    /// A valid value for every field (`{n}` numbers what must be unique).
    base: Vec<(&'static str, &'static str)>,
    /// Pages that show what the form stores (`{id}`: the `id` field);
    /// `<answer>`: the form's own answer (filters echo what was typed).
    pages: &'static [&'static str],
    /// How each field is shown; unlisted fields as typed.
    shown: &'static [(&'static str, Shown)],
    /// Refusals may write these tables (failed logins are audited).
    refusal_writes: &'static [&'static str],
}

const LIMITS: [(&str, &str); 9] = [
    ("monthly_tokens", "1000"),
    ("monthly_cost_usd", "10"),
    ("daily_cost_soft_usd", "1"),
    ("rpm", "60"),
    ("input_tpm", "1000"),
    ("output_tpm", "1000"),
    ("max_inflight", "4"),
    ("max_context_tokens", "8000"),
    ("max_output_tokens", "500"),
];

/// `fields` and the limit fields every limits form has.
fn with_limits(fields: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    [fields, &LIMITS].concat()
}

/// The tenant form, creating (`id`: a new one) or editing (`id`: t).
fn tenant_form(id: &'static str, name: &'static str) -> Vec<(&'static str, &'static str)> {
    with_limits(&[
        ("id", id),
        ("name", name),
        ("cost_center", "CC-{n}"),
        ("priority", "standard"),
        ("may_borrow", "on"),
        ("borrow_cap_tokens", "100"),
        ("clamp_max_tokens", "on"),
        ("allowed_models", "gpt-4o-mini"),
    ])
}

const TENANT_SHOWN: &[(&str, Shown)] = &[
    ("allowed_models", Shown::List),
    ("may_borrow", Shown::Never),
    ("clamp_max_tokens", Shown::Never),
];

/// The edit form's `id` is the path's: what is typed there is ignored.
const TENANT_EDIT_SHOWN: &[(&str, Shown)] = &[
    ("id", Shown::Never),
    ("allowed_models", Shown::List),
    ("may_borrow", Shown::Never),
    ("clamp_max_tokens", Shown::Never),
];

fn form_cases() -> Vec<FormCase> {
    let case = |pattern, base: &[_], pages| FormCase {
        pattern,
        method: "post",
        target: Target::TenantApp,
        signed_in: true,
        base: base.to_vec(),
        pages,
        shown: &[],
        refusal_writes: &[],
    };
    let decide = |pattern| FormCase {
        target: Target::Request,
        ..case(
            pattern,
            &[("note", "note {n}")],
            &["/console/quota-requests"],
        )
    };
    vec![
        FormCase {
            signed_in: false,
            shown: &[("password", Shown::Never)],
            refusal_writes: &["audit_log"],
            ..case(
                "/console/login",
                &[("email", "login@x.io"), ("password", PASSWORD)],
                &["<answer>"],
            )
        },
        FormCase {
            shown: &[("lang", Shown::Never), ("back", Shown::Never)],
            ..case(
                "/console/lang",
                &[("lang", "en"), ("back", "/console")],
                &[],
            )
        },
        FormCase {
            shown: TENANT_SHOWN,
            ..case(
                "/console/tenants",
                &tenant_form("cf-{n}", "Tenant {n}"),
                &["/console/tenants", "/console/tenants/{id}"],
            )
        },
        FormCase {
            shown: TENANT_EDIT_SHOWN,
            ..case(
                "/console/tenants/{}",
                &tenant_form("t", "T {n}"),
                &["/console/tenants", "/console/tenants/t"],
            )
        },
        // The apps page lists no app's or key's models (the audit log has them).
        FormCase {
            shown: &[("allowed_models", Shown::Never)],
            ..case(
                "/console/tenants/{}/apps",
                &with_limits(&[
                    ("id", "capp-{n}"),
                    ("name", "App {n}"),
                    ("allowed_models", "gpt-4o-mini"),
                ]),
                &["/console/tenants/t/apps"],
            )
        },
        FormCase {
            shown: &[("allowed_models", Shown::Never)],
            ..case(
                "/console/tenants/{}/apps/{}/keys",
                &[
                    ("name", "key {n}"),
                    ("expires_at", "2099-01-01T00:00"),
                    ("allowed_models", "gpt-4o-mini"),
                ],
                &["/console/tenants/t/apps"],
            )
        },
        FormCase {
            target: Target::TenantLimitVersion,
            ..case(
                "/console/tenants/{}/limits/{}/restore",
                &[("reason", "rollback {n}")],
                &["/console/tenants/t/limits"],
            )
        },
        case(
            "/console/quota-requests",
            &[
                ("tenant_id", "t"),
                ("app_id", "a"),
                ("tokens", "10"),
                ("cost_usd", "1.5"),
                ("expires_at", "2099-01-01T00:00"),
                ("reason", "launch {n}"),
            ],
            &["/console/quota-requests"],
        ),
        decide("/console/quota-requests/{}/approve"),
        decide("/console/quota-requests/{}/reject"),
        FormCase {
            shown: &[("upstream_api_key", Shown::Never)],
            ..case(
                "/console/models",
                &[
                    ("id", "cm-{n}"),
                    ("kind", "chat"),
                    ("upstream_base_url", "http://127.0.0.1:9/v1"),
                    ("upstream_model", "up-{n}"),
                    ("upstream_api_key", "sk-up-{n}"),
                    ("input_price_per_mtok_usd", "1.5"),
                    ("output_price_per_mtok_usd", "2"),
                    ("default_max_output_tokens", "64"),
                    ("cap_field", "max_tokens"),
                    ("hidden_reasoning", "false"),
                ],
                &["/console/models"],
            )
        },
        FormCase {
            shown: &[("upstream_api_key", Shown::Never)],
            ..case(
                "/console/models/deployments",
                &[
                    ("model", "gpt-4o-mini"),
                    ("name", "inj"),
                    ("upstream_base_url", "http://127.0.0.1:9/v1"),
                    ("upstream_model", "up-{n}"),
                    ("upstream_api_key", "sk-dep-{n}"),
                    ("weight", "1"),
                    ("priority", "5"),
                    ("max_inflight", "4"),
                ],
                &["/console/models"],
            )
        },
        FormCase {
            target: Target::ModelDeployment,
            shown: &[("enabled", Shown::Never)],
            ..case(
                "/console/models/{}/deployments/{}/enabled",
                &[("enabled", "true")],
                &["/console/models"],
            )
        },
        FormCase {
            shown: &[("email", Shown::Lower), ("password", Shown::Never)],
            ..case(
                "/console/users",
                &[
                    ("email", "cu{n}@x.io"),
                    ("password", "long enough password"),
                    ("role", "tenant_admin"),
                    ("tenant_id", "t"),
                ],
                &["/console/users"],
            )
        },
        FormCase {
            target: Target::Victim,
            ..case(
                "/console/users/{}/role",
                &[("role", "tenant_admin"), ("tenant_id", "t")],
                &["/console/users"],
            )
        },
        FormCase {
            method: "get",
            ..case(
                "/console/audit",
                &[
                    ("actor", "user"),
                    ("action", "tenant"),
                    ("target", "t"),
                    ("from", "2000-01-01T00:00"),
                    ("to", "2099-01-01T00:00"),
                ],
                &["<answer>"],
            )
        },
        FormCase {
            method: "get",
            // The lookup (id) and the log's filters (id empty) share
            // the address.
            ..case(
                "/console/requests",
                &[
                    ("id", ""),
                    ("tenant", "t"),
                    ("key", ""),
                    ("model", "gpt-4o-mini"),
                    ("status", "ok"),
                    ("reason", "model_not_found"),
                    ("from", "2000-01-01T00:00"),
                    ("to", "2099-01-01T00:00"),
                ],
                &["<answer>"],
            )
        },
        FormCase {
            method: "get",
            ..case(
                "/console/bills",
                &[("period", "2026-01"), ("tenant", "t")],
                &["<answer>"],
            )
        },
    ]
}

/// Forms that send nothing but the CSRF token: no field to try.
const FIELDLESS: [&str; 2] = ["/console/logout", "/console/keys/{}/revoke"];

/// An action matches a pattern segment by segment, `{}` matching any one.
fn matches(pattern: &str, action: &str) -> bool {
    let (p, a): (Vec<_>, Vec<_>) = (pattern.split('/').collect(), action.split('/').collect());
    p.len() == a.len() && p.iter().zip(&a).all(|(p, a)| p == a || *p == "{}")
}

/// A model list as the console stores and shows it: split at commas and
/// spaces, joined with ", ".
fn as_list(v: &str) -> String {
    v.split([',', ' ', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(", ")
}

struct FormRun<'a> {
    p: &'a Platform,
    admin: Web,
    db: Db,
    found: Findings,
}

impl FormRun<'_> {
    /// Where the form goes (making a pending request when it decides one).
    async fn action(&self, c: &FormCase) -> String {
        let ids = match c.target {
            Target::TenantApp => vec!["t".to_string(), "a".into()],
            Target::Request => vec![self.p.pending_request().await],
            Target::Victim => vec![self.p.victim.clone()],
            Target::ModelDeployment => vec!["gpt-4o-mini".to_string(), "inj".into()],
            Target::TenantLimitVersion => {
                let url = format!("{}/api/v1/tenants/t/limits/versions", self.p.base);
                let (status, h) = api("GET", &url, Some(&self.p.admin), None).await;
                assert_eq!(status, 200, "{h}");
                let oldest = h["versions"].as_array().and_then(|v| v.last()).cloned();
                vec!["t".to_string(), oldest.unwrap()["version"].to_string()]
            }
        };
        ids.iter()
            .fold(c.pattern.to_string(), |a, id| a.replacen("{}", id, 1))
    }

    /// Sends the form numbered `n` with `field` (if any) set to `value`.
    async fn send(
        &mut self,
        c: &FormCase,
        action: &str,
        n: usize,
        (field, value): (&str, &str),
    ) -> (Page, Vec<(String, String)>) {
        let mut fields: Vec<(String, String)> = c
            .base
            .iter()
            .map(|(k, v)| (k.to_string(), v.replace("{n}", &n.to_string())))
            .collect();
        for f in fields.iter_mut().filter(|f| f.0 == field) {
            f.1 = value.to_string();
        }
        let pairs: Vec<(&str, &str)> = fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let anonymous = Web::at_login_form(&self.p.base).await;
        let web = if c.signed_in { &self.admin } else { &anonymous };
        let answer = if c.method == "get" {
            let url = reqwest::Url::parse_with_params(&format!("{}{action}", self.p.base), &pairs)
                .unwrap();
            web.get(&format!("{}?{}", url.path(), url.query().unwrap_or("")))
                .await
        } else {
            web.post(action, &pairs).await
        };
        if c.pattern == "/console/tenants" && answer.status == 303 {
            self.db.created += 1;
        }
        (answer, fields)
    }

    /// One hostile value in one field; true when it was stored (or, for a
    /// filter, answered).
    async fn try_value(&mut self, c: &FormCase, n: usize, field: &str, value: &str) -> bool {
        let what = format!("form {} {field}", c.pattern);
        self.found.tried += 1;
        let action = self.action(c).await;
        let before = self.db.digest().await;
        let (answer, fields) = self.send(c, &action, n, (field, value)).await;
        let shown = c
            .shown
            .iter()
            .find(|(f, _)| *f == field)
            .map_or(Shown::Same, |s| s.1);
        if let Err(e) = page_shows(&answer.body, value) {
            self.found.fail(&what, value, format!("the answer: {e}"));
        }
        if let Some(to) = &answer.location {
            self.found.check(
                to.starts_with("/console"),
                &what,
                value,
                format!("redirects to {to}"),
            );
        }
        let stored = match answer.status {
            200..=399 => true,
            400..=499 => false,
            s => {
                self.found.fail(&what, value, format!("answered {s}"));
                return false;
            }
        };
        let changed = Db::changed(&before, &self.db.digest().await, c.refusal_writes);
        if !stored || c.method == "get" {
            self.found.check(
                changed.is_empty(),
                &what,
                value,
                format!("answered {}, yet changed {changed:?}", answer.status),
            );
        }
        if !stored {
            self.found.refused += 1;
            let told = if answer.status == 422 {
                answer.body.contains(&format!("data-field=\"{field}\""))
            } else {
                answer.body.contains("id=\"error-message\"")
                    || answer.body.contains("id=\"login-error\"")
            };
            self.found.check(
                told,
                &what,
                value,
                format!("{} without a message next to the field", answer.status),
            );
            return false;
        }
        self.found.accepted += 1;
        let expected = match shown {
            Shown::Lower => value.trim().to_lowercase(),
            Shown::List => as_list(value),
            _ => value.to_string(),
        };
        let id = fields
            .iter()
            .find(|f| f.0 == "id")
            .map_or("", |f| f.1.as_str());
        let mut on_a_page = false;
        for page in c.pages {
            let body = if *page == "<answer>" {
                answer.body.clone()
            } else {
                let path = page.replace("{id}", &segment(id));
                let got = self.admin.get(&path).await;
                self.found.check(
                    got.status == 200,
                    &what,
                    value,
                    format!("{path}: {}", got.status),
                );
                got.body
            };
            match page_shows(&body, &expected) {
                Ok(s) => on_a_page |= s,
                Err(e) => self.found.fail(&what, value, format!("{page}: {e}")),
            }
        }
        if shown == Shown::Never {
            let secret = ["password", "upstream_api_key"].contains(&field);
            self.found.check(
                !(secret && on_a_page),
                &what,
                value,
                "a secret is on a page",
            );
        } else {
            self.found.check(
                on_a_page || c.pages.is_empty(),
                &what,
                value,
                format!("stored but on none of {:?}", c.pages),
            );
        }
        true
    }
}

#[tokio::test]
async fn every_console_form_field_is_stored_inert_or_refused_next_to_the_field() {
    let p = platform().await;
    let admin = Web::login(&p.base, "admin@x.io").await;
    // LIKE wildcards typed into the audit filters are literal characters.
    for (field, wildcard) in [
        ("actor", "%"),
        ("action", "%"),
        ("target", "%"),
        ("actor", "_"),
    ] {
        let page = admin
            .get(&format!("/console/audit?{field}={}", segment(wildcard)))
            .await;
        assert_eq!(page.status, 200);
        assert!(
            !page.body.contains("<tr id=\"audit-"),
            "{field} {wildcard:?} matched rows"
        );
    }
    assert!(admin
        .get("/console/audit?target=t")
        .await
        .body
        .contains("<tr id=\"audit-"));

    // The forms the console serves: a platform admin's (with a pending
    // request of someone else's to decide) and the login form.
    p.pending_request().await;
    // A deployment of gpt-4o-mini of its own, so its enable/disable form
    // is on the models page.
    let made = admin
        .post(
            "/console/models/deployments",
            &[
                ("model", "gpt-4o-mini"),
                ("name", "inj"),
                ("upstream_base_url", "http://127.0.0.1:9/v1"),
                ("upstream_model", "up-inj"),
                ("weight", "1"),
                ("priority", "5"),
            ],
        )
        .await;
    assert!(made.status < 400, "{} {}", made.status, made.body);
    // A second version of t's limits, so its history offers a restore.
    let (status, changed) = api(
        "PATCH",
        &format!("{}/api/v1/tenants/t", p.base),
        Some(&p.admin),
        Some(json!({"limits": {"rpm": 60}})),
    )
    .await;
    assert_eq!(status, 200, "{changed}");
    let mut forms = crawl(&admin).await.forms;
    forms.extend(forms_of(
        &Web::anonymous(&p.base).get("/console/login").await.body,
    ));
    let cases = form_cases();
    let mut covered: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for f in &forms {
        if FIELDLESS.iter().any(|x| matches(x, &f.action)) {
            assert!(
                f.fields.is_empty(),
                "{}: now has fields {:?}",
                f.action,
                f.fields
            );
            continue;
        }
        let case = cases
            .iter()
            .find(|c| matches(c.pattern, &f.action) && c.method == f.method);
        let case =
            case.unwrap_or_else(|| panic!("form {} {}: not in the table", f.method, f.action));
        for name in &f.fields {
            assert!(
                case.base.iter().any(|(k, _)| k == name),
                "form {} field {name}: no valid value in the table",
                case.pattern
            );
            covered
                .entry(case.pattern)
                .or_default()
                .insert(name.clone());
        }
    }
    for c in &cases {
        assert!(
            covered.contains_key(c.pattern),
            "form {}: on no page",
            c.pattern
        );
    }
    let fields: usize = covered.values().map(BTreeSet::len).sum();
    println!("{} forms, {fields} fields", covered.len());

    let mut run = FormRun {
        db: Db::new(&p.env).await,
        admin,
        p: &p,
        found: Findings::default(),
    };
    let mut n = 0;
    for c in &cases {
        n += 1;
        let action = run.action(c).await;
        let (answer, _) = run.send(c, &action, n, ("", "")).await;
        assert!(
            (200..400).contains(&answer.status),
            "form {}: the table's values are refused: {}",
            c.pattern,
            answer.body
        );
        for field in &covered[c.pattern] {
            let template = c.base.iter().find(|(k, _)| k == field).unwrap().1;
            for payload in PAYLOADS {
                n += 1;
                let valid = template.replace("{n}", &n.to_string());
                for value in variants(&valid, payload, n) {
                    if run.try_value(c, n, field, &value).await {
                        break;
                    }
                }
            }
        }
    }
    // Hostile path segments: refused (a NUL with 400), the page naming what
    // was not found, escaped.
    for payload in PAYLOADS {
        for path in ["/console/tenants/{}", "/console/tenants/{}/apps"] {
            let page = run.admin.get(&path.replace("{}", &segment(payload))).await;
            match page_shows(&page.body, payload) {
                Ok(named) => run.found.check(
                    page.status == 400 || (page.status == 404 && named),
                    path,
                    payload,
                    format!(
                        "{} {}",
                        page.status,
                        if named { "" } else { "without naming it" }
                    ),
                ),
                Err(e) => run.found.fail(path, payload, e),
            }
        }
    }
    run.db.assert_intact().await;
    p.sweep(&mut run.found).await;
    run.found.assert_none("console forms");
    p.srv.shutdown().await;
}
