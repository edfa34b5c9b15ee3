//! The request log (newest first, filtered, a keyset page at a time: the
//! store query `GET /api/v1/requests` reads) and the request lookup by
//! `x-request-id`: first one sentence a person understands (why it was
//! refused, or what it cost), then the facts and the counters at the time.

use super::{field_error, tenant_filter, thousands, time_range, when_secs};
use crate::api::{request_log, requests};
use crate::error::ApiError;
use crate::i18n::{self, Lang};
use crate::web::{render_refusable, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Query, State};
use axum::response::Response;
use chrono::{DateTime, Utc};
use domain::period::PlatformClock;
use domain::MicroUsd;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use store::{Principal, RequestLogRow};

/// The page's query: a request id to look up, or the log's filters.
#[derive(Deserialize, Serialize, Default, Clone)]
#[serde(default)]
pub struct Lookup {
    #[serde(skip_serializing_if = "String::is_empty")]
    id: String,
    tenant: String,
    key: String,
    model: String,
    status: String,
    reason: String,
    /// `key=value` (`project=apollo`, the request header's syntax);
    /// `key:value` is read too.
    #[serde(skip_serializing_if = "String::is_empty")]
    tag: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    end_user: String,
    /// `datetime-local`, UTC.
    from: String,
    to: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    cursor: String,
    /// Rows per page ("" = `PAGE`).
    #[serde(skip_serializing_if = "String::is_empty")]
    per: String,
}

impl Lookup {
    /// The query string of these filters on another page.
    fn with_cursor(&self, cursor: &str) -> String {
        let mut q = self.clone();
        q.id.clear();
        q.cursor = cursor.to_string();
        serde_urlencoded::to_string(&q).unwrap_or_default()
    }
}

