//! The request log: admitted requests (usage events, with the reason when
//! degraded) and refused ones (request decisions), newest first, one page
//! at a time by keyset (the request id of the last row seen). Request ids
//! begin with the time the request was received (`domain::request_id`), so
//! id order is time order and the primary keys serve the all-tenant log;
//! each filter that is set adds its own condition, so every query the
//! planner sees can walk an index from the newest row (migration 0018).

use crate::{Result, Store, TenantScope};
use chrono::{DateTime, Utc};
use domain::request_id;
use sqlx::{Postgres, QueryBuilder};

#[derive(Debug, Clone, Default)]
pub struct RequestLogFilter {
    pub tenant: Option<String>,
    pub app: Option<String>,
    pub key: Option<String>,
    pub model: Option<String>,
    /// A usage status (`ok`, `upstream_error`, `client_closed`, `cut_off`,
    /// `expired`) or `refused`.
    pub status: Option<String>,
    /// A reason code (refused and degraded requests have one).
    pub reason: Option<String>,
    pub from: Option<DateTime<Utc>>,
    /// Exclusive.
    pub to: Option<DateTime<Utc>>,
    /// Requests carrying this tag (key, value).
    pub tag: Option<(String, String)>,
    /// Requests of this end user.
    pub end_user: Option<String>,
    /// Rows strictly older than this one.
    pub after: Option<RequestCursor>,
    pub limit: i64,
}

/// Where a page ended: the request id of its last row (the log is in
/// request-id order, which is the order the requests were received in:
/// `domain::request_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestCursor {
    pub request_id: String,
}

impl RequestCursor {
    /// `i.<request id>`: opaque to clients.
    pub fn encode(&self) -> String {
        format!("i.{}", self.request_id)
    }

    /// A cursor this API gave: `i.<id>`, or `<microseconds>.<id>` from
    /// before the log was ordered by id alone (its id still marks the
    /// place).
    pub fn decode(s: &str) -> Option<RequestCursor> {
        let (tag, id) = s.split_once('.')?;
        let known = tag == "i" || (!tag.is_empty() && tag.bytes().all(|b| b.is_ascii_digit()));
        if !known || id.is_empty() || id.len() > 128 {
            return None;
        }
        Some(RequestCursor {
            request_id: id.to_string(),
        })
    }
}

#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct RequestLogRow {
    pub request_id: String,
    pub at: DateTime<Utc>,
    pub tenant_id: String,
    pub app_id: String,
    pub key_id: String,
    pub model: String,
    /// `admitted`, `degraded` or `refused` (an admitted request that
    /// waited in the fair queue first is `admitted`, with `queued_ms`).
    pub outcome: String,
    /// The usage status, or `refused`.
    pub status: String,
    /// The reason of a refusal or a degradation.
    pub reason: Option<String>,
    /// How long an admitted request waited in the fair queue (ms), and
    /// what it waited for (`tenant_inflight_exceeded`, `model_pool_full`, …).
    pub queued_ms: Option<i64>,
    pub queue_reason: Option<String>,
    /// The HTTP status of a refused request.
    pub http_status: Option<i16>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_micro: i64,
    /// The deployment that answered (none for refusals and estimates).
    pub deployment: Option<String>,
    /// Tags and end user, as far as the request was read (a request refused
    /// before its body was read has none).
    #[sqlx(flatten, try_from = "crate::ledger::AttributionCols")]
    pub attribution: domain::attribution::Attribution,
}

impl RequestLogRow {
    pub fn cursor(&self) -> RequestCursor {
        RequestCursor {
            request_id: self.request_id.clone(),
        }
    }
}

/// The conditions common to both halves; `at` is the half's time column.
fn conditions(
    q: &mut QueryBuilder<'_, Postgres>,
    tenant: Option<&str>,
    f: &RequestLogFilter,
    at: &str,
    prefix: &str,
) {
    q.push(" WHERE true");
    let eq = |q: &mut QueryBuilder<'_, Postgres>, col: &str, v: &Option<String>| {
        if let Some(v) = v {
            q.push(format!(" AND {prefix}{col} = "))
                .push_bind(v.clone());
        }
    };
    if let Some(t) = tenant {
        q.push(format!(" AND {prefix}tenant_id = "))
            .push_bind(t.to_string());
    }
    eq(q, "app_id", &f.app);
    eq(q, "key_id", &f.key);
    eq(q, "model", &f.model);
    eq(q, "end_user", &f.end_user);
    if let Some((k, v)) = &f.tag {
        q.push(format!(" AND {prefix}tags @> jsonb_build_object("))
            .push_bind(k.clone())
            .push("::text, ")
            .push_bind(v.clone())
            .push("::text)");
    }
    // The window is on the time the requests were received, which is in
    // their ids: the bounds on the id walk the index. The time column's
    // own condition agrees with them for every row the gateway wrote since
    // the receipt time was booked as the row's time; ids that carry no
    // time (older synthetic ledgers: `load_…`) sort below every gateway id,
    // so no `from` window holds them.
    if let Some(from) = f.from {
        q.push(format!(" AND {prefix}request_id >= "))
            .push_bind(request_id::floor_at(from));
        q.push(format!(" AND {prefix}{at} >= ")).push_bind(from);
    }
    if let Some(to) = f.to {
        q.push(format!(" AND {prefix}request_id < "))
            .push_bind(request_id::floor_at(to));
        q.push(format!(" AND {prefix}{at} < ")).push_bind(to);
    }
    if let Some(c) = &f.after {
        q.push(format!(" AND {prefix}request_id < "))
            .push_bind(c.request_id.clone());
    }
}

