//! The start page, one per role: what that person looks at first.

use super::audit::AuditLine;
use super::quota::{self, QuotaLine};
use super::thousands;
use crate::api::{audit, quota_requests, tenants, usage};
use crate::web::{render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::State;
use axum::response::Html;
use domain::roles::Role;
use std::sync::Arc;
use store::AuditFilter;

/// One tenant's month, formatted.
pub struct UsageLine {
    pub tenant: String,
    pub period: String,
    pub used: String,
    pub held: String,
    pub limit: String,
    /// Share of the token budget used, 0–100 (0 when unlimited).
    pub pct: i64,
    pub cost: String,
    pub limit_cost: String,
    pub granted: String,
    /// Effective limit = base + grants + borrowed (docs/design.md §3).
    pub base: String,
    pub borrowed: String,
}

impl UsageLine {
    pub fn of(u: &usage::MonthUsage) -> UsageLine {
        let pct = match u.limit_tokens {
            Some(l) if l > 0 => ((u.used_tokens + u.held_tokens) * 100 / l).clamp(0, 100),
            _ => 0,
        };
        UsageLine {
            tenant: u.tenant_id.clone(),
            period: u.period.clone(),
            used: thousands(u.used_tokens),
            held: thousands(u.held_tokens),
            limit: u.limit_tokens.map(thousands).unwrap_or_default(),
            pct,
            cost: u.cost.shown(),
            limit_cost: u.limit_cost.map(|c| c.shown()).unwrap_or_default(),
            granted: thousands(u.granted_tokens),
            base: u.base_limit_tokens.map(thousands).unwrap_or_default(),
            borrowed: thousands(u.borrowed_tokens),
        }
    }
}

#[derive(Template)]
#[template(path = "pages/dashboard.html")]
struct Dashboard {
    c: Chrome,
    role: &'static str,
    /// (label key, value, link)
    counts: Vec<(&'static str, String, &'static str)>,
    usage: Vec<UsageLine>,
    requests: Vec<QuotaLine>,
    audit: Vec<AuditLine>,
    show_verify: bool,
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
) -> Result<Html<String>, PageError> {
    let a = &s.actor;
    let now = chrono::Utc::now();
    let mut d = Dashboard {
        c: Chrome::new(&s, "nav.dashboard", "/console"),
        role: crate::web::role_key(a.role),
        counts: Vec::new(),
        usage: Vec::new(),
        requests: Vec::new(),
        audit: Vec::new(),
        show_verify: false,
    };
    let requests = quota_requests::visible_requests(&cp, a).await?;
    let pending = requests.iter().filter(|q| q.state == "pending").count();
    match a.role {
        Role::PlatformAdmin => {
            let ts = tenants::visible_tenants(&cp, a).await?;
            d.counts = vec![
                ("dash.tenants", ts.len().to_string(), "/console/tenants"),
                (
                    "dash.pending",
                    pending.to_string(),
                    "/console/quota-requests",
                ),
                (
                    "dash.models",
                    cp.store.models().await?.len().to_string(),
                    "/console/models",
                ),
                (
                    "dash.users",
                    cp.store.users().await?.len().to_string(),
                    "/console/users",
                ),
            ];
            let pending: Vec<_> = requests
                .iter()
                .filter(|q| q.state == "pending")
                .take(5)
                .cloned()
                .collect();
            d.requests = quota::lines(&cp, a, s.lang, &pending, now).await?;
            d.audit = recent_audit(&cp, a, 5).await?;
        }
        Role::TenantAdmin => {
            let t = a.tenant.clone().unwrap_or_default();
            d.usage = vec![UsageLine::of(&usage::month_usage(&cp, a, &t, None).await?)];
            d.counts = vec![
                (
                    "dash.apps",
                    cp.store.apps_of(a.scope(), &t).await?.len().to_string(),
                    "/console/apps",
                ),
                (
                    "dash.pending",
                    pending.to_string(),
                    "/console/quota-requests",
                ),
            ];
            let recent: Vec<_> = requests.iter().take(5).cloned().collect();
            d.requests = quota::lines(&cp, a, s.lang, &recent, now).await?;
        }
        Role::Finance => {
            for t in tenants::visible_tenants(&cp, a).await? {
                d.usage.push(UsageLine::of(
                    &usage::month_usage(&cp, a, &t.id, None).await?,
                ));
            }
        }
        Role::Auditor => {
            d.show_verify = true;
            d.audit = recent_audit(&cp, a, 10).await?;
        }
    }
    render(d)
}

async fn recent_audit(
    cp: &ControlPlane,
    a: &store::Principal,
    n: i64,
) -> Result<Vec<AuditLine>, PageError> {
    let f = AuditFilter {
        limit: n,
        ..Default::default()
    };
    Ok(audit::search(cp, a, &f)
        .await?
        .iter()
        .map(AuditLine::of)
        .collect())
}
