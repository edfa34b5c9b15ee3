//! Budget alerts (70% and 90% of a monthly budget used, once per scope,
//! measure, threshold and month) and the month-end forecast (an alert when
//! the forecast exceeds the budget). Each alert is a console notice and a
//! JSON webhook; deliveries are retried with backoff until they succeed.

use crate::{JobContext, JobError, JobReport};
use chrono::{DateTime, Utc};
use domain::bill::{forecast_month_end, thresholds_reached};
use domain::limits;
use domain::{Limits, MicroUsd};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use store::{AlertRow, NewAlert, TenantScope};

/// A scope with monthly budgets, its effective limits and what it used.
struct Budgeted {
    tenant: String,
    /// `tenant:<t>` / `app:<t>/<a>`
    scope: String,
    limits: Limits,
    used_tokens: i64,
    used_cost: i64,
}

fn measure_value(measure: &str, amount: i64) -> Value {
    match measure {
        "cost" => json!(MicroUsd(amount)),
        _ => json!(amount),
    }
}

/// Every tenant and app with a monthly budget, with its effective limits
/// at `now` (what the gateway enforces: base + grants + borrowed) and what it used this month (the hold engine's live counters; the
/// ledger when Redis cannot answer).
async fn budgeted_scopes(
    ctx: &JobContext,
    period: &str,
    now: DateTime<Utc>,
) -> Result<Vec<Budgeted>, JobError> {
    let cat = ctx.store.load_catalog(&TenantScope::system()).await?;
    let borrowed = ctx.store.borrowed(&TenantScope::system()).await?;
    let grants = |t: &str, app: Option<&str>| -> Vec<limits::Grant> {
        cat.grants
            .iter()
            .filter(|g| g.tenant_id == t && g.app_id.as_deref() == app)
            .map(|g| g.grant())
            .collect()
    };
    let borrowed_by = |t: &str| {
        borrowed
            .iter()
            .find(|b| b.tenant_id == t && b.period == period)
            .map_or_else(limits::Borrowed::default, |b| limits::Borrowed {
                tokens: b.tokens,
                cost_micro: b.cost_micro,
            })
    };
    let has_budget = |l: &Limits| l.monthly_tokens.is_some() || l.monthly_cost_usd.is_some();
    let mut out = vec![];
    for t in &cat.tenants {
        let apps: Vec<_> = cat
            .apps
            .iter()
            .filter(|a| a.tenant_id == t.id && has_budget(&a.limits))
            .collect();
        if !has_budget(&t.limits) && apps.is_empty() {
            continue;
        }
        let (counters, ledger) = match ctx.quota.month_counters(&t.id, period).await {
            Ok(c) if c.is_rebuilt() => (Some(c), vec![]),
            _ => (
                None,
                ctx.store
                    .month_usage(&TenantScope::system(), &t.id, period)
                    .await?,
            ),
        };
        let used = |scope: &str, app: Option<&str>| match &counters {
            Some(c) => (c.used_tokens(scope), c.used_cost(scope)),
            None => ledger
                .iter()
                .filter(|r| app.is_none_or(|a| r.app_id == a))
                .fold((0, 0), |(a, b), r| (a + r.tokens, b + r.cost_micro)),
        };
        if has_budget(&t.limits) {
            let (ut, uc) = used("t", None);
            out.push(Budgeted {
                tenant: t.id.clone(),
                scope: format!("tenant:{}", t.id),
                limits: limits::effective(&t.limits, &grants(&t.id, None), borrowed_by(&t.id), now),
                used_tokens: ut,
                used_cost: uc,
            });
        }
        for a in apps {
            let (ut, uc) = used(&format!("a:{}", a.id), Some(&a.id));
            let app_grants = grants(&t.id, Some(&a.id));
            out.push(Budgeted {
                tenant: t.id.clone(),
                scope: format!("app:{}/{}", t.id, a.id),
                limits: limits::effective(&a.limits, &app_grants, Default::default(), now),
                used_tokens: ut,
                used_cost: uc,
            });
        }
    }
    Ok(out)
}