/// What the page shows about one request, formatted.
pub struct Found {
    pub request_id: String,
    pub tenant: String,
    /// refused / degraded / admitted
    pub outcome: String,
    pub outcome_key: &'static str,
    /// The reason code, kept for machines (an attribute, not shown).
    pub reason: String,
    /// What happened, in one sentence of the reader's language.
    pub sentence: String,
    /// (label key, value) rows.
    pub facts: Vec<(&'static str, String)>,
    /// Counters at the time: (code, label, value), from the decision's detail.
    pub counters: Vec<(String, &'static str, String)>,
    /// The provider's own usage objects, (label key, text as sent): shown
    /// verbatim as evidence (`data-verbatim`), the one place a page shows
    /// JSON.
    pub verbatim: Vec<(&'static str, String)>,
}

/// One row of the log, formatted.
pub struct LogLine {
    pub request_id: String,
    pub href: String,
    pub at: String,
    pub tenant: String,
    pub app: String,
    pub key: String,
    pub model: String,
    pub outcome: String,
    pub outcome_key: &'static str,
    pub why: &'static str,
    /// How long an admitted request waited in the fair queue, and why
    /// ("" when it did not wait).
    pub queued: String,
    pub input_tokens: String,
    pub output_tokens: String,
    pub cost: String,
}

/// A choice of a filter's `<select>`: (value, label, selected).
pub type Choice = (String, String, bool);

#[derive(Template)]
#[template(path = "pages/requests.html")]
struct RequestsPage {
    c: Chrome,
    q: Lookup,
    found: Option<Found>,
    missing: bool,
    /// The log (none while a lookup is shown).
    lines: Vec<LogLine>,
    show_tenant: bool,
    tenants: Vec<Choice>,
    keys: Vec<Choice>,
    models: Vec<Choice>,
    statuses: Vec<Choice>,
    reasons: Vec<Choice>,
    /// A filter the log could not read (its field's message key).
    bad: Option<&'static str>,
    /// The From–To and rows-per-page filters' refusals: (field, message
    /// key), beside the fields (the log is then answered 422, with no rows).
    errors: Vec<(&'static str, &'static str)>,
    older: Option<String>,
    newest: Option<String>,
}

/// The usage statuses and `refused`: the status filter's choices.
const STATUSES: &[&str] = &[
    "ok",
    "refused",
    "upstream_error",
    "client_closed",
    "cut_off",
    "expired",
];

pub async fn lookup(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(q): Query<Lookup>,
) -> Result<Response, PageError> {
    let id = q.id.trim().to_string();
    let mut found = None;
    let mut missing = false;
    if !id.is_empty() {
        match requests::lookup(&cp, &s.actor, &id).await {
            Ok(r) => found = Some(format(&cp, &s.actor, s.lang, &r).await?),
            // Unknown and another tenant's look the same.
            Err(ApiError::NotFound(_)) => missing = true,
            Err(e) => return Err(e.into()),
        }
    }
    let mut page = RequestsPage {
        c: Chrome::new(&s, "nav.requests", "/console/requests"),
        q: Lookup { id, ..q },
        found: None,
        missing,
        lines: Vec::new(),
        show_tenant: s.actor.tenant.is_none(),
        tenants: Vec::new(),
        keys: Vec::new(),
        models: Vec::new(),
        statuses: Vec::new(),
        reasons: Vec::new(),
        bad: None,
        errors: Vec::new(),
        older: None,
        newest: None,
    };
    if found.is_some() || missing {
        page.found = found;
        return render_refusable(page, false);
    }
    log(&cp, &s, &mut page).await?;
    let refused = !page.errors.is_empty();
    render_refusable(page, refused)
}

impl RequestsPage {
    /// The message key beside `field`, if the filter refused it.
    fn error(&self, field: &str) -> Option<&'static str> {
        field_error(&self.errors, field)
    }
}

/// Fills the log and its filters' choices.
async fn log(cp: &ControlPlane, s: &Session, p: &mut RequestsPage) -> Result<(), PageError> {
    let q = p.q.clone();
    let lang = s.lang;
    let opt = |v: &str| (!v.trim().is_empty()).then(|| v.trim().to_string());
    let (from, to) = match time_range(s.clock, &q.from, &q.to) {
        Ok((f, t)) => (f.map(|t| t.to_rfc3339()), t.map(|t| t.to_rfc3339())),
        Err(errors) => {
            p.errors = errors;
            p.bad = Some("err.filter_refused");
            (None, None)
        }
    };
    // A tenant the reader cannot see (none such, or another tenant's to a
    // tenant admin) is refused as no such tenant, not shown as no requests.
    tenant_filter(cp, &s.actor, opt(&q.tenant).as_deref()).await?;
    let tenant = s.actor.tenant.clone().or_else(|| opt(&q.tenant));
    // A key is named by its id; anything else matches no request.
    let key = opt(&q.key);
    let no_such_key = key
        .as_deref()
        .is_some_and(|k| k.parse::<uuid::Uuid>().is_err());
    let query = request_log::LogQuery {
        tenant: opt(&q.tenant),
        app: None,
        key,
        model: opt(&q.model),
        status: opt(&q.status),
        reason: opt(&q.reason),
        tag: opt(&q.tag),
        end_user: opt(&q.end_user),
        from,
        to,
        cursor: opt(&q.cursor),
        limit: Some(match rows_per_page(&q.per) {
            Ok(n) => n,
            Err(key) => {
                // Out of range or not a number: refused beside the field
                // (422), as the From–To filter is, never silently 50.
                p.errors.push(("per", key));
                p.bad = Some("err.filter_refused");
                PAGE
            }
        }),
    };
    let (rows, next) = if p.bad.is_some() || no_such_key {
        (Vec::new(), None)
    } else {
        match request_log::page(cp, &s.actor, query).await {
            Ok(page) => page,
            // A filter naming another tenant reads as nothing found.
            Err(ApiError::NotFound(_)) => (Vec::new(), None),
            Err(ApiError::Invalid { .. }) => {
                p.bad = Some("err.bad_filter");
                (Vec::new(), None)
            }
            Err(e) => return Err(e.into()),
        }
    };
    let names = key_names(cp, &s.actor, rows.iter().map(|r| r.key_id.as_str())).await?;
    p.lines = rows
        .iter()
        .map(|r| line(lang, s.clock, r, &names))
        .collect();
    p.older = next.map(|c| q.with_cursor(&c));
    p.newest = (!q.cursor.is_empty()).then(|| q.with_cursor(""));

    let pick = |v: &str, l: String, current: &str| (v.to_string(), l, v == current);
    if s.actor.tenant.is_none() {
        p.tenants = cp
            .store
            .tenants(s.actor.scope())
            .await?
            .into_iter()
            .map(|t| pick(&t.id, t.name, &q.tenant))
            .collect();
        // The tenant column names the tenant, as the filter does.
        let names: HashMap<&str, &str> = p
            .tenants
            .iter()
            .map(|(id, name, _)| (id.as_str(), name.as_str()))
            .collect();
        for l in &mut p.lines {
            if let Some(n) = names.get(l.tenant.as_str()) {
                l.tenant = n.to_string();
            }
        }
    }
    if let Some(t) = &tenant {
        p.keys = cp
            .store
            .keys_of(s.actor.scope(), t)
            .await?
            .into_iter()
            .map(|k| {
                pick(
                    &k.id.to_string(),
                    format!("{} · {}", k.name, k.app_id),
                    &q.key,
                )
            })
            .collect();
    }
    p.models = cp
        .store
        .models()
        .await?
        .into_iter()
        .map(|m| pick(&m.id, m.id.clone(), &q.model))
        .collect();
    p.statuses = STATUSES
        .iter()
        .map(|st| pick(st, lang.t(&format!("status.{st}")).to_string(), &q.status))
        .collect();
    p.reasons = i18n::keys_in("reason")
        .map(|(code, label)| pick(code, lang.t(label).to_string(), &q.reason))
        .collect();
    // A value typed into the address that is no choice stays chosen, as
    // typed: the page says what it filtered by (and finds nothing).
    for (list, current) in [
        (&mut p.tenants, &q.tenant),
        (&mut p.keys, &q.key),
        (&mut p.models, &q.model),
        (&mut p.statuses, &q.status),
        (&mut p.reasons, &q.reason),
    ] {
        if !current.is_empty() && !list.iter().any(|(v, _, _)| v == current) {
            list.push((current.clone(), current.clone(), true));
        }
    }
    Ok(())
}

/// Rows per page of the log, unless the query asks for up to `PAGE_MAX`.
const PAGE: i64 = 50;
const PAGE_MAX: i64 = 500;

/// The `per` filter: empty is `PAGE`; a whole number from 1 to `PAGE_MAX`
/// is itself; anything else is refused with its message key.
fn rows_per_page(v: &str) -> Result<i64, &'static str> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(PAGE);
    }
    match v.parse::<i64>() {
        Ok(n) if (1..=PAGE_MAX).contains(&n) => Ok(n),
        Ok(_) => Err("err.per_range"),
        // All digits but past i64: out of range too.
        Err(_) if v.bytes().all(|b| b.is_ascii_digit()) => Err("err.per_range"),
        Err(_) => Err("err.not_a_number"),
    }
}

