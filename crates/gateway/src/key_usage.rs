//! `GET /v1/usage`: what a key has left, asked with the key itself
//! (docs/clients.md, "What a key has left"). Every limit of its tenant, app
//! and key at the effective value the gateway enforces
//! (`KeyEntry::effective_limits`, i.e. `domain::limits::effective`), with
//! used and held read from the hold engine's own counters in Redis, and
//! the key's spend this month. A separate route: nothing here runs on a
//! model request.

use crate::dialect::{error_response, Dialect};
use crate::errors::ApiError;
use crate::models::with_request_id;
use crate::proxy::authenticate;
use crate::Gateway;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Uri};
use axum::response::Response;
use domain::standing::{self, Inputs};
use domain::MicroUsd;
use serde_json::{json, Value};
use std::sync::Arc;

/// The dialect a refusal is written in, from how the key came: Google's
/// header or `?key=`, Anthropic's `x-api-key` (or its `anthropic-version`),
/// else OpenAI's. The answer itself is the same document for all.
fn dialect_of(headers: &HeaderMap, query: Option<&str>) -> Dialect {
    let bearer = headers.contains_key(axum::http::header::AUTHORIZATION);
    let query_key = query.is_some_and(|q| q.split('&').any(|kv| kv.starts_with("key=")));
    if headers.contains_key("anthropic-version") || (!bearer && headers.contains_key("x-api-key")) {
        Dialect::Messages
    } else if !bearer && (headers.contains_key("x-goog-api-key") || query_key) {
        Dialect::Gemini
    } else {
        Dialect::Chat
    }
}

pub async fn usage(State(gw): State<Arc<Gateway>>, uri: Uri, headers: HeaderMap) -> Response {
    let rid = gw.new_request_id().0;
    let dialect = dialect_of(&headers, uri.query());
    let headers = crate::dialect::gemini::gemini_key(headers, uri.query());
    let key = match authenticate(&gw, &headers).await {
        Ok(k) => k,
        Err(e) => return error_response(dialect, e.for_request(&rid)),
    };
    match standing_of(&gw, &key).await {
        Ok(body) => {
            let mut r = with_request_id(&rid, body);
            // Figures of a moment: no cache may keep them.
            r.headers_mut()
                .insert("cache-control", HeaderValue::from_static("no-store"));
            r
        }
        Err(e) => error_response(dialect, e.for_request(&rid)),
    }
}

/// The key's standing now, as the document `GET /v1/usage` answers.
async fn standing_of(gw: &Gateway, key: &crate::key_index::KeyEntry) -> Result<Value, ApiError> {
    let now = gw.now();
    let clock = gw.cfg.clock;
    let month = clock.month(now);
    let day = clock.day(now);
    let limits = key.effective_limits(now, &month);
    let ledger = gw.ledger_source();
    let counters = gw
        .quota
        .chain_counters_rebuilt(&key.tenant.id, &key.app.id, &key.id, &month, &ledger)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "usage: quota store unavailable");
            ApiError::store_down()
        })?;
    let day_cost = match limits[0].daily_cost_soft_usd {
        Some(_) => Some(
            gw.day_costs
                .current(&key.tenant.id, &day)
                .await
                .map_err(|e| {
                    tracing::warn!(error = %e, "usage: day cost unavailable");
                    ApiError::store_down()
                })?,
        ),
        None => None,
    };
    let k = counters[2];
    let chain = [&limits[0], &limits[1], &limits[2]];
    let all = domain::chain_budgets::of_chain(chain, &key.app.id, &key.id, None, &clock, now);
    let budget_counters = gw
        .quota
        .budget_counters_rebuilt(&key.tenant.id, &key.app.id, &key.id, &all, &ledger)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "usage: quota store unavailable");
            ApiError::store_down()
        })?;
    let budgets = all
        .into_iter()
        .zip(budget_counters)
        .map(|(budget, counters)| standing::BudgetCounters { budget, counters })
        .collect();
    let lines = standing::lines(&Inputs {
        limits: [&limits[0], &limits[1], &limits[2]],
        counters,
        day_cost,
        now,
        clock,
        budgets,
    });
    Ok(json!({
        "object": "usage",
        "tenant_id": key.tenant.id,
        "app_id": key.app.id,
        "key_id": key.id,
        "as_of": standing::rfc3339(&clock, now),
        "time_zone": clock.tz.name(),
        "month": month,
        "day": day,
        "spend": {
            "period": "month",
            "cost_usd": MicroUsd(k.used_cost),
            "tokens": k.used_tokens,
            "held_cost_usd": MicroUsd(k.held_cost),
            "held_tokens": k.held_tokens,
        },
        "limits": lines,
        "per_request": {
            "max_context_tokens": key.cap(|l| l.max_context_tokens),
            "max_output_tokens": key.cap(|l| l.max_output_tokens),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_speaks_the_dialect_the_key_came_in() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, HeaderValue::from_static(v));
            }
            h
        };
        assert_eq!(
            dialect_of(&h(&[("authorization", "Bearer tg-x")]), None),
            Dialect::Chat
        );
        assert_eq!(
            dialect_of(&h(&[("x-api-key", "tg-x")]), None),
            Dialect::Messages
        );
        assert_eq!(
            dialect_of(
                &h(&[
                    ("authorization", "Bearer tg-x"),
                    ("anthropic-version", "2023-06-01")
                ]),
                None
            ),
            Dialect::Messages
        );
        assert_eq!(
            dialect_of(&h(&[("x-goog-api-key", "tg-x")]), None),
            Dialect::Gemini
        );
        assert_eq!(dialect_of(&h(&[]), Some("a=1&key=tg-x")), Dialect::Gemini);
        assert_eq!(dialect_of(&h(&[]), None), Dialect::Chat);
    }
}
