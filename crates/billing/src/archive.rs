//! The ClickHouse archive of closed months: the only code that talks to
//! ClickHouse. Rows carry the rollover batch that wrote them; every read
//! names the batch Postgres recorded as the month's verified copy.

use crate::{BillingError, Result};
use chrono::NaiveDate;
use clickhouse::{Client, Row};
use domain::bill::{AttributedRow, BillRow, DayRow, GroupBy, RefusalRow, Totals};
use domain::pricing::Charges;
use domain::usage::UsageEvent;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

/// The archive schema, `{db}` standing for the database name.
pub const SCHEMA: &str = include_str!("../../../sql/0001_archive.sql");

const TABLES: [&str; 4] = ["usage_events", "bill_rows", "refusals", "usage_attribution"];

/// Columns added to the archive's tables after they were first created
/// (sql/0001_archive.sql has them at the end of each table; an older
/// archive gets them, in this order, from `apply_schema`).
const ARCHIVE_ADDED_COLUMNS: &[(&str, &[(&str, &str)])] = &[
    ("usage_events", CHARGE_COLUMNS),
    ("bill_rows", CHARGE_COLUMNS),
    ("usage_attribution", CHARGE_COLUMNS),
    ("usage_attribution", &[("asked_model", "String DEFAULT ''")]),
    ("usage_events", &[("raw_usage", "String DEFAULT ''")]),
];
const CHARGE_COLUMNS: &[(&str, &str)] = &[
    ("cost_pico", "Int64 DEFAULT cost_micro * 1000000"),
    ("charges", "Array(Int64)"),
];

/// An event's charge components as the archive keeps them (empty for an
/// event from before they were kept).
fn charges_array(e: &UsageEvent) -> Vec<i64> {
    e.charges.map(|c| c.to_array().to_vec()).unwrap_or_default()
}

#[derive(Row, Deserialize)]
struct ColumnName {
    name: String,
}

/// Rows per INSERT statement while copying a month.
const INSERT_CHUNK: usize = 10_000;

#[derive(Clone)]
pub struct Archive {
    client: Client,
    database: String,
    url: String,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive")
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

#[derive(Row, Serialize)]
struct EventRow<'a> {
    period: &'a str,
    batch_id: &'a str,
    request_id: &'a str,
    tenant_id: &'a str,
    app_id: &'a str,
    key_id: &'a str,
    model: &'a str,
    /// ClickHouse `Date`: days since 1970-01-01.
    day: u16,
    input_tokens: i64,
    output_tokens: i64,
    cost_micro: i64,
    est_tokens: i64,
    est_cost_micro: i64,
    overrun_tokens: i64,
    overrun_cost_micro: i64,
    status: &'a str,
    stream: u8,
    usage_source: &'a str,
    replica: &'a str,
    started_at_ms: i64,
    settled_at_ms: i64,
    cost_pico: i64,
    charges: Vec<i64>,
    /// The provider's usage object, JSON text ('' for none).
    raw_usage: &'a str,
}

#[derive(Row, Serialize)]
struct AttributionRow<'a> {
    period: &'a str,
    batch_id: &'a str,
    request_id: &'a str,
    tenant_id: &'a str,
    app_id: &'a str,
    model: &'a str,
    day: u16,
    tags: String,
    end_user: &'a str,
    input_tokens: i64,
    output_tokens: i64,
    cost_micro: i64,
    cost_pico: i64,
    /// The components' quantities then costs (`Charges::to_array`).
    charges: Vec<i64>,
    /// The name asked for through an alias ('' for the catalog name).
    asked_model: &'a str,
}

#[derive(Row, Deserialize)]
struct ValueTotals {
    tenant_id: String,
    value: String,
    requests: i64,
    input_tokens: i64,
    output_tokens: i64,
    cost_micro: i64,
    cost_pico: i64,
    /// The components' quantities then costs (`Charges::to_array`).
    charges: Vec<i64>,
}

#[derive(Row, Serialize)]
struct BillRowOut<'a> {
    period: &'a str,
    batch_id: &'a str,
    tenant_id: &'a str,
    app_id: &'a str,
    model: &'a str,
    requests: i64,
    input_tokens: i64,
    output_tokens: i64,
    cost_micro: i64,
    cost_pico: i64,
    /// The components' quantities then costs (`Charges::to_array`).
    charges: Vec<i64>,
}

