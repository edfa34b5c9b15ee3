//! Closing holds that nobody will settle: a request whose replica crashed
//! (orphan: its replica's heartbeat is gone) or that has been open longer
//! than any request can run (stale). Each is settled at its estimate with
//! status `expired`, through the same idempotent settle script, so a late
//! real settle finds the hold closed and changes nothing. Then the events
//! it settled are stored, and those the outboxes still hold from longer
//! ago than the writers' grace (younger ones are the writers').

use crate::ledger::{store_from_outbox, sweep_outside_grace};
use domain::period::PlatformClock;
use domain::usage::UsageEvent;
use domain::Limits;
use quota::{OpenHold, QuotaEngine, SettleOutcome, SettleRequest};
use std::collections::HashMap;
use std::time::Duration;
use store::Store;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReconcileReport {
    pub closed_stale: u64,
    pub closed_orphaned: u64,
    /// Leases of dead replicas (or untouched past the stale age) freed.
    pub leases_expired: u64,
    pub outbox_stored: u64,
}

pub struct HoldAges {
    /// A hold older than this is closed whatever its replica does.
    pub stale_after: Duration,
    /// A hold older than this whose replica has no heartbeat is closed.
    pub orphan_after: Duration,
    /// An outbox event settled longer ago than this is no live writer's
    /// (`crate::ledger::writer_grace` of the ledger writer's linger).
    pub writer_grace: Duration,
}

const PAGE: usize = 500;

async fn replica_alive(
    quota: &QuotaEngine,
    cache: &mut HashMap<String, bool>,
    replica: &str,
) -> crate::Result<bool> {
    if let Some(v) = cache.get(replica) {
        return Ok(*v);
    }
    let v = quota.replica_alive(replica).await?;
    cache.insert(replica.to_string(), v);
    Ok(v)
}

pub async fn close_abandoned_holds(
    store: &Store,
    quota: &QuotaEngine,
    tenants: &[String],
    clock: &PlatformClock,
    now_ms: i64,
    ages: &HoldAges,
) -> crate::Result<ReconcileReport> {
    let mut report = ReconcileReport::default();
    let mut alive: HashMap<String, bool> = HashMap::new();
    let mut closed: Vec<UsageEvent> = Vec::new();
    let stale_before = now_ms - ages.stale_after.as_millis() as i64;
    for t in tenants {
        // Page through the tenant's old holds; closing one removes it from
        // the index, so the next page starts that much earlier.
        let mut offset = 0;
        loop {
            // One tenant's trouble must not starve the others: log and go on.
            let before = now_ms - ages.orphan_after.as_millis() as i64;
            let (open, gone) = match quota.open_holds(t, before, offset, PAGE).await {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(tenant = %t, error = %e, "abandoned-hold sweep could not read open holds");
                    break;
                }
            };
            let seen = open.len() + gone.len();
            let mut removed = 0;
            if !gone.is_empty() {
                match quota.forget_open(t, &gone).await {
                    Ok(()) => removed += gone.len(),
                    Err(e) => {
                        tracing::warn!(tenant = %t, error = %e, "abandoned-hold sweep could not prune the open-holds index")
                    }
                }
            }
            for h in open {
                let stale = h.at_ms < stale_before;
                if !stale && replica_alive(quota, &mut alive, &h.replica).await? {
                    continue;
                }
                if let Some(event) = expire(quota, t, &h, clock, now_ms).await? {
                    closed.push(event);
                    removed += 1;
                    if stale {
                        report.closed_stale += 1;
                    } else {
                        report.closed_orphaned += 1;
                    }
                }
            }
            if seen < PAGE {
                break;
            }
            offset += seen - removed;
        }
    }
    for t in tenants {
        report.leases_expired +=
            expire_abandoned_leases(quota, t, &mut alive, now_ms, ages).await?;
    }
    // The events settled here, stored now; then what the outboxes hold from
    // before the writers' grace (lost by a crash, a full queue, Postgres
    // down). Younger events are in some writer's batch: storing them too
    // would race it (docs/decisions.md, "Ledger").
    for chunk in closed.chunks(PAGE) {
        report.outbox_stored += store_from_outbox(store, quota, chunk).await?;
    }
    report.outbox_stored +=
        sweep_outside_grace(store, quota, tenants, now_ms, ages.writer_grace).await?;
    Ok(report)
}