fn line(
    lang: Lang,
    clock: PlatformClock,
    r: &RequestLogRow,
    names: &HashMap<String, String>,
) -> LogLine {
    let (outcome_key, why) = match r.outcome.as_str() {
        "refused" => ("req.refused", reason_key(r.reason.as_deref())),
        "degraded" => ("req.degraded", reason_key(r.reason.as_deref())),
        _ => ("req.admitted", status_key(&r.status)),
    };
    let refused = r.outcome == "refused";
    let blank_if_refused = |v: String| if refused { String::new() } else { v };
    LogLine {
        href: format!(
            "/console/requests?{}",
            serde_urlencoded::to_string([("id", &r.request_id)]).unwrap_or_default()
        ),
        request_id: r.request_id.clone(),
        at: when_secs(clock, r.at),
        tenant: r.tenant_id.clone(),
        app: r.app_id.clone(),
        key: key_label(lang, names, &r.key_id),
        model: r.model.clone(),
        outcome: r.outcome.clone(),
        outcome_key,
        why,
        queued: r
            .queued_ms
            .map(|ms| queue_wait(lang, ms, r.queue_reason.as_deref()))
            .unwrap_or_default(),
        input_tokens: blank_if_refused(thousands(r.input_tokens)),
        output_tokens: blank_if_refused(thousands(r.output_tokens)),
        cost: blank_if_refused(MicroUsd(r.cost_micro).shown()),
    }
}

