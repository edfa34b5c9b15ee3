//! The audit log, filtered by actor, action, target and time, and the
//! button that checks the hash chain and names the first broken row.

use super::time;
use crate::api::audit;
use crate::web::{render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Query, State};
use axum::response::Html;
use serde::Deserialize;
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
            at: e.at.get(..19).unwrap_or(&e.at).replace('T', " "),
            actor: e.actor.clone(),
            action: e.action.clone(),
            target: e.target.clone(),
            reason: e.reason.clone(),
            change: change.chars().take(400).collect(),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Filter {
    actor: String,
    action: String,
    target: String,
    from: String,
    to: String,
}

#[derive(Template)]
#[template(path = "pages/audit.html")]
struct AuditPage {
    c: Chrome,
    f: Filter,
    rows: Vec<AuditLine>,
    bad_time: bool,
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
    let filter = AuditFilter {
        actor: f.actor.trim().to_string(),
        action: f.action.trim().to_string(),
        target: f.target.trim().to_string(),
        from,
        to,
        limit: 300,
    };
    let rows = audit::search(&cp, &s.actor, &filter)
        .await?
        .iter()
        .map(AuditLine::of)
        .collect();
    render(AuditPage {
        c: Chrome::new(&s, "nav.audit", "/console/audit"),
        f,
        rows,
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
