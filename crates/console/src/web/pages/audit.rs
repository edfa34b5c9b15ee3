//! The audit log, filtered by actor, action, target and time, a page of
//! `PAGE` rows at a time (keyset paging by id: "older" continues below the
//! last id shown), and the button that checks the hash chain and names the
//! first broken row.

use super::bills::NoticeNames;
use super::{field_error, time_range};
use crate::api::audit;
use crate::i18n::Lang;
use crate::web::{render_refusable, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Query, State};
use axum::response::Html;
use axum::response::Response;
use domain::audit::field_changes;
use domain::bill::csv_field;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use store::{AuditFilter, AuditRow};

/// One change of an entry: the stored field path (`limits.rpm`, kept in
/// the row's `data-field`), its label and the values before → after.
pub struct ChangeLine {
    pub field: String,
    pub label: String,
    pub before: String,
    pub after: String,
}

/// An audit entry. `of` keeps it as stored (the CSV export's record);
/// `shown` words it for a page in the reader's language: the action's
/// name, who and what by kind and name, each change's label, money in
/// dollars (never micro-dollars).
pub struct AuditLine {
    pub id: i64,
    pub at: String,
    pub actor: String,
    pub action: String,
    /// The action as stored (`key.revoke`), kept in `data-action`.
    pub action_code: String,
    pub target: String,
    /// The target as stored (`key:<id>`), kept in `data-target`.
    pub target_code: String,
    pub reason: String,
    /// Each field the entry changed, before → after.
    pub changes: Vec<ChangeLine>,
}

impl AuditLine {
    pub fn of(r: &AuditRow, clock: domain::period::PlatformClock) -> AuditLine {
        let e = &r.entry;
        AuditLine {
            id: r.id,
            at: super::when_text(clock, &e.at),
            actor: e.actor.clone(),
            action: e.action.clone(),
            action_code: e.action.clone(),
            target: e.target.clone(),
            target_code: e.target.clone(),
            reason: e.reason.clone(),
            changes: field_changes(&e.before, &e.after)
                .into_iter()
                .map(|c| ChangeLine {
                    label: c.field.clone(),
                    field: c.field,
                    before: c.before,
                    after: c.after,
                })
                .collect(),
        }
    }

    /// The line in `lang`, names from `names` and from the entry itself
    /// (a key's or an app's `name` in its before/after); long texts
    /// clipped (an export keeps them whole).
    pub fn shown(
        r: &AuditRow,
        clock: domain::period::PlatformClock,
        lang: Lang,
        names: &AuditNames,
    ) -> AuditLine {
        use domain::text::REASON;
        let e = &r.entry;
        let mut l = AuditLine::of(r, clock);
        l.action = lang.tv("action", &e.action);
        l.actor = who(lang, &e.actor, names);
        l.target = what(lang, e, names);
        l.reason = super::clipped(&l.reason, REASON);
        // The thing's own id is its target's (named above).
        l.changes.retain(|c| c.field != "id");
        for ch in &mut l.changes {
            ch.label = field_label(lang, &ch.field);
            let value = |v: &str| match names.ids.get(v) {
                Some(name) => name.clone(),
                None => super::clipped(&field_value(lang, &ch.field, v), REASON),
            };
            ch.before = value(&ch.before);
            ch.after = value(&ch.after);
        }
        l
    }
}

/// The names an audit page shows for ids: tenants', and the keys' and
/// users' whose ids the entries hold (a target `key:<id>`, a changed value
/// such as a quota request's `requested_by`).
pub struct AuditNames {
    tenants: NoticeNames,
    /// A key's or a user's id → its name or email.
    ids: std::collections::HashMap<String, String>,
    /// A quota request's id → its tenant.
    quota_tenants: std::collections::HashMap<String, String>,
}

impl AuditNames {
    pub async fn of(
        cp: &ControlPlane,
        s: &Session,
        rows: &[AuditRow],
    ) -> Result<AuditNames, PageError> {
        let mut uuids: Vec<uuid::Uuid> = Vec::new();
        for r in rows {
            let e = &r.entry;
            let values = field_changes(&e.before, &e.after)
                .into_iter()
                .flat_map(|c| [c.before, c.after]);
            let target = e.target.strip_prefix("key:").map(String::from);
            uuids.extend(
                target
                    .into_iter()
                    .chain(values)
                    .filter_map(|v| v.parse::<uuid::Uuid>().ok()),
            );
        }
        uuids.sort();
        uuids.dedup();
        let mut ids = std::collections::HashMap::new();
        if !uuids.is_empty() {
            for (id, name) in cp.store.key_names(s.actor.scope(), &uuids).await? {
                ids.insert(id.to_string(), name);
            }
            for (id, email) in cp.store.user_emails(&uuids).await? {
                ids.insert(id.to_string(), email);
            }
        }
        let mut quota_tenants = std::collections::HashMap::new();
        if rows
            .iter()
            .any(|r| r.entry.target.starts_with("quota_request:"))
        {
            for q in cp.store.quota_requests(s.actor.scope()).await? {
                quota_tenants.insert(q.id.to_string(), q.tenant_id);
            }
        }
        Ok(AuditNames {
            tenants: NoticeNames::tenants(cp, s).await?,
            ids,
            quota_tenants,
        })
    }
}

