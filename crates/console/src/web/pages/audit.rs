//! The audit log, filtered by actor, action, target and time, a page of
//! `PAGE` rows at a time (keyset paging by id: "older" continues below the
//! last id shown), and the button that checks the hash chain and names the
//! first broken row.

use super::time;
use crate::api::audit;
use crate::web::{render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Query, State};
use axum::response::Html;
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
    /// before → after, compact JSON.
    pub change: String,
}

impl AuditLine {
    pub fn of(r: &AuditRow) -> AuditLine {
        let e = &r.entry;
        let change = match (&e.before, &e.after) {
            (serde_json::Value::Null, serde_json::Value::Null) => String::new(),
            (serde_json::Value::Null, a) => a.to_string(),
            (b, a) => format!("{b} → {a}"),
        };
        AuditLine {
            id: r.id,
            at: format!("{} UTC", e.at.get(..19).unwrap_or(&e.at).replace('T', " ")),
            actor: e.actor.clone(),
            action: e.action.clone(),
            target: e.target.clone(),
            reason: e.reason.clone(),
            change: change.chars().take(400).collect(),
        }
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
    bad_time: bool,
    /// Query of the newest page, when this is not it.
    newest: Option<String>,
    /// Query of the next (older) page, when there is one.
    older: Option<String>,
}

pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(f): Query<Filter>,
) -> Result<Html<String>, PageError> {
    audit::may_audit(&s.actor)?;
    let times = (time("from", &f.from), time("to", &f.to));
    let (from, to, bad_time) = match times {
        (Ok(a), Ok(b)) => (a, b, false),
        _ => (None, None, true),
    };
    let before = f.before.trim().parse().ok();
    let filter = AuditFilter {
        actor: f.actor.trim().to_string(),
        action: f.action.trim().to_string(),
        target: f.target.trim().to_string(),
        from,
        to,
        before,
        limit: PAGE,
    };
    let (rows, next) = audit::page(&cp, &s.actor, &filter).await?;
    render(AuditPage {
        c: Chrome::new(&s, "nav.audit", "/console/audit"),
        newest: before.map(|_| f.with_before(None)),
        older: next.map(|n| f.with_before(Some(n))),
        f,
        rows: rows.iter().map(AuditLine::of).collect(),
        bad_time,
    })
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
        broken: check.first_broken.as_ref().map(AuditLine::of),
    };
    crate::web::fragment_or_page(&s, "nav.audit", "/console/audit", frag)
}