pub async fn budget_alerts(ctx: &JobContext, now: DateTime<Utc>) -> Result<JobReport, JobError> {
    let period = ctx.clock.month(now);
    let scopes = budgeted_scopes(ctx, &period, now).await?;
    let mut recorded = 0;
    for s in &scopes {
        let measures = [
            ("tokens", s.used_tokens, s.limits.monthly_tokens),
            ("cost", s.used_cost, s.limits.monthly_cost_usd.map(|m| m.0)),
        ];
        for (measure, used, limit) in measures {
            let Some(limit) = limit else { continue };
            for p in thresholds_reached(used, limit) {
                let payload = json!({
                    "type": "budget_alert",
                    "tenant_id": s.tenant,
                    "scope": s.scope,
                    "period": period,
                    "measure": measure,
                    "threshold_percent": p,
                    "used": measure_value(measure, used),
                    "limit": measure_value(measure, limit),
                    "at": now,
                });
                let notice = format!(
                    "{} has used {}% or more of its monthly {} budget ({} of {}) in {}",
                    s.scope,
                    p,
                    measure,
                    payload["used"]
                        .as_str()
                        .map(String::from)
                        .unwrap_or(used.to_string()),
                    payload["limit"]
                        .as_str()
                        .map(String::from)
                        .unwrap_or(limit.to_string()),
                    period
                );
                let new = NewAlert {
                    tenant_id: s.tenant.clone(),
                    scope: s.scope.clone(),
                    period: period.clone(),
                    measure: measure.into(),
                    threshold: format!("used_{p}"),
                    payload,
                    notice,
                    webhook: ctx.settings.webhook_url.is_some(),
                    at: now,
                };
                if ctx.store.record_alert(&new).await? {
                    recorded += 1;
                }
            }
        }
    }
    let (delivered, failed) = deliver_due(ctx, now).await?;
    Ok(JobReport::ok(
        json!({"scopes": scopes.len(), "alerts_recorded": recorded, "delivered": delivered, "delivery_failures": failed}),
        format!("alerts: {} budgeted scopes, {recorded} new alerts, {delivered} delivered, {failed} delivery failures", scopes.len()),
    ))
}

/// Month-end forecast per tenant from this month's daily spend; an alert
/// (once per tenant, measure and month) when it exceeds the budget.
pub async fn forecast(ctx: &JobContext, now: DateTime<Utc>) -> Result<JobReport, JobError> {
    let period = ctx.clock.month(now);
    let days = domain::period::days_in_month(&period).unwrap_or(30);
    let today = ctx.clock.day_of_month(now);
    let scopes = budgeted_scopes(ctx, &period, now).await?;
    let day_rows = ctx.store.day_rows(&TenantScope::system(), &period).await?;
    let mut detail = vec![];
    let mut over = 0;
    for s in scopes.iter().filter(|s| s.scope.starts_with("tenant:")) {
        let mut cost: BTreeMap<u32, i64> = BTreeMap::new();
        let mut tokens: BTreeMap<u32, i64> = BTreeMap::new();
        for r in day_rows.iter().filter(|r| r.tenant_id == s.tenant) {
            let d: u32 = r.day[8..].parse().unwrap_or(0);
            *cost.entry(d).or_default() += r.totals.cost_micro;
            *tokens.entry(d).or_default() += r.totals.tokens();
        }
        let measures = [
            (
                "cost",
                forecast_month_end(&cost, today, days),
                s.limits.monthly_cost_usd.map(|m| m.0),
            ),
            (
                "tokens",
                forecast_month_end(&tokens, today, days),
                s.limits.monthly_tokens,
            ),
        ];
        for (measure, fc, limit) in measures {
            let (Some(fc), Some(limit)) = (fc, limit) else {
                continue;
            };
            detail.push(json!({"tenant_id": s.tenant, "measure": measure, "forecast": measure_value(measure, fc), "limit": measure_value(measure, limit)}));
            if fc <= limit {
                continue;
            }
            over += 1;
            let payload = json!({
                "type": "forecast_over_budget",
                "tenant_id": s.tenant,
                "scope": s.scope,
                "period": period,
                "measure": measure,
                "forecast": measure_value(measure, fc),
                "limit": measure_value(measure, limit),
                "at": now,
            });
            let notice = format!(
                "{} is forecast to spend {} {} by the end of {}, over its budget of {}",
                s.tenant,
                payload["forecast"]
                    .as_str()
                    .map(String::from)
                    .unwrap_or(fc.to_string()),
                measure,
                period,
                payload["limit"]
                    .as_str()
                    .map(String::from)
                    .unwrap_or(limit.to_string()),
            );
            ctx.store
                .record_alert(&NewAlert {
                    tenant_id: s.tenant.clone(),
                    scope: s.scope.clone(),
                    period: period.clone(),
                    measure: measure.into(),
                    threshold: "forecast_over_budget".into(),
                    payload,
                    notice,
                    webhook: ctx.settings.webhook_url.is_some(),
                    at: now,
                })
                .await?;
        }
    }
    let (delivered, failed) = deliver_due(ctx, now).await?;
    Ok(JobReport {
        idle: false,
        clean: true,
        counts: json!({"forecasts": detail.len(), "over_budget": over, "delivered": delivered, "delivery_failures": failed}),
        detail: json!(detail),
        summary: format!("forecast: {} forecasts, {over} over budget", detail.len()),
    })
}