/// Who acted: a person (their email), or a job or replica by its kind and
/// name (`job:grant-expiry` → "job grant expiry").
fn who(lang: Lang, actor: &str, names: &AuditNames) -> String {
    match actor.split_once(':') {
        Some(("job", job)) => format!("{} {}", lang.t("target.job"), lang.tv("job", job)),
        Some((kind, _)) if lang.tv("target", kind) != kind => what_named(lang, actor, names, None),
        _ => actor.to_string(),
    }
}

/// What an entry acted on: the target's kind and its name (a tenant's from
/// the tenants, a key's or an app's from the entry), never a bare id where
/// a name exists.
fn what(lang: Lang, e: &domain::audit::AuditEntry, names: &AuditNames) -> String {
    let named = |v: &serde_json::Value| v.get("name").and_then(|n| n.as_str()).map(String::from);
    let name = named(&e.after).or_else(|| named(&e.before));
    what_named(lang, &e.target, names, name)
}

fn what_named(lang: Lang, target: &str, names: &AuditNames, name: Option<String>) -> String {
    let Some((kind, id)) = target.split_once(':') else {
        return lang.tv("target", target);
    };
    let label = lang.tv("target", kind);
    let name = match kind {
        "tenant" => names.tenants.tenant(id),
        "key" => name
            .or_else(|| names.ids.get(id).cloned())
            .unwrap_or_else(|| id.to_string()),
        "app" => {
            let (t, app) = id.split_once('/').unwrap_or(("", id));
            let app = name.unwrap_or_else(|| app.to_string());
            return lang
                .t("notice.scope_app")
                .replace("{app}", &app)
                .replace("{tenant}", &names.tenants.tenant(t));
        }
        "keys" => return lang.t("target.keys_n").replace("{n}", id),
        // A quota request has no name: whose it is.
        "quota_request" => match names.quota_tenants.get(id) {
            Some(t) => {
                return lang
                    .t("target.quota_request_of")
                    .replace("{tenant}", &names.tenants.tenant(t))
            }
            None => id.to_string(),
        },
        _ => name.unwrap_or_else(|| id.to_string()),
    };
    format!("{label} {name}")
}

/// A changed field's label: a limit's as the limits form names it, else
/// the table's `field.<path>` or `field.<last part>`, else its path.
fn field_label(lang: Lang, field: &str) -> String {
    if let Some(limit) = field.strip_prefix("limits.") {
        let key = super::limits::label_key(limit);
        if !key.is_empty() {
            return lang.t(key).to_string();
        }
    }
    for tags in ["attribution.default_tags.", "attribution.tags."] {
        if let Some(tag) = field.strip_prefix(tags) {
            return lang.t("field.tag_named").replace("{tag}", tag);
        }
    }
    let last = field.rsplit('.').next().unwrap_or(field);
    for k in [field, last] {
        let l = lang.tv("field", k);
        if l != k {
            return l;
        }
    }
    field.to_string()
}

/// A changed value as a page shows it: money (a `…_usd` amount, a
/// `…micro…` count of micro-dollars) in dollars, a limit's number grouped.
fn field_value(lang: Lang, field: &str, v: &str) -> String {
    // A stored code among the values (a role, a priority, a model kind).
    let last = field.rsplit('.').next().unwrap_or(field);
    if let "role" | "priority" | "kind" = last {
        return lang.tv(last, v);
    }
    if field.contains("micro") {
        if let Ok(n) = v.parse::<i64>() {
            return domain::MicroUsd(n).shown();
        }
    }
    if field.starts_with("limits.") || field.ends_with("_usd") {
        return super::limits::shown(field, v);
    }
    v.to_string()
}

/// Rows per page.
const PAGE: i64 = 100;

#[derive(Deserialize, Serialize, Default)]
#[serde(default)]
pub struct Filter {
    actor: String,
    action: String,
    target: String,
    from: String,
    to: String,
    /// The page below this id ("" = the newest page).
    #[serde(skip_serializing_if = "String::is_empty")]
    before: String,
}

impl Filter {
    /// The query string of this filter with another page key.
    fn with_before(&self, before: Option<i64>) -> String {
        let page = Filter {
            actor: self.actor.clone(),
            action: self.action.clone(),
            target: self.target.clone(),
            from: self.from.clone(),
            to: self.to.clone(),
            before: before.map(|b| b.to_string()).unwrap_or_default(),
        };
        serde_urlencoded::to_string(&page).unwrap_or_default()
    }
}

