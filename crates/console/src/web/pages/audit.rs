//! The audit log, filtered by actor, action, target and time, a page of
//! `PAGE` rows at a time (keyset paging by id: "older" continues below the
//! last id shown), and the button that checks the hash chain and names the
//! first broken row.

use super::{field_error, time_range};
use crate::api::audit;
use crate::web::{render_refusable, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::Html;
use axum::response::{IntoResponse, Response};
use domain::audit::{field_changes, FieldChange};
use domain::bill::csv_field;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use store::{AuditFilter, AuditRow};

pub struct AuditLine {
    pub id: i64,
    pub at: String,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub reason: String,
    /// Each field the entry changed, before → after.
    pub changes: Vec<FieldChange>,
}

impl AuditLine {
    pub fn of(r: &AuditRow, clock: domain::period::PlatformClock) -> AuditLine {
        let e = &r.entry;
        AuditLine {
            id: r.id,
            at: super::when_text(clock, &e.at),
            actor: e.actor.clone(),
            action: e.action.clone(),
            target: e.target.clone(),
            reason: e.reason.clone(),
            changes: field_changes(&e.before, &e.after),
        }
    }

    /// The line as a page shows it: long texts clipped (an export keeps
    /// them whole).
    pub fn clipped(mut self) -> AuditLine {
        use domain::text::REASON;
        self.reason = super::clipped(&self.reason, REASON);
        for ch in &mut self.changes {
            ch.before = super::clipped(&ch.before, REASON);
            ch.after = super::clipped(&ch.after, REASON);
        }
        self
    }
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
    render_refusable(
        AuditPage {
            c: Chrome::new(&s, "nav.audit", "/console/audit"),
            newest: before.map(|_| f.with_before(None)),
            older: next.map(|n| f.with_before(Some(n))),
            csv: f.with_before(None),
            f,
            rows: rows
                .iter()
                .map(|r| AuditLine::of(r, s.clock).clipped())
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
            vec![FieldChange {
                field: String::new(),
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
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"tollgate-audit.csv\"",
            ),
        ],
        body,
    )
        .into_response())
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
    let frag = Verified {
        c: Chrome::new(&s, "nav.audit", "/console/audit"),
        rows: check.rows,
        broken: check
            .first_broken
            .as_ref()
            .map(|r| AuditLine::of(r, s.clock)),
    };
    crate::web::fragment_or_page(&s, "nav.audit", "/console/audit", frag)
}