/// Backoff before the next run retries a delivery: 1 min doubling to 1 h.
fn backoff(attempts: i32) -> chrono::Duration {
    let mins = 1i64 << attempts.clamp(0, 6);
    chrono::Duration::minutes(mins.min(60))
}

async fn post(ctx: &JobContext, url: &str, a: &AlertRow) -> Result<(), String> {
    let r = ctx
        .http
        .post(url)
        .header("x-tollgate-alert-id", a.id.to_string())
        .json(&a.payload)
        .send()
        .await
        .map_err(|e| format!("webhook unreachable: {}", e.without_url()))?;
    if r.status().is_success() {
        Ok(())
    } else {
        Err(format!("webhook answered {}", r.status()))
    }
}

/// Delivers every alert due by `now`: a few quick retries within the run,
/// then the next runs retry with backoff until `webhook_max_attempts`.
pub async fn deliver_due(ctx: &JobContext, now: DateTime<Utc>) -> Result<(u64, u64), JobError> {
    let Some(url) = ctx.settings.webhook_url.as_deref() else {
        return Ok((0, 0));
    };
    let (mut delivered, mut failed) = (0, 0);
    for a in ctx.store.due_alerts(&TenantScope::system(), now).await? {
        let mut attempts = a.attempts;
        let mut last = String::new();
        let mut ok = false;
        for i in 0..ctx.settings.webhook_quick_retries.max(1) {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(200 << i)).await;
            }
            attempts += 1;
            match post(ctx, url, &a).await {
                Ok(()) => {
                    ok = true;
                    break;
                }
                Err(e) => last = e,
            }
        }
        if ok {
            ctx.store.alert_delivered(a.id, attempts).await?;
            delivered += 1;
        } else {
            failed += 1;
            let give_up = attempts >= ctx.settings.webhook_max_attempts;
            tracing::warn!(alert = a.id, attempts, error = %last, give_up, "budget alert webhook failed");
            ctx.store
                .alert_failed(a.id, attempts, &last, now + backoff(attempts), give_up)
                .await?;
        }
    }
    Ok((delivered, failed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_an_hour() {
        assert_eq!(backoff(0), chrono::Duration::minutes(1));
        assert_eq!(backoff(3), chrono::Duration::minutes(8));
        assert_eq!(backoff(50), chrono::Duration::minutes(60));
    }
}
