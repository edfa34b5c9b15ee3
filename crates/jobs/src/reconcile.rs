//! `reconcile --check`: the three books side by side per tenant and period —
//! the hold engine's month counters (Redis), the ledger (Postgres) and the
//! archive (ClickHouse, closed months) — every difference named.

use crate::{JobContext, JobError, JobReport};
use chrono::{DateTime, Utc};
use domain::bill::{compare, Difference, Totals};
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use store::{RollupDifference, TenantScope};

#[derive(Debug, Clone, Serialize)]
pub struct ReconcileResult {
    pub periods: Vec<String>,
    pub tenants_checked: usize,
    pub differences: Vec<Difference>,
    /// Rollup rows that differ from the ledger events they summarise.
    pub rollups: Vec<RollupDifference>,
    /// What could not be compared, and why (a Redis month that expired…).
    pub notes: Vec<String>,
}

/// Periods checked by default: this month and the one before.
fn default_periods(ctx: &JobContext, now: DateTime<Utc>) -> Vec<String> {
    let cur = ctx.clock.month(now);
    let mut v: Vec<String> = domain::period::previous_month(&cur).into_iter().collect();
    v.push(cur);
    v
}

#[derive(Default)]
struct Sides {
    tokens: (Option<i64>, Option<i64>, Option<i64>),
    cost: (Option<i64>, Option<i64>, Option<i64>),
}

async fn check_once(ctx: &JobContext, periods: &[String]) -> Result<ReconcileResult, JobError> {
    let mut differences = vec![];
    let mut rollups = vec![];
    let mut notes = vec![];
    let mut tenants_checked = BTreeSet::new();
    let known = ctx.store.tenant_ids(&TenantScope::system()).await?;
    for period in periods {
        let closed = ctx
            .store
            .closed_month(period)
            .await?
            .filter(|m| m.is_closed());
        let purged = closed.as_ref().is_some_and(|m| m.state == "purged");
        let pg = if purged {
            BTreeMap::new()
        } else {
            rollups.extend(
                ctx.store
                    .rollup_differences(period, MAX_ROLLUP_DIFFERENCES)
                    .await?,
            );
            ctx.store
                .period_event_totals(&TenantScope::system(), period)
                .await?
        };
        let ch: Option<BTreeMap<String, Totals>> = match &closed {
            Some(m) => {
                let a = ctx.archive.as_ref().ok_or_else(|| {
                    JobError::Failed(format!(
                        "{period} is closed but no ClickHouse archive is configured"
                    ))
                })?;
                Some(a.event_totals(period, m.batch_id).await?)
            }
            None => None,
        };
        let mut tenants: BTreeSet<String> = known.iter().cloned().collect();
        tenants.extend(pg.keys().cloned());
        if let Some(c) = &ch {
            tenants.extend(c.keys().cloned());
        }
        for t in &tenants {
            let redis = ctx.quota.month_counters(t, period).await?;
            let redis_present = !redis.0.is_empty();
            let pg_t = (!purged).then(|| pg.get(t).copied().unwrap_or_default());
            let ch_t = ch.as_ref().map(|c| c.get(t).copied().unwrap_or_default());
            if pg_t.is_some_and(|x| x.requests > 0) && !redis_present {
                notes.push(format!(
                    "period={period} tenant={t}: no Redis counters (expired or not rebuilt yet); Redis not compared"
                ));
            }
            if !redis_present
                && pg_t.is_none_or(|x| x.requests == 0)
                && ch_t.is_none_or(|x| x.requests == 0)
            {
                continue;
            }
            tenants_checked.insert(t.clone());
            let r = |f: &str| {
                redis_present.then(|| redis.0.get(&format!("t:{f}")).copied().unwrap_or(0))
            };
            let s = Sides {
                tokens: (r("ut"), pg_t.map(|x| x.tokens()), ch_t.map(|x| x.tokens())),
                cost: (
                    r("uc"),
                    pg_t.map(|x| x.cost_micro),
                    ch_t.map(|x| x.cost_micro),
                ),
            };
            let scope = format!("tenant:{t}");
            differences.extend(compare(
                period, t, &scope, "tokens", s.tokens.0, s.tokens.1, s.tokens.2,
            ));
            differences.extend(compare(
                period,
                t,
                &scope,
                "cost_micro",
                s.cost.0,
                s.cost.1,
                s.cost.2,
            ));
            differences.extend(compare(
                period,
                t,
                &scope,
                "requests",
                None,
                pg_t.map(|x| x.requests),
                ch_t.map(|x| x.requests),
            ));
            // Apps and keys: Redis against the ledger (the archive keeps
            // them per event; its tenant totals cover them).
            if redis_present && !purged {
                let rows = ctx
                    .store
                    .month_usage(&TenantScope::system(), t, period)
                    .await?;
                let mut by: BTreeMap<(String, String), (i64, i64)> = BTreeMap::new();
                for row in &rows {
                    for (kind, id) in [("a", &row.app_id), ("k", &row.key_id)] {
                        let e = by.entry((kind.into(), id.clone())).or_default();
                        e.0 += row.tokens;
                        e.1 += row.cost_micro;
                    }
                }
                for field in redis.0.keys() {
                    if let Some((kind, rest)) = field.split_once(':') {
                        if let Some(id) = rest
                            .strip_suffix(":ut")
                            .or_else(|| rest.strip_suffix(":uc"))
                        {
                            if kind == "a" || kind == "k" {
                                by.entry((kind.into(), id.into())).or_default();
                            }
                        }
                    }
                }
                for ((kind, id), (tok, cost)) in by {
                    let scope = if kind == "a" {
                        format!("app:{t}/{id}")
                    } else {
                        format!("key:{id}")
                    };
                    let get = |f: &str| {
                        redis
                            .0
                            .get(&format!("{kind}:{id}:{f}"))
                            .copied()
                            .unwrap_or(0)
                    };
                    differences.extend(compare(
                        period,
                        t,
                        &scope,
                        "tokens",
                        Some(get("ut")),
                        Some(tok),
                        None,
                    ));
                    differences.extend(compare(
                        period,
                        t,
                        &scope,
                        "cost_micro",
                        Some(get("uc")),
                        Some(cost),
                        None,
                    ));
                }
            }
        }
    }
    Ok(ReconcileResult {
        periods: periods.to_vec(),
        tenants_checked: tenants_checked.len(),
        differences,
        rollups,
        notes,
    })
}