/// The key's name, or "a deleted key" when the scope no longer has it.
fn key_label(lang: Lang, names: &HashMap<String, String>, id: &str) -> String {
    names
        .get(id)
        .cloned()
        .unwrap_or_else(|| lang.t("req.unknown_key").to_string())
}

pub(super) async fn key_names<'a>(
    cp: &ControlPlane,
    actor: &Principal,
    ids: impl Iterator<Item = &'a str>,
) -> Result<HashMap<String, String>, PageError> {
    let mut uuids: Vec<uuid::Uuid> = ids.filter_map(|i| i.parse().ok()).collect();
    uuids.sort();
    uuids.dedup();
    if uuids.is_empty() {
        return Ok(HashMap::new());
    }
    let names = cp.store.key_names(actor.scope(), &uuids).await?;
    Ok(names.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// The translation key of why a request was refused: its reason, said
/// more precisely for a key that was revoked or has expired.
fn why_key(d: &store::RequestDecisionRow) -> &'static str {
    match (
        d.reason.as_str(),
        d.detail.get("key_state").and_then(Value::as_str),
    ) {
        ("invalid_api_key", Some("revoked")) => "keystate.revoked",
        ("invalid_api_key", Some("expired")) => "keystate.expired",
        ("invalid_api_key", Some("rotated")) => "keystate.rotated",
        _ => reason_key(Some(&d.reason)),
    }
}

/// The translation key of a reason code (an unknown one reads as such).
/// "1,234 ms, for: too many of the tenant's requests in flight".
fn queue_wait(lang: Lang, ms: i64, why: Option<&str>) -> String {
    fill(
        lang.t("say.queued_for"),
        &[
            ("ms", thousands(ms)),
            ("why", lang.t(reason_key(why)).into()),
        ],
    )
}

fn reason_key(code: Option<&str>) -> &'static str {
    let code = code.unwrap_or_default();
    i18n::keys_in("reason")
        .find(|(c, _)| *c == code)
        .map(|(_, k)| k)
        .unwrap_or("reason.other")
}

fn status_key(status: &str) -> &'static str {
    i18n::keys_in("status")
        .find(|(c, _)| *c == status)
        .map(|(_, k)| k)
        .unwrap_or("status.other")
}

/// Who a scope label (`tenant:t`, `app:t/a`, `key:<id>`, `end_user:t/a`)
/// names, in words: "tenant Search", "app chat-bot", "key ci".
async fn who(
    cp: &ControlPlane,
    actor: &Principal,
    lang: Lang,
    scope: &str,
) -> Result<String, PageError> {
    let (kind, id) = scope.split_once(':').unwrap_or(("", scope));
    let named = |k: &str, name: String| lang.t(k).replace("{name}", &name);
    Ok(match kind {
        "tenant" => {
            let name = cp
                .store
                .tenant(actor.scope(), id)
                .await?
                .map(|t| t.name)
                .unwrap_or_else(|| id.to_string());
            named("say.who_tenant", name)
        }
        "app" | "end_user" => {
            let (t, a) = id.split_once('/').unwrap_or(("", id));
            let name = cp
                .store
                .apps_of(actor.scope(), t)
                .await?
                .into_iter()
                .find(|x| x.id == a)
                .map(|x| x.name)
                .unwrap_or_else(|| a.to_string());
            if kind == "app" {
                named("say.who_app", name)
            } else {
                named("say.who_end_user", name)
            }
        }
        "key" => {
            let names = key_names(cp, actor, std::iter::once(id)).await?;
            named("say.who_key", key_label(lang, &names, id))
        }
        _ => scope.to_string(),
    })
}

