//! Every field of every form a crawl of the console finds, sent each
//! payload.

use super::*;

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

const LIMITS: [(&str, &str); 12] = [
    ("monthly_tokens", "1000"),
    ("monthly_cost_usd", "10"),
    ("daily_cost_soft_usd", "1"),
    ("rpm", "60"),
    ("input_tpm", "1000"),
    ("output_tpm", "1000"),
    ("max_inflight", "4"),
    ("max_context_tokens", "8000"),
    ("max_output_tokens", "500"),
    ("allowed_service_tiers", "priority"),
    ("allowed_tools", "web_search"),
    ("budgets", "day requests=100"),
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
        ("max_queued_requests", "16"),
        ("max_open_streams", "8"),
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
    ("version", Shown::Never),
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
            shown: &[("theme", Shown::Never), ("back", Shown::Never)],
            ..case(
                "/console/theme",
                &[("theme", "dark"), ("back", "/console")],
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
                // `version`: empty is "no condition" (the hidden field's
                // stale-save check, docs/console.md "Versions").
                &[tenant_form("t", "T {n}"), vec![("version", "")]].concat(),
                &["/console/tenants", "/console/tenants/t"],
            )
        },
        FormCase {
            shown: &[
                ("allowed_models", Shown::List),
                ("required_tags", Shown::List),
            ],
            ..case(
                "/console/tenants/{}/apps/{}",
                &[
                    ("name", "App {n}"),
                    ("allowed_models", "gpt-4o-mini"),
                    ("default_tags", "env=prod"),
                    ("required_tags", "project"),
                ],
                &["/console/tenants/t/apps"],
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
            // A key's own limits show on its limits history, not in the
            // apps page's key table.
            shown: &[
                ("allowed_models", Shown::Never),
                ("monthly_tokens", Shown::Never),
                ("monthly_cost_usd", Shown::Never),
                ("daily_cost_soft_usd", Shown::Never),
                ("rpm", Shown::Never),
                ("input_tpm", Shown::Never),
                ("output_tpm", Shown::Never),
                ("max_inflight", Shown::Never),
                ("max_context_tokens", Shown::Never),
                ("max_output_tokens", Shown::Never),
                ("budgets", Shown::Never),
            ],
            ..case(
                "/console/tenants/{}/apps/{}/keys",
                &with_limits(&[
                    ("name", "key {n}"),
                    ("expires_at", "2099-01-01T00:00"),
                    ("allowed_models", "gpt-4o-mini"),
                ]),
                &["/console/tenants/t/apps"],
            )
        },
        // A key's edit form (its models show in the form's field).
        FormCase {
            target: Target::Key,
            shown: &[("allowed_models", Shown::List), ("version", Shown::Never)],
            ..case(
                "/console/keys/{}",
                &[
                    ("name", "key {n}"),
                    ("expires_at", "2099-01-01T00:00"),
                    ("allowed_models", "gpt-4o-mini"),
                    ("version", ""),
                ],
                &["/console/tenants/t/apps"],
            )
        },
        // A key's own limits (the key the apps page lists links there).
        FormCase {
            target: Target::Key,
            shown: &[("version", Shown::Never)],
            ..case(
                "/console/keys/{}/limits",
                &[&LIMITS[..], &[("version", "")]].concat(),
                &[],
            )
        },
        // Rotating shows the new secret once; the grace is a choice.
        FormCase {
            target: Target::Key,
            shown: &[("grace_secs", Shown::Never)],
            ..case("/console/keys/{}/rotate", &[("grace_secs", "3600")], &[])
        },
        // The key tables' filter echoes what was typed.
        FormCase {
            method: "get",
            shown: &[("revoked", Shown::Never)],
            ..case(
                "/console/tenants/{}/apps",
                &[("q", "key {n}"), ("revoked", "1")],
                &["<answer>"],
            )
        },
        FormCase {
            target: Target::TenantApp,
            shown: &[("version", Shown::Never)],
            ..case(
                "/console/tenants/{}/apps/{}/limits",
                &[&LIMITS[..], &[("version", "")]].concat(),
                &["/console/tenants/t/apps/a/limits"],
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
                ("expires_at", "{soon}"),
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
            target: Target::Model,
            ..case(
                "/console/models/{}/prices",
                &[
                    ("input_price_per_mtok_usd", "1.5"),
                    ("output_price_per_mtok_usd", "2"),
                ],
                &["/console/models"],
            )
        },
        FormCase {
            target: Target::Model,
            shown: &[("enabled", Shown::Never)],
            ..case(
                "/console/models/{}/enabled",
                &[("enabled", "true")],
                &["/console/models"],
            )
        },
        FormCase {
            target: Target::Model,
            ..case(
                "/console/models/{}/fairness",
                &[
                    ("degrade_to", "cheap"),
                    ("pool_capacity", "10"),
                    ("guarantees", "core=1"),
                ],
                &["/console/models/gpt-4o-mini/fairness"],
            )
        },
        FormCase {
            target: Target::Model,
            ..case(
                "/console/models/{}/price-sheets",
                &[
                    ("sheet", r#"{"input": 1000000, "output": 2000000}"#),
                    ("effective_from", ""),
                    ("deployment", ""),
                ],
                &["/console/models/gpt-4o-mini/price-sheets"],
            )
        },
        FormCase {
            ..case(
                "/console/borrowing/pool",
                &[
                    ("monthly_tokens", "1000"),
                    ("monthly_cost_usd", "10"),
                    ("max_borrow_share", "5"),
                    ("reclaim_below_share", "20"),
                ],
                &["/console/borrowing"],
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
            target: Target::Victim,
            shown: &[("disabled", Shown::Never)],
            ..case(
                "/console/users/{}/disabled",
                &[("disabled", "false")],
                &["/console/users"],
            )
        },
        FormCase {
            target: Target::Victim,
            shown: &[("password", Shown::Never)],
            ..case(
                "/console/users/{}/password",
                &[("password", "long enough password {n}")],
                &["/console/users"],
            )
        },
        FormCase {
            method: "get",
            // A time that cannot be read is refused beside its field (422).
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
            // the address. A time that cannot be read, or rows per page
            // outside 1–500, is refused beside its field (422); a tenant
            // that is not there, as not found.
            ..case(
                "/console/requests",
                &[
                    ("id", ""),
                    ("tenant", "t"),
                    ("key", ""),
                    ("model", "gpt-4o-mini"),
                    ("status", "ok"),
                    ("reason", "model_not_found"),
                    ("tag", "project:p{n}"),
                    ("end_user", "user-{n}"),
                    ("from", "2000-01-01T00:00"),
                    ("to", "2099-01-01T00:00"),
                    ("per", "50"),
                ],
                &["<answer>"],
            )
        },
        FormCase {
            method: "get",
            // A tenant that is not there is refused as not found (404).
            ..case(
                "/console/bills",
                &[("period", "2026-01"), ("tenant", "t")],
                &["<answer>"],
            )
        },
        FormCase {
            method: "get",
            // Usage analytics: a hostile range, day, grouping, tag key,
            // top-N or tenant is refused beside its field (422).
            ..case(
                "/console/analytics",
                &[
                    ("range", "custom"),
                    ("from", "2026-01-01"),
                    ("to", "2026-01-31"),
                    ("group", "tag"),
                    ("tag", "project"),
                    ("top", "10"),
                    ("tenant", "t"),
                ],
                &["<answer>"],
            )
        },
        FormCase {
            shown: &[("admin_key", Shown::Never), ("kind", Shown::Never)],
            ..case(
                "/console/reconciliation/accounts",
                &[
                    ("id", "acct"),
                    ("kind", "openai"),
                    ("api_base_url", "http://127.0.0.1:9/v{n}"),
                    ("admin_key", "sk-admin-{n}"),
                    ("drift_alert_pct", "2.5"),
                    ("deployments", "gpt-4o-mini/default key_{n}"),
                ],
                &["/console/reconciliation"],
            )
        },
        FormCase {
            method: "get",
            ..case(
                "/console/reconciliation",
                &[("period", "2026-01")],
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
            Target::Model => vec!["gpt-4o-mini".to_string()],
            Target::Key => vec![self.p.key().await],
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
            .map(|(k, v)| {
                let v = v
                    .replace("{n}", &n.to_string())
                    .replace("{soon}", &days_ahead_local(30));
                (k.to_string(), v)
            })
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
    // An active key of t/a, so its rotate and edit forms are on the apps
    // page.
    p.key().await;
    let mut forms = crawl(&admin).await.forms;
    forms.extend(forms_of(
        &Web::anonymous(&p.base).get("/console/login").await.body,
    ));
    let cases = form_cases();
    let mut covered: BTreeMap<(&str, &str), BTreeSet<String>> = BTreeMap::new();
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
                .entry((case.pattern, case.method))
                .or_default()
                .insert(name.clone());
        }
    }
    for c in &cases {
        assert!(
            covered.contains_key(&(c.pattern, c.method)),
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
        for field in &covered[&(c.pattern, c.method)] {
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
