//! A provider report the sanity bound overruled (`domain::usage::bill`):
//! counted in `tollgate_usage_anomalies_total{model}`, logged, and posted as
//! a console notice to the tenant — at most one notice per tenant and model
//! a minute, so a provider that misreports every answer cannot flood the
//! notices. Every such request keeps its raw report in its ledger row.

use crate::metrics_names as m;
use crate::Gateway;
use domain::usage::{UsageAnomaly, UsageEvent};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const NOTICE_EVERY: Duration = Duration::from_secs(60);

pub fn report(gw: &Arc<Gateway>, e: &UsageEvent, a: &UsageAnomaly) {
    metrics::counter!(m::USAGE_ANOMALIES, "model" => e.model.clone(), "kind" => a.kind.clone())
        .increment(1);
    tracing::warn!(request_id = %e.request_id, model = %e.model, kind = %a.kind,
        billed_input = e.input_tokens, billed_output = e.output_tokens,
        "provider usage overruled by the sanity bound");
    if !notice_due(&e.tenant_id, &e.model) {
        return;
    }
    let message = format!(
        "model {}: the provider reported usage the gateway does not believe ({}); request {} was billed at {} input + {} output tokens, its raw report is kept in the ledger",
        e.model, a.kind, e.request_id, e.input_tokens, e.output_tokens
    );
    let detail = json!({"request_id": e.request_id, "model": e.model, "kind": a.kind,
        "reported": a.reported, "billed_input_tokens": e.input_tokens,
        "billed_output_tokens": e.output_tokens});
    let (store, tenant) = (gw.store.clone(), e.tenant_id.clone());
    tokio::spawn(async move {
        if let Err(err) = store
            .add_notice(Some(&tenant), "usage_anomaly", &message, &detail)
            .await
        {
            tracing::warn!(error = %err, "usage anomaly notice not stored");
        }
    });
}

fn notice_due(tenant: &str, model: &str) -> bool {
    static LAST: OnceLock<Mutex<HashMap<(String, String), Instant>>> = OnceLock::new();
    let mut last = LAST
        .get_or_init(Default::default)
        .lock()
        .expect("notice lock");
    let now = Instant::now();
    let key = (tenant.to_string(), model.to_string());
    if last
        .get(&key)
        .is_some_and(|t| now.duration_since(*t) < NOTICE_EVERY)
    {
        return false;
    }
    if last.len() > 10_000 {
        last.retain(|_, t| now.duration_since(*t) < NOTICE_EVERY);
    }
    last.insert(key, now);
    true
}
