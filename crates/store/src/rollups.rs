//! The rollups checked against the events they summarise: every grain row
//! (period, tenant, app, key, model, day, tags, end user, asked name) whose
//! totals differ, or that exists on one side only; then every month row
//! (period, tenant, app, model; key and day shown as `*`) likewise; then
//! every day row (period, tenant, day, app, model, tags; key shown as `*`).

use crate::ledger::{sat_sum, DAY_KEY, MONTH_KEY, ROLLUP_KEY};
use crate::{Result, Store};

/// A rollup row that does not match its events.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RollupDifference {
    pub period: String,
    pub tenant_id: String,
    pub app_id: String,
    pub key_id: String,
    pub model: String,
    pub day: String,
    /// (requests, input tokens, output tokens, cost micro-USD, exact cost
    /// pico-USD) of the rollup row, None when it is missing.
    pub rollup: Option<[i64; 5]>,
    /// The same summed over the events, None when there are none.
    pub events: Option<[i64; 5]>,
}

impl std::fmt::Display for RollupDifference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = |x: &Option<[i64; 5]>| {
            x.map_or("none".to_string(), |[r, i, o, c, p]| {
                format!("requests={r} input={i} output={o} cost_micro={c} cost_pico={p}")
            })
        };
        write!(
            f,
            "rollup period={} tenant={} app={} key={} model={} day={}: rollup {} but events {}",
            self.period,
            self.tenant_id,
            self.app_id,
            self.key_id,
            self.model,
            self.day,
            v(&self.rollup),
            v(&self.events)
        )
    }
}

impl Store {
    /// Up to `limit` rollup rows of `period` that differ from its events,
    /// then up to `limit` month rollup rows, then up to `limit` day rollup
    /// rows.
    pub async fn rollup_differences(
        &self,
        period: &str,
        limit: i64,
    ) -> Result<Vec<RollupDifference>> {
        let mut out = self.grain_differences(period, limit).await?;
        out.extend(self.month_differences(period, limit).await?);
        out.extend(
            self.differences("usage_day_rollups", DAY_KEY, period, limit)
                .await?,
        );
        Ok(out)
    }

    /// The month rollups (`MONTH_KEY`) against the events.
    async fn month_differences(&self, period: &str, limit: i64) -> Result<Vec<RollupDifference>> {
        self.differences("usage_month_rollups", MONTH_KEY, period, limit)
            .await
    }

    /// The rollups (`ROLLUP_KEY`) against the events.
    async fn grain_differences(&self, period: &str, limit: i64) -> Result<Vec<RollupDifference>> {
        self.differences("usage_rollups", ROLLUP_KEY, period, limit)
            .await
    }

    /// Up to `limit` rows of `table` (keyed by `key`) that differ from the
    /// sums of `period`'s events on the same key; a key without `key_id`
    /// or `day` shows them as `*`.
    async fn differences(
        &self,
        table: &str,
        key: &str,
        period: &str,
        limit: i64,
    ) -> Result<Vec<RollupDifference>> {
        let in_key = |col: &str| key.split(", ").any(|k| k == col);
        let key_id = if in_key("key_id") {
            "COALESCE(r.key_id, e.key_id)"
        } else {
            "'*'"
        };
        let day = if in_key("day") {
            "COALESCE(r.day, e.day)::text"
        } else {
            "'*'"
        };
        let rows = sqlx::query_as::<_, DifferenceCols>(&format!(
            "WITH e AS (
                SELECT {key}, count(*)::int8 AS requests, {si} AS input_tokens,
                       {so} AS output_tokens, {sc} AS cost_micro, {sp} AS cost_pico
                FROM usage_events WHERE period = $1 GROUP BY {key}
             ), r AS (SELECT * FROM {table} WHERE period = $1)
             SELECT COALESCE(r.period, e.period) AS period, COALESCE(r.tenant_id, e.tenant_id) AS tenant_id,
                    COALESCE(r.app_id, e.app_id) AS app_id, {key_id} AS key_id,
                    COALESCE(r.model, e.model) AS model, {day} AS day,
                    r.requests AS r_req, r.input_tokens AS r_in, r.output_tokens AS r_out, r.cost_micro AS r_cost,
                    r.cost_pico AS r_pico,
                    e.requests AS e_req, e.input_tokens AS e_in, e.output_tokens AS e_out, e.cost_micro AS e_cost,
                    e.cost_pico AS e_pico
             FROM r FULL JOIN e USING ({key})
             WHERE (r.requests, r.input_tokens, r.output_tokens, r.cost_micro, r.cost_pico)
                   IS DISTINCT FROM (e.requests, e.input_tokens, e.output_tokens, e.cost_micro, e.cost_pico)
             ORDER BY 1, 2, 3, 4, 5, 6 LIMIT $2",
            si = sat_sum("input_tokens"),
            so = sat_sum("output_tokens"),
            sc = sat_sum("cost_micro"),
            sp = sat_sum("cost_pico"),
        ))
        .bind(period)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(RollupDifference::from).collect())
    }
}

impl From<DifferenceCols> for RollupDifference {
    fn from(r: DifferenceCols) -> Self {
        RollupDifference {
            rollup: r.r_req.map(|req| {
                [Some(req), r.r_in, r.r_out, r.r_cost, r.r_pico].map(Option::unwrap_or_default)
            }),
            events: r.e_req.map(|req| {
                [Some(req), r.e_in, r.e_out, r.e_cost, r.e_pico].map(Option::unwrap_or_default)
            }),
            period: r.period,
            tenant_id: r.tenant_id,
            app_id: r.app_id,
            key_id: r.key_id,
            model: r.model,
            day: r.day,
        }
    }
}

/// A row of the rollup/event comparison: the rollup's and the events' four
/// sums side by side (all NULL on the side that has no row).
#[derive(sqlx::FromRow)]
struct DifferenceCols {
    period: String,
    tenant_id: String,
    app_id: String,
    key_id: String,
    model: String,
    day: String,
    r_req: Option<i64>,
    r_in: Option<i64>,
    r_out: Option<i64>,
    r_cost: Option<i64>,
    r_pico: Option<i64>,
    e_req: Option<i64>,
    e_in: Option<i64>,
    e_out: Option<i64>,
    e_cost: Option<i64>,
    e_pico: Option<i64>,
}