/// Fills `{name}` placeholders of a translated sentence.
fn fill(template: &str, args: &[(&str, String)]) -> String {
    args.iter().fold(template.to_string(), |s, (k, v)| {
        s.replace(&format!("{{{k}}}"), v)
    })
}

fn int_of(detail: &Value, field: &str) -> Option<i64> {
    detail.get(field).and_then(Value::as_i64)
}

/// The one sentence of a refusal or a degradation.
fn decision_sentence(
    lang: Lang,
    clock: PlatformClock,
    d: &store::RequestDecisionRow,
    who: &str,
) -> String {
    let at = when_secs(clock, d.at);
    let det = &d.detail;
    let limit = det.get("limit").and_then(Value::as_str).unwrap_or_default();
    let limit_value = det.get("limit_value");
    let tokens = |v: Option<i64>| v.map(thousands).unwrap_or_else(|| "?".into());
    let money = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .and_then(|s| MicroUsd::from_usd_str(s).ok())
            .map(MicroUsd::shown)
            .unwrap_or_else(|| "?".into())
    };
    let retry = int_of(det, "retry_after_secs")
        .map(|s| fill(lang.t("say.retry"), &[("secs", thousands(s))]))
        .unwrap_or_default();
    if d.decision == "degraded" {
        return fill(
            lang.t("say.degraded"),
            &[
                ("at", at),
                ("why", lang.t(reason_key(Some(&d.reason))).into()),
            ],
        );
    }
    let rate_unit = match limit {
        "Rpm" => Some("say.unit_rpm"),
        "InputTpm" => Some("say.unit_input_tpm"),
        "OutputTpm" => Some("say.unit_output_tpm"),
        "MaxInflight" => Some("say.unit_inflight"),
        "EndUsersPerMinute" => Some("say.unit_end_users"),
        _ => None,
    };
    let base = match (limit, rate_unit) {
        ("MonthlyTokens", _) => {
            let est = int_of(det, "est_input_tokens")
                .zip(int_of(det, "est_output_tokens"))
                .map(|(i, o)| i.saturating_add(o));
            fill(
                lang.t("say.refused_tokens"),
                &[
                    ("at", at),
                    ("who", who.into()),
                    ("left", tokens(int_of(det, "headroom_tokens"))),
                    ("limit", tokens(limit_value.and_then(Value::as_i64))),
                    ("need", tokens(est)),
                ],
            )
        }
        ("MonthlyCost", _) => fill(
            lang.t("say.refused_cost"),
            &[
                ("at", at),
                ("who", who.into()),
                (
                    "left",
                    int_of(det, "headroom_cost_micro_usd")
                        .map(|m| MicroUsd(m).shown())
                        .unwrap_or_else(|| "?".into()),
                ),
                ("limit", money(limit_value)),
            ],
        ),
        (_, Some(unit)) => fill(
            lang.t("say.refused_rate"),
            &[
                ("at", at),
                ("who", who.into()),
                ("limit", tokens(limit_value.and_then(Value::as_i64))),
                ("unit", lang.t(unit).into()),
            ],
        ),
        _ => fill(
            lang.t("say.refused"),
            &[
                ("at", at),
                ("status", d.status.to_string()),
                ("why", lang.t(why_key(d)).into()),
            ],
        ),
    };
    if retry.is_empty() {
        base
    } else {
        format!("{base} {retry}")
    }
}

/// "850 ms", "2.4 s".
fn latency(lang: Lang, ms: i64) -> String {
    if ms < 1000 {
        fill(lang.t("say.ms"), &[("n", ms.max(0).to_string())])
    } else {
        let tenths = (ms + 50) / 100;
        fill(
            lang.t("say.secs"),
            &[("n", format!("{}.{}", tenths / 10, tenths % 10))],
        )
    }
}

