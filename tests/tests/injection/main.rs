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

// The API sweep and the console sweep, each over the fixture, the OpenAPI
// reading and the crawl below.
mod api;
mod console;

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
        let body =
            json!({"tenant_id": "t", "tokens": 5, "expires_at": days_ahead(30), "reason": "x"});
        let url = format!("{}/api/v1/quota-requests", self.base);
        let (status, q) = api("POST", &url, Some(&self.ta), Some(body)).await;
        assert_eq!(status, 201, "{q}");
        q["id"].as_str().unwrap().to_string()
    }

    /// A fresh key of app t/a; its id.
    async fn key(&self) -> String {
        self.env.key("t", "a", Limits::default()).await.0
    }

    /// A fresh global model alias; its id.
    async fn alias(&self) -> String {
        let n = uuid::Uuid::new_v4().simple().to_string();
        let a = domain::alias::ModelAlias {
            alias: format!("fresh-{n}"),
            model: "gpt-4o-mini".into(),
            tenant_id: None,
        };
        let row = self.env.store.create_model_alias("test", &a).await.unwrap();
        row.id.to_string()
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
        // `{soon}`: a grant's expiry within `auth.max_grant_days`.
        Value::String(s) => Value::String(
            s.replace("{n}", &n.to_string())
                .replace("{soon}", &days_ahead(30)),
        ),
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
    FreshAlias,
    Victim,
    /// The newest limits version of the owner the earlier parameters name
    /// (the route's path up to `/versions`).
    LimitVersion,
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
    /// Model gpt-4o-mini.
    Model,
    /// A fresh key of app t/a.
    Key,
    /// Model gpt-4o-mini's deployment `inj` (made by the form before it).
    ModelDeployment,
    /// Tenant t, then the oldest version of its limits (an earlier one,
    /// whose restore form the history shows).
    TenantLimitVersion,
}