impl Store {
    /// One page of the request log of the tenants in `scope` (narrowed by
    /// `f.tenant`, which the caller checked is inside it), newest first.
    pub async fn request_log(
        &self,
        scope: &TenantScope,
        f: &RequestLogFilter,
    ) -> Result<Vec<RequestLogRow>> {
        let tenant = scope.tenant().or(f.tenant.as_deref());
        let limit = f.limit.clamp(1, 1000);
        let want_admitted = f.status.as_deref() != Some("refused");
        let want_refused = f.status.is_none() || f.status.as_deref() == Some("refused");
        let mut q = QueryBuilder::<Postgres>::new("SELECT * FROM (");
        let mut halves = 0;
        if want_admitted {
            q.push(
                "(SELECT u.request_id, u.started_at AS at, u.tenant_id, u.app_id, u.key_id, u.model,
                         CASE WHEN d.decision = 'degraded' THEN 'degraded' ELSE 'admitted' END AS outcome,
                         u.status, CASE WHEN d.decision = 'degraded' THEN d.reason END AS reason,
                         (d.detail->>'waited_ms')::BIGINT AS queued_ms, d.detail->>'queue_reason' AS queue_reason,
                         NULL::SMALLINT AS http_status,
                         u.input_tokens, u.output_tokens, u.cost_micro, u.deployment,
                         u.tags, u.end_user
                  FROM usage_events u LEFT JOIN request_decisions d ON d.request_id = u.request_id",
            );
            conditions(&mut q, tenant, f, "started_at", "u.");
            if let Some(s) = &f.status {
                q.push(" AND u.status = ").push_bind(s.clone());
            }
            if let Some(r) = &f.reason {
                // A degradation's reason (a queued request's is its
                // queue_reason, not a reason of the log).
                q.push(" AND d.decision = 'degraded' AND d.reason = ")
                    .push_bind(r.clone());
            }
            q.push(" ORDER BY u.request_id DESC LIMIT ")
                .push_bind(limit)
                .push(")");
            halves += 1;
        }
        if want_refused {
            if halves > 0 {
                q.push(" UNION ALL ");
            }
            q.push(
                "(SELECT r.request_id, r.at, r.tenant_id, r.app_id, r.key_id, r.model,
                         'refused' AS outcome, 'refused' AS status, r.reason,
                         NULL::BIGINT AS queued_ms, NULL::TEXT AS queue_reason, r.status AS http_status,
                         0::BIGINT AS input_tokens, 0::BIGINT AS output_tokens, 0::BIGINT AS cost_micro,
                         NULL::TEXT AS deployment, r.tags, r.end_user
                  FROM request_decisions r",
            );
            conditions(&mut q, tenant, f, "at", "r.");
            q.push(" AND r.decision = 'refused'");
            if let Some(r) = &f.reason {
                q.push(" AND r.reason = ").push_bind(r.clone());
            }
            q.push(" ORDER BY r.request_id DESC LIMIT ")
                .push_bind(limit)
                .push(")");
        }
        q.push(") page ORDER BY request_id DESC LIMIT ")
            .push_bind(limit);
        Ok(q.build_query_as().fetch_all(&self.pool).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_rejects_garbage() {
        let c = RequestCursor {
            request_id: "req_01.with.dots".into(),
        };
        assert_eq!(RequestCursor::decode(&c.encode()), Some(c));
        // A cursor of the (time, id) order still marks its place by its id.
        assert_eq!(
            RequestCursor::decode("1764000000123456.req_01"),
            Some(RequestCursor {
                request_id: "req_01".into()
            })
        );
        for bad in ["", "x.req", "123.", "123", "i.", ".req", "garbage"] {
            assert_eq!(RequestCursor::decode(bad), None, "{bad:?}");
        }
    }
}