fn admitted_sentence(lang: Lang, clock: PlatformClock, u: &domain::usage::UsageEvent) -> String {
    let at = DateTime::<Utc>::from_timestamp_millis(u.started_at_ms)
        .map(|t| when_secs(clock, t))
        .unwrap_or_default();
    let s = fill(
        lang.t("say.admitted"),
        &[
            ("at", at),
            ("model", u.model.clone()),
            ("in", thousands(u.input_tokens)),
            ("out", thousands(u.output_tokens)),
            ("cost", MicroUsd(u.cost_micro).shown()),
            ("latency", latency(lang, u.settled_at_ms - u.started_at_ms)),
        ],
    );
    if u.status == "ok" {
        s
    } else {
        format!(
            "{s} {}",
            fill(
                lang.t("say.settled_as"),
                &[("status", lang.t(status_key(&u.status)).into())]
            )
        )
    }
}

/// A counter of the decision's detail as the page labels it, or None for
/// the internals the sentence already says in words.
fn counter(lang: Lang, k: &str, v: &Value) -> Option<(&'static str, String)> {
    let n = v.as_i64();
    let label = match k {
        "headroom_tokens" => "counter.headroom_tokens",
        "headroom_cost_micro_usd" => {
            return Some(("counter.headroom_cost", MicroUsd(n?).shown()));
        }
        "limit_value" => {
            let shown = match (n, v.as_str()) {
                (Some(n), _) => thousands(n),
                (None, Some(s)) => MicroUsd::from_usd_str(s).ok()?.shown(),
                _ => return None,
            };
            return Some(("counter.limit_value", shown));
        }
        "retry_after_ms" => "counter.retry_after_ms",
        "retry_after_secs" => "counter.retry_after_secs",
        "est_input_tokens" => "counter.est_input_tokens",
        "est_output_tokens" => "counter.est_output_tokens",
        "requested_output_tokens" => "counter.requested_output_tokens",
        "clamped_output_tokens" => "counter.clamped_output_tokens",
        "delivered_output_tokens" => "counter.delivered_output_tokens",
        "waited_ms" => "counter.waited_ms",
        "queue_reason" => {
            return Some((
                "counter.queue_reason",
                lang.t(reason_key(v.as_str())).into(),
            ));
        }
        "cut_off" => return Some(("counter.cut_off", lang.t("common.yes").into())),
        "upstream_status" => "counter.upstream_status",
        // Only a platform admin's lookup still has it (api::requests::lookup).
        "upstream_error" => return Some(("counter.upstream_error", v.as_str()?.to_string())),
        _ => return None,
    };
    Some((label, thousands(n?)))
}

