//! Every string field of every state-changing operation the OpenAPI
//! document lists, sent each payload.

use super::*;

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

/// Operations only finance may call (every request here is the platform
/// admin's), on a day the provider-reconcile job compared: left to
/// provider_reconcile.rs, which proposes, refuses and approves them.
const FINANCE_ONLY: [&str; 3] = [
    "POST /api/v1/adjustments",
    "POST /api/v1/adjustments/{id}/approve",
    "POST /api/v1/adjustments/{id}/reject",
];

fn routes() -> Vec<Route> {
    const NONE: &[(&str, &str)] = &[];
    let limits = json!({"monthly_cost_usd": "10", "daily_cost_soft_usd": "1",
        "allowed_service_tiers": ["priority"], "allowed_tools": ["web_search"]});
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
            "POST /api/v1/users/{id}/password",
            &[("id", Param::Victim)],
            json!({"password": "long enough password {n}"}),
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
            "PUT /api/v1/provider-accounts/{id}",
            &[("id", Param::Fixed("acct"))],
            json!({"kind": "openai", "api_base_url": "http://127.0.0.1:9/v1",
                "admin_key": "sk-admin-{n}", "drift_alert_pct": 2.5,
                "deployments": [{"model": "gpt-4o-mini", "deployment": "default",
                    "provider_ref": "key_{n}"}]}),
            "",
            &["/console/reconciliation"],
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
        // An instant (far ahead, one per request), a deployment the model
        // has, a tier's service tier (stored: read back from the list).
        Route {
            not_shown: &[(
                "sheet.tiers[0].service_tier",
                "no console page shows price sheets yet",
            )],
            ..route(
                "POST /api/v1/models/{id}/prices",
                &[("id", Param::Fixed("gpt-4o-mini"))],
                json!({"effective_from": "2099-01-01T00:00:00.{n}1Z", "deployment": "default",
                    "sheet": {"input": 1, "output": 2, "service_tiers": {"priority": {"input": 2, "output": 4}},
                        "tiers": [{"above_input_tokens": 100, "service_tier": "priority-{n}",
                            "prices": {"input": 3, "output": 6}}]}}),
                "/api/v1/models/{id}/prices",
                &[],
            )
        },
        // Its strings are a fixed format and an instant: every hostile
        // value is refused naming the field; nothing is stored without apply.
        route(
            "POST /api/v1/prices/import",
            &[],
            json!({"format": "litellm", "effective_from": "2099-01-01T00:00:00Z",
                "catalog": {"gpt-4o-mini": {"input_cost_per_token": 1.5e-07,
                    "output_cost_per_token": 6e-07}}}),
            "",
            &["/console/audit"],
        ),
        route(
            "PUT /api/v1/models/{id}/fallbacks",
            &[("id", Param::Fixed("gpt-4o-mini"))],
            json!({"fallbacks": ["cheap"]}),
            "",
            &["/console/models"],
        ),
        Route {
            not_shown: &[
                ("alias", "no console page lists model aliases yet"),
                ("model", "no console page lists model aliases yet"),
                ("tenant_id", "no console page lists model aliases yet"),
            ],
            ..route(
                "POST /api/v1/model-aliases",
                &[],
                json!({"alias": "alias-{n}-*", "model": "gpt-4o-mini", "tenant_id": "t"}),
                "/api/v1/model-aliases",
                &[],
            )
        },
        Route {
            not_shown: &[("model", "no console page lists model aliases yet")],
            ..route(
                "PATCH /api/v1/model-aliases/{id}",
                &[("id", Param::FreshAlias)],
                json!({"model": "gpt-4o-mini"}),
                "/api/v1/model-aliases",
                &[],
            )
        },
        route(
            "DELETE /api/v1/model-aliases/{id}",
            &[("id", Param::FreshAlias)],
            Value::Null,
            "",
            &[],
        ),
        route(
            "PATCH /api/v1/models/{id}",
            &[("id", Param::Fixed("gpt-4o-mini"))],
            json!({"input_price_per_mtok_usd": "1.5", "output_price_per_mtok_usd": "2",
                "cap_field": "max_tokens", "hidden_reasoning": false, "apis": ["chat"]}),
            "/api/v1/models/{id}",
            &["/console/models"],
        ),
        route(
            "POST /api/v1/tenants",
            &[],
            json!({"id": "inj-{n}", "name": "Tenant {n}", "cost_center": "CC-{n}", "priority": "standard",
                "limits": limits, "allowed_models": ["gpt-4o-mini"], "max_queued_requests": 16,
                "max_open_streams": 8}),
            "/api/v1/tenants/{body.id}",
            &["/console/tenants", "/console/tenants/{body.id}"],
        ),
        route(
            "PATCH /api/v1/tenants/{id}",
            &[("id", Param::Fixed("t"))],
            json!({"name": "T {n}", "cost_center": "CC-{n}", "priority": "standard",
                "limits": limits, "allowed_models": ["gpt-4o-mini"], "max_queued_requests": 16,
                "max_open_streams": 8}),
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
        route(
            "PATCH /api/v1/tenants/{id}/apps/{app}",
            &[("id", Param::Fixed("t")), ("app", Param::Fixed("a"))],
            json!({"name": "App {n}", "allowed_models": ["gpt-4o-mini"],
                "attribution": {"default_tags": {"env": "prod"}, "required_tags": ["project"],
                    "end_user_limits": {"rpm": 5, "monthly_cost_usd": "1.5"}}}),
            "",
            &["/console/tenants/{id}/apps"],
        ),
        Route {
            not_shown: &[
                ("allowed_models[0]", "the apps page lists no key's models"),
                (
                    "attribution.default_tags.env",
                    "the apps page lists no key's tags",
                ),
                (
                    "attribution.required_tags[0]",
                    "the apps page lists no key's tags",
                ),
            ],
            ..route(
                "POST /api/v1/tenants/{id}/apps/{app}/keys",
                &[("id", Param::Fixed("t")), ("app", Param::Fixed("a"))],
                json!({"name": "key {n}", "expires_at": "2099-01-01T00:00:00Z", "limits": limits,
                    "allowed_models": ["gpt-4o-mini"],
                    "attribution": {"default_tags": {"env": "prod"}, "required_tags": ["ticket"]}}),
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
            "PATCH /api/v1/keys/{id}",
            &[("id", Param::FreshKey)],
            json!({"name": "key {n}", "expires_at": "2099-01-01T00:00:00Z",
                "allowed_models": ["gpt-4o-mini"]}),
            "/api/v1/keys/{id}",
            &["/console/keys/{id}/limits", "/console/tenants/t/apps"],
        ),
        route(
            "POST /api/v1/keys/{id}/rotate",
            &[("id", Param::FreshKey)],
            json!({"grace_secs": 60}),
            "",
            &[],
        ),
        route(
            "POST /api/v1/quota-requests",
            &[],
            json!({"tenant_id": "t", "app_id": "a", "tokens": 5, "cost_usd": "1.5",
                "expires_at": "{soon}", "reason": "launch {n}"}),
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
            "PUT /api/v1/tenants/{id}/apps/{app}/limits",
            &[("id", Param::Fixed("t")), ("app", Param::Fixed("a"))],
            json!({"limits": limits}),
            "",
            &["/console/tenants/{id}/apps/{app}/limits"],
        ),
        route(
            "PUT /api/v1/keys/{id}/limits",
            &[("id", Param::FreshKey)],
            json!({"limits": limits}),
            "",
            &["/console/keys/{id}/limits"],
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
                Param::FreshAlias => self.p.alias().await,
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
        .filter(|o| !FINANCE_ONLY.contains(&o.id.as_str()))
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