/// Leases are freed like orphaned holds: not touched for `orphan_after`
/// and their replica has no heartbeat, or not touched for `stale_after`.
/// What they still hold goes back to the scopes (docs/leases.md).
async fn expire_abandoned_leases(
    quota: &QuotaEngine,
    tenant: &str,
    alive: &mut HashMap<String, bool>,
    now_ms: i64,
    ages: &HoldAges,
) -> crate::Result<u64> {
    let before = now_ms - ages.orphan_after.as_millis() as i64;
    let stale_before = now_ms - ages.stale_after.as_millis() as i64;
    let leases = match quota.open_leases(tenant, before).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(tenant, error = %e, "abandoned-hold sweep could not read leases");
            return Ok(0);
        }
    };
    let mut n = 0;
    for l in leases {
        let stale = l.touched_ms < stale_before;
        if !stale && replica_alive(quota, alive, &l.replica).await? {
            continue;
        }
        if quota.lease_expire(tenant, &l).await? {
            tracing::warn!(tenant, lease = %l.lease_id, replica = %l.replica, tokens = l.tokens, slots = l.slots, "abandoned lease freed");
            n += 1;
        }
    }
    Ok(n)
}

async fn expire(
    quota: &QuotaEngine,
    tenant: &str,
    h: &OpenHold,
    clock: &PlatformClock,
    now_ms: i64,
) -> crate::Result<Option<UsageEvent>> {
    let event = UsageEvent {
        request_id: h.request_id.clone(),
        tenant_id: tenant.to_string(),
        app_id: h.app.clone(),
        key_id: h.key.clone(),
        model: h.model.clone(),
        period: h.month.clone(),
        day: clock.day(chrono::DateTime::from_timestamp_millis(now_ms).unwrap_or_default()),
        input_tokens: h.est_input,
        output_tokens: h.est_output,
        cost_micro: h.est_cost,
        cost_pico: 0,
        est_tokens: h.est_input + h.est_output,
        est_cost_micro: h.est_cost,
        overrun_tokens: 0,
        overrun_cost_micro: 0,
        status: "expired".into(),
        stream: false,
        usage_source: "estimated".into(),
        replica: h.replica.clone(),
        // Booked at the time the request was received, as the gateway
        // books it (the request log is in id order); a hold whose id
        // carries no time, at the hold's own time.
        started_at_ms: domain::request_id::time_of(&h.request_id)
            .map_or(h.at_ms, |t| t.timestamp_millis()),
        settled_at_ms: now_ms,
        deployment: None,
        breakdown: None,
        charges: None,
        raw_usage: None,
        attribution: Default::default(),
        anomaly: None,
    };
    let json = event.to_json();
    // Settling at the estimate moves no token bucket: the limits only bound
    // bucket refunds, and there is nothing to refund.
    let none = Limits::default();
    let req = SettleRequest {
        request_id: &h.request_id,
        tenant,
        app: &h.app,
        key: &h.key,
        month: &h.month,
        input_tokens: h.est_input,
        output_tokens: h.est_output,
        cost: h.est_cost,
        event_json: &json,
        status: "expired",
        limits: [&none, &none, &none],
        // The hold's own estimate: nothing a provider reported.
        bound: domain::usage::Bound::SAFE,
    };
    let settled = quota
        .settle_digest(&req, h.end_user_digest.as_deref())
        .await;
    match settled? {
        SettleOutcome::Settled { .. } => {
            tracing::warn!(tenant, request_id = %h.request_id, replica = %h.replica, "abandoned hold closed at its estimate");
            Ok(Some(event))
        }
        SettleOutcome::AlreadyClosed { .. } => Ok(None),
    }
}