/// Rollup differences named per period (more are one damage, not news).
const MAX_ROLLUP_DIFFERENCES: i64 = 100;

impl ReconcileResult {
    pub fn is_clean(&self) -> bool {
        self.differences.is_empty() && self.rollups.is_empty()
    }
}

/// Checks `period` (or this month and the one before). Settled events
/// still in the outboxes are stored first, and a difference must persist
/// over a few seconds to be reported (events travel Redis → Postgres).
pub async fn check(
    ctx: &JobContext,
    now: DateTime<Utc>,
    period: Option<&str>,
) -> Result<ReconcileResult, JobError> {
    let periods = match period {
        Some(p) => {
            domain::period::parse_month(p)
                .ok_or_else(|| JobError::Failed("--period must be YYYY-MM".into()))?;
            vec![p.to_string()]
        }
        None => default_periods(ctx, now),
    };
    let tenants = ctx.store.tenant_ids(&TenantScope::system()).await?;
    let mut last = None;
    for attempt in 0..3 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        settlement::ledger::sweep_outboxes(&ctx.store, &ctx.quota, &tenants).await?;
        let r = check_once(ctx, &periods).await?;
        let clean = r.is_clean();
        last = Some(r);
        if clean {
            break;
        }
    }
    Ok(last.expect("at least one attempt"))
}

pub async fn run(
    ctx: &JobContext,
    now: DateTime<Utc>,
    period: Option<&str>,
) -> Result<JobReport, JobError> {
    let r = check(ctx, now, period).await?;
    Ok(JobReport {
        idle: false,
        clean: r.is_clean(),
        counts: json!({"periods": r.periods.len(), "tenants": r.tenants_checked, "differences": r.differences.len(),
            "rollup_differences": r.rollups.len()}),
        summary: format!(
            "reconcile: {} period(s), {} tenants, {} difference(s), {} rollup difference(s)",
            r.periods.len(),
            r.tenants_checked,
            r.differences.len(),
            r.rollups.len()
        ),
        detail: serde_json::to_value(&r).unwrap_or_default(),
    })
}