#[derive(Template)]
#[template(path = "pages/audit.html")]
struct AuditPage {
    c: Chrome,
    f: Filter,
    rows: Vec<AuditLine>,
    /// The filter's refusals: (field, message key), beside the fields.
    errors: Vec<(&'static str, &'static str)>,
    /// Query of the newest page, when this is not it.
    newest: Option<String>,
    /// Query of the next (older) page, when there is one.
    older: Option<String>,
    /// Query of the CSV export of this filter.
    csv: String,
}

/// The store's filter for a page of this filter; a time that cannot be
/// read, or a From after the To, is refused with each field's message key
/// (the page shows no rows then, rather than every row as if unfiltered).
fn store_filter(
    f: &Filter,
    clock: domain::period::PlatformClock,
    limit: i64,
) -> Result<AuditFilter, Vec<(&'static str, &'static str)>> {
    let (from, to) = time_range(clock, &f.from, &f.to)?;
    Ok(AuditFilter {
        actor: f.actor.trim().to_string(),
        action: f.action.trim().to_string(),
        target: f.target.trim().to_string(),
        from,
        to,
        before: f.before.trim().parse().ok(),
        limit,
    })
}

pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(f): Query<Filter>,
) -> Result<Response, PageError> {
    audit::may_audit(&s.actor)?;
    let (rows, next, before, errors) = match store_filter(&f, s.clock, PAGE) {
        Ok(filter) => {
            let (rows, next) = audit::page(&cp, &s.actor, &filter).await?;
            (rows, next, filter.before, vec![])
        }
        Err(errors) => (Vec::new(), None, None, errors),
    };
    let refused = !errors.is_empty();
    let names = AuditNames::of(&cp, &s, &rows).await?;
    render_refusable(
        AuditPage {
            c: Chrome::new(&s, "nav.audit", "/console/audit"),
            newest: before.map(|_| f.with_before(None)),
            older: next.map(|n| f.with_before(Some(n))),
            csv: f.with_before(None),
            f,
            rows: rows
                .iter()
                .map(|r| AuditLine::shown(r, s.clock, s.lang, &names))
                .collect(),
            errors,
        },
        refused,
    )
}

impl AuditPage {
    /// The message key beside `field`, if the filter refused it.
    fn error(&self, field: &str) -> Option<&'static str> {
        field_error(&self.errors, field)
    }
}

/// Rows one export reads at most.
const EXPORT_ROWS: i64 = 10_000;

/// The filtered log as CSV, one line per field change (times in UTC).
pub async fn csv_export(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(f): Query<Filter>,
) -> Result<Response, PageError> {
    audit::may_audit(&s.actor)?;
    let filter = store_filter(&f, s.clock, EXPORT_ROWS).map_err(|e| {
        let (field, key) = e.first().copied().unwrap_or(("from", "err.bad_time"));
        crate::error::ApiError::field(field, key)
    })?;
    let (rows, _) = audit::page(&cp, &s.actor, &filter).await?;
    let mut body = String::from("id,at_utc,actor,action,target,field,before,after,reason\n");
    for r in &rows {
        // The file's times are UTC, as its column says.
        let l = AuditLine::of(r, domain::period::PlatformClock::UTC);
        let head = [l.id.to_string(), l.at.clone(), l.actor, l.action, l.target];
        let changes = if l.changes.is_empty() {
            vec![ChangeLine {
                field: String::new(),
                label: String::new(),
                before: String::new(),
                after: String::new(),
            }]
        } else {
            l.changes
        };
        for ch in changes {
            let line: Vec<String> = head
                .iter()
                .cloned()
                .chain([ch.field, ch.before, ch.after, l.reason.clone()])
                .map(|v| csv_field(&v))
                .collect();
            body.push_str(&line.join(","));
            body.push('\n');
        }
    }
    Ok(crate::api::bills::console_csv_response(
        "tollgate-audit.csv".into(),
        body,
    ))
}

#[derive(Template)]
#[template(path = "partials/verify.html")]
struct Verified {
    c: Chrome,
    rows: usize,
    broken: Option<AuditLine>,
}

/// Checks the chain (a read: GET) and answers with the result fragment.
pub async fn verify(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
) -> Result<Html<String>, PageError> {
    let check = audit::check_chain(&cp, &s.actor).await?;
    let names = AuditNames::of(&cp, &s, check.first_broken.as_slice()).await?;
    let frag = Verified {
        c: Chrome::new(&s, "nav.audit", "/console/audit"),
        rows: check.rows,
        broken: check
            .first_broken
            .as_ref()
            .map(|r| AuditLine::shown(r, s.clock, s.lang, &names)),
    };
    crate::web::fragment_or_page(&s, "nav.audit", "/console/audit", frag)
}