#[derive(Row, Serialize)]
struct RefusalOut<'a> {
    period: &'a str,
    batch_id: &'a str,
    tenant_id: &'a str,
    app_id: &'a str,
    model: &'a str,
    decision: &'a str,
    reason: &'a str,
    requests: i64,
}

#[derive(Row, Deserialize)]
struct TenantTotals {
    tenant_id: String,
    requests: i64,
    input_tokens: i64,
    output_tokens: i64,
    cost_micro: i64,
    cost_pico: i64,
    /// The components' quantities then costs (`Charges::to_array`).
    charges: Vec<i64>,
}

#[derive(Row, Deserialize)]
struct GroupTotals {
    tenant_id: String,
    app_id: String,
    model: String,
    requests: i64,
    input_tokens: i64,
    output_tokens: i64,
    cost_micro: i64,
    cost_pico: i64,
    /// The components' quantities then costs (`Charges::to_array`).
    charges: Vec<i64>,
}

#[derive(Row, Deserialize)]
struct DayTotals {
    tenant_id: String,
    app_id: String,
    model: String,
    day: String,
    tags: String,
    requests: i64,
    input_tokens: i64,
    output_tokens: i64,
    cost_micro: i64,
    cost_pico: i64,
    /// The components' quantities then costs (`Charges::to_array`).
    charges: Vec<i64>,
}

#[derive(Row, Deserialize)]
struct RefusalIn {
    tenant_id: String,
    app_id: String,
    model: String,
    decision: String,
    reason: String,
    requests: i64,
}

#[derive(Row, Deserialize)]
struct Count {
    n: i64,
}

fn days_since_epoch(day: &str) -> Result<u16> {
    let d = domain::period::parse_day(day)
        .ok_or_else(|| BillingError::Invalid(format!("bad day {day:?}")))?;
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).expect("epoch");
    u16::try_from((d - epoch).num_days())
        .map_err(|_| BillingError::Invalid(format!("day {day} outside ClickHouse Date")))
}

