//! Usage analytics over a range of platform days (the console's analytics
//! page): totals per day, and the top groups (key, app, model, tag value,
//! end user) of the range. Read from the rollups the ledger's writer keeps
//! (`usage_day_rollups` for the days, apps, models and tags;
//! `usage_rollups`, whose grain has the key and the end user, for those),
//! which `reconcile --check` holds equal to the events. Money is the
//! charged micro-USD (`cost_micro`), summed as integers: what the bills
//! page's daily chart and the dashboards' trend read.
//!
//! A day is a platform calendar day (`platform.timezone`): the ledger
//! stores each event's day and month in that zone, so a range of days is a
//! range of the `day` column within the months it spans (the months bound
//! the primary key's range).

use crate::{Result, Store, TenantScope};
use chrono::{Datelike, NaiveDate};

/// What the top groups are grouped by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageBy {
    Key,
    App,
    /// Across tenants: one line per model.
    Model,
    /// The value of one tag key (None: requests without that tag).
    Tag(String),
    /// None: requests without an end user.
    EndUser,
}

impl UsageBy {
    /// Whether a group belongs to one tenant (a key, an app, a tag value
    /// or an end user of that tenant) or spans them (a model).
    pub fn per_tenant(&self) -> bool {
        !matches!(self, UsageBy::Model)
    }
}

/// Requests, tokens and charged cost, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct UsageSums {
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_micro: i64,
}

impl UsageSums {
    /// `self` + `o`, each saturating.
    pub fn plus(self, o: UsageSums) -> UsageSums {
        UsageSums {
            requests: self.requests.saturating_add(o.requests),
            input_tokens: self.input_tokens.saturating_add(o.input_tokens),
            output_tokens: self.output_tokens.saturating_add(o.output_tokens),
            cost_micro: self.cost_micro.saturating_add(o.cost_micro),
        }
    }

    /// `self` − `o`, never below zero.
    pub fn minus(self, o: UsageSums) -> UsageSums {
        let d = |a: i64, b: i64| a.saturating_sub(b).max(0);
        UsageSums {
            requests: d(self.requests, o.requests),
            input_tokens: d(self.input_tokens, o.input_tokens),
            output_tokens: d(self.output_tokens, o.output_tokens),
            cost_micro: d(self.cost_micro, o.cost_micro),
        }
    }
}

/// One platform day's totals (days without usage have no row).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DayUsage {
    pub day: NaiveDate,
    #[sqlx(flatten)]
    pub sums: UsageSums,
}

/// One of the range's top groups.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct GroupUsage {
    /// Empty for a group across tenants (by model).
    pub tenant_id: String,
    pub tenant_name: Option<String>,
    /// The key's id, the app's id, the model, the tag's value or the end
    /// user; None: requests without one (tag, end user).
    pub value: Option<String>,
    /// The key's or app's name, when it has a row.
    pub name: Option<String>,
    #[sqlx(flatten)]
    pub sums: UsageSums,
    /// How many groups the range has in all (the top is the first of them).
    pub groups: i64,
}