async fn format(
    cp: &ControlPlane,
    actor: &Principal,
    lang: Lang,
    r: &requests::RequestRecord,
) -> Result<Found, PageError> {
    let mut facts = Vec::new();
    let mut verbatim = Vec::new();
    let mut counters = Vec::new();
    // A request admitted after a wait in the fair queue is admitted; its
    // wait is one more fact.
    let queued = r.decision.as_ref().filter(|d| d.decision == "queued");
    let decision = r.decision.as_ref().filter(|d| d.decision != "queued");
    let (outcome, outcome_key) = match decision {
        Some(d) if d.decision == "degraded" => ("degraded", "req.degraded"),
        Some(_) => ("refused", "req.refused"),
        None => ("admitted", "req.admitted"),
    };
    let key_id = r
        .decision
        .as_ref()
        .map(|d| d.key_id.clone())
        .or_else(|| r.usage.as_ref().map(|u| u.key_id.clone()))
        .unwrap_or_default();
    let names = key_names(cp, actor, std::iter::once(key_id.as_str())).await?;
    let mut sentence = String::new();
    if let Some(d) = decision {
        let who = match &d.scope {
            Some(s) => who(cp, actor, lang, s).await?,
            None => String::new(),
        };
        sentence = decision_sentence(lang, cp.clock, d, &who);
        facts.push(("req.reason", lang.t(reason_key(Some(&d.reason))).into()));
        facts.push(("req.status", d.status.to_string()));
        if !who.is_empty() {
            facts.push(("req.scope", who));
        }
        facts.push(("req.at", when_secs(cp.clock, d.at)));
        facts.push(("common.app", d.app_id.clone()));
        facts.push(("req.key", key_label(lang, &names, &d.key_id)));
        facts.push(("req.model", d.model.clone()));
        if let Some(obj) = d.detail.as_object() {
            for (k, v) in obj {
                if let Some((label, shown)) = counter(lang, k, v) {
                    counters.push((k.clone(), label, shown));
                }
            }
        }
    }
    if let Some(u) = &r.usage {
        if decision.is_none() {
            sentence = admitted_sentence(lang, cp.clock, u);
            facts.push(("common.app", u.app_id.clone()));
            facts.push(("req.key", key_label(lang, &names, &u.key_id)));
            facts.push(("req.model", u.model.clone()));
        }
        if let Some(ms) = queued.and_then(|q| q.detail.get("waited_ms")?.as_i64()) {
            let why = queued.and_then(|q| q.detail.get("queue_reason")?.as_str());
            facts.push(("req.queued", queue_wait(lang, ms, why)));
        }
        if let Some(a) = &u.attribution.asked_model {
            facts.push(("req.asked_model", a.clone()));
        }
        if let Some(s) = &u.attribution.session {
            facts.push(("req.session", s.clone()));
        }
        facts.push(("req.input_tokens", thousands(u.input_tokens)));
        facts.push(("req.output_tokens", thousands(u.output_tokens)));
        facts.push(("req.cost", MicroUsd(u.cost_micro).shown()));
        facts.push((
            "req.exact_cost",
            domain::money::pico_shown(i128::from(u.exact_cost_pico())),
        ));
        if let Some(ch) = &u.charges {
            // Each component: quantity, what it is, its exact cost.
            let parts: Vec<String> = ch
                .present()
                .map(|(c, q, p)| {
                    format!(
                        "{} {} {} {}",
                        thousands(q),
                        lang.tv("unit", c.unit()),
                        lang.tv("component", c.name()),
                        domain::money::pico_shown(i128::from(p))
                    )
                })
                .collect();
            if !parts.is_empty() {
                facts.push(("req.charges", parts.join(" · ")));
            }
        }
        if let Some(t) = u.breakdown.as_ref().and_then(|b| b.served_tier.as_deref()) {
            facts.push(("req.served_tier", t.to_string()));
        }
        facts.push((
            "req.latency",
            latency(lang, u.settled_at_ms - u.started_at_ms),
        ));
        facts.push(("req.usage_status", lang.t(status_key(&u.status)).into()));
        if let Some(a) = &u.anomaly {
            // The provider's report, overruled by the sanity bound: the
            // row above is billed at the bound.
            facts.push(("req.usage_anomaly", lang.tv("anomaly", &a.kind)));
            verbatim.push(("req.reported_usage", a.reported.to_string()));
        }
        if let Some(r) = &u.raw_usage {
            // Every request the provider reported usage for: its object as
            // sent (the ledger's `raw_usage`), text the template escapes.
            verbatim.push(("req.raw_usage", r.as_str().to_string()));
        }
    }
    Ok(Found {
        request_id: r.request_id.clone(),
        tenant: r.tenant_id.clone(),
        outcome: outcome.into(),
        outcome_key,
        reason: decision.map(|d| d.reason.clone()).unwrap_or_default(),
        sentence,
        facts,
        counters,
        verbatim,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decision(reason: &str, detail: Value) -> store::RequestDecisionRow {
        store::RequestDecisionRow {
            request_id: "req_1".into(),
            at: "2026-11-03T14:03:22.5Z".parse().unwrap(),
            period: "2026-11".into(),
            day: "2026-11-03".parse().unwrap(),
            tenant_id: "search".into(),
            app_id: "a".into(),
            key_id: "k".into(),
            model: "gpt-4o-mini".into(),
            decision: "refused".into(),
            reason: reason.into(),
            status: 402,
            scope: Some("tenant:search".into()),
            detail,
            attribution: Default::default(),
        }
    }

    #[test]
    fn a_revoked_or_expired_keys_refusal_says_so() {
        let mut d = decision("invalid_api_key", json!({"key_state": "revoked"}));
        d.status = 401;
        d.scope = None;
        let en = decision_sentence(Lang::En, PlatformClock::UTC, &d, "");
        assert!(
            en.contains("(HTTP 401)") && en.contains("was revoked"),
            "{en}"
        );
        let zh = decision_sentence(Lang::Zh, PlatformClock::UTC, &d, "");
        assert!(zh.contains("已被吊销"), "{zh}");
        d.detail = json!({"key_state": "expired"});
        assert!(decision_sentence(Lang::En, PlatformClock::UTC, &d, "").contains("has expired"));
        d.detail = json!({});
        assert!(decision_sentence(Lang::En, PlatformClock::UTC, &d, "").contains("not valid"));
    }

    #[test]
    fn a_budget_refusal_reads_as_a_sentence_in_both_languages() {
        let d = decision(
            "tenant_monthly_budget_exhausted",
            json!({"scope": "tenant", "limit": "MonthlyTokens", "headroom_tokens": 120,
                "est_input_tokens": 4, "est_output_tokens": 4100, "limit_value": 1_000_000}),
        );
        let en = decision_sentence(Lang::En, PlatformClock::UTC, &d, "tenant Search");
        assert_eq!(
            en,
            "Refused at 2026-11-03 14:03:22 UTC: tenant Search had 120 tokens left of its \
             monthly token budget of 1,000,000 tokens; this request needed up to 4,104."
        );
        let zh = decision_sentence(Lang::Zh, PlatformClock::UTC, &d, "租户 Search");
        assert!(
            zh.contains("1,000,000") && zh.contains("14:03:22 UTC"),
            "{zh}"
        );
        assert!(
            !zh.contains("MonthlyTokens") && !zh.contains("Refused"),
            "{zh}"
        );
    }

    #[test]
    fn a_cost_refusal_shows_money_and_a_rate_refusal_its_retry() {
        let mut d = decision(
            "tenant_monthly_cost_exhausted",
            json!({"limit": "MonthlyCost", "headroom_cost_micro_usd": 1_500,
                "limit_value": "1234.560000"}),
        );
        let en = decision_sentence(Lang::En, PlatformClock::UTC, &d, "tenant Search");
        assert!(
            en.contains("$0.0015 left") && en.contains("$1,234.56"),
            "{en}"
        );
        d.detail = json!({"limit": "Rpm", "limit_value": 60, "retry_after_secs": 3});
        let en = decision_sentence(Lang::En, PlatformClock::UTC, &d, "app bot");
        assert!(
            en.contains("60 requests per minute") && en.ends_with("Retry after 3 s."),
            "{en}"
        );
        d.reason = "model_not_allowed".into();
        d.detail = json!({});
        d.status = 403;
        let en = decision_sentence(Lang::En, PlatformClock::UTC, &d, "");
        assert!(
            en.starts_with("Refused at 2026-11-03 14:03:22 UTC (HTTP 403):"),
            "{en}"
        );
    }

    #[test]
    fn latency_and_counters() {
        assert_eq!(latency(Lang::En, 850), "850 ms");
        assert_eq!(latency(Lang::En, 2_449), "2.4 s");
        assert_eq!(
            counter(Lang::En, "headroom_cost_micro_usd", &json!(2_500_000)),
            Some(("counter.headroom_cost", "$2.50".into()))
        );
        assert_eq!(counter(Lang::En, "limit", &json!("MonthlyTokens")), None);
    }
}