/// The schema's statements for `database`: comment lines dropped first (a
/// comment may contain `;`), then split on `;`.
fn schema_statements(database: &str) -> Vec<String> {
    let ddl: String = SCHEMA
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("{db}", database);
    ddl.split(';')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn valid_period(p: &str) -> Result<&str> {
    domain::period::parse_month(p)
        .map(|_| p)
        .ok_or_else(|| BillingError::Invalid(format!("bad period {p:?}")))
}

/// Identifiers are interpolated into DDL: only `[A-Za-z_][A-Za-z0-9_]*`.
pub fn valid_database(db: &str) -> bool {
    !db.is_empty()
        && db.len() <= 64
        && db
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && db.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn totals_map(rows: Vec<TenantTotals>) -> BTreeMap<String, Totals> {
    rows.into_iter()
        .map(|r| {
            (
                r.tenant_id,
                Totals {
                    requests: r.requests,
                    input_tokens: r.input_tokens,
                    output_tokens: r.output_tokens,
                    cost_micro: r.cost_micro,
                    cost_pico: r.cost_pico,
                    charges: Charges::from_slice(&r.charges).unwrap_or_default(),
                },
            )
        })
        .collect()
}

impl Archive {
    /// A client for `database` at `url` (`http://host:8123`, credentials
    /// in the URL are not supported; use `user`/`password`).
    pub fn new(
        url: &str,
        database: &str,
        user: Option<&str>,
        password: Option<&str>,
    ) -> Result<Self> {
        if !valid_database(database) {
            return Err(BillingError::Invalid(format!(
                "clickhouse.database {database:?} must match [A-Za-z_][A-Za-z0-9_]*"
            )));
        }
        // RowBinary without schema validation: the validation path asks the
        // server for metadata that ClickHouse 18.16 cannot describe.
        let mut client = Client::default().with_url(url).with_validation(false);
        if let Some(u) = user {
            client = client.with_user(u);
        }
        if let Some(p) = password {
            client = client.with_password(p);
        }
        Ok(Self {
            client,
            database: database.to_string(),
            url: url.to_string(),
        })
    }

    pub fn database(&self) -> &str {
        &self.database
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn t(&self, table: &str) -> String {
        format!("{}.{}", self.database, table)
    }

    pub async fn ping(&self) -> Result<()> {
        self.client.query("SELECT 1").execute().await?;
        Ok(())
    }

    /// Creates the database and tables if missing, and adds the columns
    /// an archive created before them lacks ([`ARCHIVE_ADDED_COLUMNS`]).
    pub async fn apply_schema(&self) -> Result<()> {
        for sql in schema_statements(&self.database) {
            self.client.query(&sql).execute().await?;
        }
        for (table, columns) in ARCHIVE_ADDED_COLUMNS {
            let have = self
                .client
                .query("SELECT name FROM system.columns WHERE database = ? AND table = ?")
                .bind(self.database.as_str())
                .bind(*table)
                .fetch_all::<ColumnName>()
                .await?;
            for (name, ty) in *columns {
                if !have.iter().any(|c| c.name == *name) {
                    self.client
                        .query(&format!(
                            "ALTER TABLE {} ADD COLUMN {name} {ty}",
                            self.t(table)
                        ))
                        .execute()
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// Drops the database (tests only clean up their own).
    pub async fn drop_database(&self) -> Result<()> {
        self.client
            .query(&format!("DROP DATABASE IF EXISTS {}", self.database))
            .execute()
            .await?;
        Ok(())
    }

    /// Drops everything archived for `period` in every table. Only ever
    /// called for a month that is not closed.
    pub async fn drop_period(&self, period: &str) -> Result<()> {
        let p = valid_period(period)?;
        for table in TABLES {
            self.client
                .query(&format!(
                    "ALTER TABLE {} DROP PARTITION '{p}'",
                    self.t(table)
                ))
                .execute()
                .await?;
        }
        Ok(())
    }

    pub async fn insert_events(&self, batch: Uuid, events: &[UsageEvent]) -> Result<()> {
        let b = batch.to_string();
        for chunk in events.chunks(INSERT_CHUNK) {
            // `insert` would escape db.table as one identifier; the name
            // is built from a validated database name and a constant.
            let mut ins = self
                .client
                .insert_unescaped::<EventRow<'_>>(&self.t("usage_events"))
                .await?;
            for e in chunk {
                ins.write(&EventRow {
                    period: valid_period(&e.period)?,
                    batch_id: &b,
                    request_id: &e.request_id,
                    tenant_id: &e.tenant_id,
                    app_id: &e.app_id,
                    key_id: &e.key_id,
                    model: &e.model,
                    day: days_since_epoch(&e.day)?,
                    input_tokens: e.input_tokens,
                    output_tokens: e.output_tokens,
                    cost_micro: e.cost_micro,
                    est_tokens: e.est_tokens,
                    est_cost_micro: e.est_cost_micro,
                    overrun_tokens: e.overrun_tokens,
                    overrun_cost_micro: e.overrun_cost_micro,
                    status: &e.status,
                    stream: u8::from(e.stream),
                    usage_source: &e.usage_source,
                    replica: &e.replica,
                    started_at_ms: e.started_at_ms,
                    settled_at_ms: e.settled_at_ms,
                    cost_pico: e.exact_cost_pico(),
                    charges: charges_array(e),
                    raw_usage: e.raw_usage.as_ref().map_or("", |r| r.as_str()),
                })
                .await?;
            }
            ins.end().await?;
            self.insert_attribution(&b, chunk).await?;
        }
        Ok(())
    }

    /// The tags, end user and asked name of the events of `chunk` that
    /// have any.
    async fn insert_attribution(&self, batch: &str, chunk: &[UsageEvent]) -> Result<()> {
        let attributed = chunk.iter().filter(|e| {
            !e.attribution.tags.is_empty()
                || e.attribution.end_user.is_some()
                || e.attribution.asked_model.is_some()
        });
        let mut ins = None;
        for e in attributed {
            if ins.is_none() {
                ins = Some(
                    self.client
                        .insert_unescaped::<AttributionRow<'_>>(&self.t("usage_attribution"))
                        .await?,
                );
            }
            let w = ins.as_mut().expect("opened above");
            w.write(&AttributionRow {
                period: valid_period(&e.period)?,
                batch_id: batch,
                request_id: &e.request_id,
                tenant_id: &e.tenant_id,
                app_id: &e.app_id,
                model: &e.model,
                day: days_since_epoch(&e.day)?,
                tags: domain::attribution::tags_json(&e.attribution.tags),
                end_user: e.attribution.end_user.as_deref().unwrap_or(""),
                input_tokens: e.input_tokens,
                output_tokens: e.output_tokens,
                cost_micro: e.cost_micro,
                cost_pico: e.exact_cost_pico(),
                charges: charges_array(e),
                asked_model: e.attribution.asked_model.as_deref().unwrap_or(""),
            })
            .await?;
        }
        if let Some(w) = ins {
            w.end().await?;
        }
        Ok(())
    }

    /// A batch's usage per tenant and value of one tag or per end user,
    /// the requests without one (None) being the tenant's rest.
    pub async fn attributed_rows(
        &self,
        period: &str,
        batch: Uuid,
        tenant: Option<&str>,
        by: &GroupBy,
    ) -> Result<Vec<AttributedRow>> {
        // The tags object is flat JSON the gateway wrote: the simple
        // extractor (ClickHouse 18.16 has no JSONExtract) reads it.
        let value = match by {
            GroupBy::Tag(_) => "visitParamExtractString(tags, ?)",
            GroupBy::EndUser => "end_user",
            GroupBy::AskedModel => "if(asked_model = '', '', concat(asked_model, ?, model))",
        };
        let mut q = self.client.query(&format!(
            "SELECT tenant_id, {value} AS value, toInt64(count()) AS requests,
                        sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
                        sum(cost_micro) AS cost_micro,
                        sum(cost_pico) AS cost_pico, sumForEach(charges) AS charges
                 FROM {} WHERE period = ? AND batch_id = ? AND (? = '' OR tenant_id = ?)
                 GROUP BY tenant_id, value HAVING value != '' ORDER BY tenant_id, value",
            self.t("usage_attribution")
        ));
        match by {
            GroupBy::Tag(k) => q = q.bind(k.as_str()),
            GroupBy::AskedModel => q = q.bind(domain::bill::ASKED_AS),
            GroupBy::EndUser => {}
        }
        let rows = q
            .bind(valid_period(period)?)
            .bind(batch.to_string())
            .bind(tenant.unwrap_or(""))
            .bind(tenant.unwrap_or(""))
            .fetch_all::<ValueTotals>()
            .await?;
        let valued: Vec<AttributedRow> = rows
            .into_iter()
            .map(|r| AttributedRow {
                tenant_id: r.tenant_id,
                value: Some(r.value),
                totals: Totals {
                    requests: r.requests,
                    input_tokens: r.input_tokens,
                    output_tokens: r.output_tokens,
                    cost_micro: r.cost_micro,
                    cost_pico: r.cost_pico,
                    charges: Charges::from_slice(&r.charges).unwrap_or_default(),
                },
            })
            .collect();
        let mut totals = self.event_totals(period, batch).await?;
        if let Some(t) = tenant {
            totals.retain(|k, _| k == t);
        }
        Ok(domain::bill::with_rest(&totals, valued))
    }

    pub async fn insert_bill_rows(
        &self,
        period: &str,
        batch: Uuid,
        rows: &[BillRow],
    ) -> Result<()> {
        let b = batch.to_string();
        let p = valid_period(period)?;
        let mut ins = self
            .client
            .insert_unescaped::<BillRowOut<'_>>(&self.t("bill_rows"))
            .await?;
        for r in rows {
            ins.write(&BillRowOut {
                period: p,
                batch_id: &b,
                tenant_id: &r.tenant_id,
                app_id: &r.app_id,
                model: &r.model,
                requests: r.totals.requests,
                input_tokens: r.totals.input_tokens,
                output_tokens: r.totals.output_tokens,
                cost_micro: r.totals.cost_micro,
                cost_pico: r.totals.cost_pico,
                charges: r.totals.charges.to_array().to_vec(),
            })
            .await?;
        }
        ins.end().await?;
        Ok(())
    }

    pub async fn insert_refusals(
        &self,
        period: &str,
        batch: Uuid,
        rows: &[RefusalRow],
    ) -> Result<()> {
        let b = batch.to_string();
        let p = valid_period(period)?;
        let mut ins = self
            .client
            .insert_unescaped::<RefusalOut<'_>>(&self.t("refusals"))
            .await?;
        for r in rows {
            ins.write(&RefusalOut {
                period: p,
                batch_id: &b,
                tenant_id: &r.tenant_id,
                app_id: &r.app_id,
                model: &r.model,
                decision: &r.decision,
                reason: &r.reason,
                requests: r.requests,
            })
            .await?;
        }
        ins.end().await?;
        Ok(())
    }

    /// Per-tenant totals of a batch's usage events.
    pub async fn event_totals(
        &self,
        period: &str,
        batch: Uuid,
    ) -> Result<BTreeMap<String, Totals>> {
        let rows = self
            .client
            .query(&format!(
                "SELECT tenant_id, toInt64(count()) AS requests, sum(input_tokens) AS input_tokens,
                        sum(output_tokens) AS output_tokens, sum(cost_micro) AS cost_micro,
                        sum(cost_pico) AS cost_pico, sumForEach(charges) AS charges
                 FROM {} WHERE period = ? AND batch_id = ? GROUP BY tenant_id",
                self.t("usage_events")
            ))
            .bind(valid_period(period)?)
            .bind(batch.to_string())
            .fetch_all::<TenantTotals>()
            .await?;
        Ok(totals_map(rows))
    }

    /// Per-tenant totals of a batch's bill rows, and how many rows.
    pub async fn bill_row_totals(
        &self,
        period: &str,
        batch: Uuid,
    ) -> Result<(i64, BTreeMap<String, Totals>)> {
        let rows = self
            .client
            .query(&format!(
                "SELECT tenant_id, sum(requests) AS requests, sum(input_tokens) AS input_tokens,
                        sum(output_tokens) AS output_tokens, sum(cost_micro) AS cost_micro,
                        sum(cost_pico) AS cost_pico, sumForEach(charges) AS charges
                 FROM {} WHERE period = ? AND batch_id = ? GROUP BY tenant_id",
                self.t("bill_rows")
            ))
            .bind(valid_period(period)?)
            .bind(batch.to_string())
            .fetch_all::<TenantTotals>()
            .await?;
        let n = self
            .count(
                &format!(
                    "SELECT toInt64(count()) AS n FROM {} WHERE period = ? AND batch_id = ?",
                    self.t("bill_rows")
                ),
                period,
                Some(batch),
            )
            .await?;
        Ok((n, totals_map(rows)))
    }

    /// Refused and degraded requests of a batch.
    pub async fn refusal_total(&self, period: &str, batch: Uuid) -> Result<i64> {
        self.count(
            &format!(
                "SELECT toInt64(sum(requests)) AS n FROM {} WHERE period = ? AND batch_id = ?",
                self.t("refusals")
            ),
            period,
            Some(batch),
        )
        .await
    }

    /// Usage events of a period in the archive, whatever batch wrote them
    /// (a month's partition must hold exactly one batch).
    pub async fn events_in_period(&self, period: &str) -> Result<i64> {
        self.count(
            &format!(
                "SELECT toInt64(count()) AS n FROM {} WHERE period = ?",
                self.t("usage_events")
            ),
            period,
            None,
        )
        .await
    }

    async fn count(&self, sql: &str, period: &str, batch: Option<Uuid>) -> Result<i64> {
        let mut q = self.client.query(sql).bind(valid_period(period)?);
        if let Some(b) = batch {
            q = q.bind(b.to_string());
        }
        Ok(q.fetch_one::<Count>().await?.n)
    }

    pub async fn bill_rows(
        &self,
        period: &str,
        batch: Uuid,
        tenant: Option<&str>,
    ) -> Result<Vec<BillRow>> {
        let rows = self
            .client
            .query(&format!(
                "SELECT tenant_id, app_id, model, sum(requests) AS requests,
                        sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
                        sum(cost_micro) AS cost_micro,
                        sum(cost_pico) AS cost_pico, sumForEach(charges) AS charges
                 FROM {} WHERE period = ? AND batch_id = ? AND (? = '' OR tenant_id = ?)
                 GROUP BY tenant_id, app_id, model ORDER BY tenant_id, app_id, model",
                self.t("bill_rows")
            ))
            .bind(valid_period(period)?)
            .bind(batch.to_string())
            .bind(tenant.unwrap_or(""))
            .bind(tenant.unwrap_or(""))
            .fetch_all::<GroupTotals>()
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| BillRow {
                tenant_id: r.tenant_id,
                app_id: r.app_id,
                model: r.model,
                totals: Totals {
                    requests: r.requests,
                    input_tokens: r.input_tokens,
                    output_tokens: r.output_tokens,
                    cost_micro: r.cost_micro,
                    cost_pico: r.cost_pico,
                    charges: Charges::from_slice(&r.charges).unwrap_or_default(),
                },
            })
            .collect())
    }

    pub async fn day_rows(
        &self,
        period: &str,
        batch: Uuid,
        tenant: Option<&str>,
    ) -> Result<Vec<DayRow>> {
        // Every request's totals, then the tagged requests' (they keep
        // their tags in `usage_attribution`): the tagged rows split the
        // day's totals (domain::bill::with_tagged).
        let all = self
            .day_totals("usage_events", "'{}'", "", period, batch, tenant)
            .await?;
        let tagged = self
            .day_totals(
                "usage_attribution",
                "tags",
                "AND tags != '{}'",
                period,
                batch,
                tenant,
            )
            .await?;
        Ok(domain::bill::with_tagged(all, tagged))
    }

    /// Totals per tenant × app × model × day (× tags) of one archived table.
    async fn day_totals(
        &self,
        table: &str,
        tags: &str,
        and: &str,
        period: &str,
        batch: Uuid,
        tenant: Option<&str>,
    ) -> Result<Vec<DayRow>> {
        let rows = self
            .client
            .query(&format!(
                "SELECT tenant_id, app_id, model, toString(day) AS day, {tags} AS tags,
                        toInt64(count()) AS requests, sum(input_tokens) AS input_tokens,
                        sum(output_tokens) AS output_tokens, sum(cost_micro) AS cost_micro,
                        sum(cost_pico) AS cost_pico, sumForEach(charges) AS charges
                 FROM {} WHERE period = ? AND batch_id = ? AND (? = '' OR tenant_id = ?) {and}
                 GROUP BY tenant_id, app_id, model, day, tags",
                self.t(table)
            ))
            .bind(valid_period(period)?)
            .bind(batch.to_string())
            .bind(tenant.unwrap_or(""))
            .bind(tenant.unwrap_or(""))
            .fetch_all::<DayTotals>()
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| DayRow {
                tenant_id: r.tenant_id,
                app_id: r.app_id,
                model: r.model,
                day: r.day,
                tags: domain::attribution::tags_from_json(&r.tags),
                totals: Totals {
                    requests: r.requests,
                    input_tokens: r.input_tokens,
                    output_tokens: r.output_tokens,
                    cost_micro: r.cost_micro,
                    cost_pico: r.cost_pico,
                    charges: Charges::from_slice(&r.charges).unwrap_or_default(),
                },
            })
            .collect())
    }

    pub async fn refusal_rows(
        &self,
        period: &str,
        batch: Uuid,
        tenant: Option<&str>,
    ) -> Result<Vec<RefusalRow>> {
        let rows = self
            .client
            .query(&format!(
                "SELECT tenant_id, app_id, model, decision, reason, sum(requests) AS requests
                 FROM {} WHERE period = ? AND batch_id = ? AND (? = '' OR tenant_id = ?)
                 GROUP BY tenant_id, app_id, model, decision, reason
                 ORDER BY tenant_id, app_id, model, decision, reason",
                self.t("refusals")
            ))
            .bind(valid_period(period)?)
            .bind(batch.to_string())
            .bind(tenant.unwrap_or(""))
            .bind(tenant.unwrap_or(""))
            .fetch_all::<RefusalIn>()
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| RefusalRow {
                tenant_id: r.tenant_id,
                app_id: r.app_id,
                model: r.model,
                decision: r.decision,
                reason: r.reason,
                requests: r.requests,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_names() {
        assert_eq!(days_since_epoch("1970-01-02").unwrap(), 1);
        assert_eq!(days_since_epoch("2026-11-29").unwrap(), 20_786);
        assert!(valid_database("tollgate_t_1a2b"));
        assert!(!valid_database("x; DROP DATABASE y"));
        assert!(!valid_database("1abc"));
        assert!(valid_period("2026-11' OR 1").is_err());
    }

    #[test]
    fn schema_splits_into_statements() {
        let s = schema_statements("tg");
        assert_eq!(s.len(), 5, "{s:?}");
        assert!(s[0].starts_with("CREATE DATABASE IF NOT EXISTS tg"));
        assert!(s[1].starts_with("CREATE TABLE IF NOT EXISTS tg.usage_events"));
        assert!(s.iter().all(|x| !x.contains("--")));
    }
}