/// The `YYYY-MM` months from `from`'s to `to`'s (none when `from` > `to`).
pub fn months_between(from: NaiveDate, to: NaiveDate) -> Vec<String> {
    let mut out = Vec::new();
    let (mut y, mut m) = (from.year(), from.month());
    while (y, m) <= (to.year(), to.month()) {
        out.push(format!("{y:04}-{m:02}"));
        (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    }
    out
}

/// The four sums of a rollup table's rows, saturating at i64::MAX.
const SUMS: &str = "LEAST(COALESCE(sum(requests), 0), 9223372036854775807)::int8 AS requests,
    LEAST(COALESCE(sum(input_tokens), 0), 9223372036854775807)::int8 AS input_tokens,
    LEAST(COALESCE(sum(output_tokens), 0), 9223372036854775807)::int8 AS output_tokens,
    LEAST(COALESCE(sum(cost_micro), 0), 9223372036854775807)::int8 AS cost_micro";

/// The rows of a range: its months (the primary key's first column), its
/// days, the scope's tenant.
const IN_RANGE: &str =
    "period = ANY($1) AND day BETWEEN $2 AND $3 AND ($4::text IS NULL OR tenant_id = $4)";

impl Store {
    /// The scope's totals per platform day from `from` to `to` (both
    /// included), in day order; days without usage are absent.
    pub async fn usage_days(
        &self,
        scope: &TenantScope,
        from: NaiveDate,
        to: NaiveDate,
    ) -> Result<Vec<DayUsage>> {
        Ok(sqlx::query_as::<_, DayUsage>(&format!(
            "SELECT day, {SUMS} FROM usage_day_rollups WHERE {IN_RANGE}
             GROUP BY day ORDER BY day"
        ))
        .bind(months_between(from, to))
        .bind(from)
        .bind(to)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?)
    }

    /// The scope's `n` biggest groups of the range by charged cost (then
    /// requests, tenant, value), each with its tenant's and its own name
    /// where it has one, and how many groups there are in all.
    pub async fn usage_top(
        &self,
        scope: &TenantScope,
        from: NaiveDate,
        to: NaiveDate,
        by: &UsageBy,
        n: i64,
    ) -> Result<Vec<GroupUsage>> {
        let (table, value, tag, name, join) = match by {
            UsageBy::Key => (
                "usage_rollups",
                "key_id",
                "",
                "k.name",
                "LEFT JOIN virtual_keys k ON k.id::text = g.value AND k.tenant_id = g.tenant_id",
            ),
            UsageBy::App => (
                "usage_day_rollups",
                "app_id",
                "",
                "a.name",
                "LEFT JOIN apps a ON a.tenant_id = g.tenant_id AND a.id = g.value",
            ),
            UsageBy::Model => ("usage_day_rollups", "model", "", "NULL::text", ""),
            UsageBy::Tag(k) => (
                "usage_day_rollups",
                "tags ->> $5",
                k.as_str(),
                "NULL::text",
                "",
            ),
            UsageBy::EndUser => (
                "usage_rollups",
                "NULLIF(end_user, '')",
                "",
                "NULL::text",
                "",
            ),
        };
        let tenant = if by.per_tenant() {
            "tenant_id"
        } else {
            "''::text"
        };
        Ok(sqlx::query_as::<_, GroupUsage>(&format!(
            "WITH g AS (
                SELECT {tenant} AS tenant_id, {value} AS value, {SUMS}
                FROM {table} WHERE {IN_RANGE} AND $5::text IS NOT NULL
                GROUP BY 1, 2
             )
             SELECT g.tenant_id, t.name AS tenant_name, g.value, {name} AS name,
                    g.requests, g.input_tokens, g.output_tokens, g.cost_micro,
                    count(*) OVER ()::int8 AS groups
             FROM g LEFT JOIN tenants t ON t.id = g.tenant_id {join}
             ORDER BY g.cost_micro DESC, g.requests DESC, g.tenant_id, g.value NULLS LAST
             LIMIT $6"
        ))
        .bind(months_between(from, to))
        .bind(from)
        .bind(to)
        .bind(scope.tenant())
        .bind(tag)
        .bind(n.max(0))
        .fetch_all(&self.pool)
        .await?)
    }

    /// The tag keys the scope's requests of the range carry (at most 20,
    /// in order).
    pub async fn usage_tag_keys(
        &self,
        scope: &TenantScope,
        from: NaiveDate,
        to: NaiveDate,
    ) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT DISTINCT jsonb_object_keys(tags) AS k FROM usage_day_rollups
             WHERE {IN_RANGE} AND tags <> '{{}}'::jsonb ORDER BY k LIMIT 20"
        ))
        .bind(months_between(from, to))
        .bind(from)
        .bind(to)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_months_of_a_range() {
        let d = |s: &str| NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
        assert_eq!(
            months_between(d("2026-11-25"), d("2027-01-03")),
            ["2026-11", "2026-12", "2027-01"]
        );
        assert_eq!(
            months_between(d("2026-12-01"), d("2026-12-31")),
            ["2026-12"]
        );
        assert!(months_between(d("2026-12-02"), d("2026-11-01")).is_empty());
    }
}
