//! The usage ledger: settled requests, one row each, inserted in batches.

use crate::pgcopy::{BinaryCopy, FieldTooLarge};
use crate::{Result, Store, StoreError, TenantScope};
use chrono::{DateTime, NaiveDate, Utc};
use domain::attribution::{Attribution, Tags};
use domain::charges::{Component, N_COMPONENTS};
use domain::usage::{RawUsage, UsageAnomaly, UsageEvent};

/// Settled usage of one (app, key) of a tenant in a month.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct MonthUsageRow {
    pub app_id: String,
    pub key_id: String,
    pub tokens: i64,
    #[sqlx(rename = "cost")]
    pub cost_micro: i64,
    #[sqlx(rename = "otok")]
    pub overrun_tokens: i64,
    #[sqlx(rename = "ocost")]
    pub overrun_cost_micro: i64,
    pub requests: i64,
}

/// A ledger row's attribution columns (`tags`, `end_user`), flattened into
/// the rows that carry them. `asked_model` is '' for a request asked by the
/// catalog name (it is in the rollups' key).
#[derive(sqlx::FromRow)]
pub struct AttributionCols {
    tags: serde_json::Value,
    end_user: String,
    /// Only the ledger has these two (`session_id`, `asked_model`).
    #[sqlx(default)]
    session_id: Option<String>,
    #[sqlx(default)]
    asked_model: Option<String>,
}

impl From<AttributionCols> for Attribution {
    fn from(c: AttributionCols) -> Self {
        Attribution {
            tags: tags_of(c.tags),
            end_user: (!c.end_user.is_empty()).then_some(c.end_user),
            session: c.session_id,
            asked_model: c.asked_model.filter(|m| !m.is_empty()),
        }
    }
}

/// A `usage_events` row: the one mapping of the ledger's columns back into
/// a [`UsageEvent`]. `usage_anomaly` / `reported_usage` may be left out of
/// the select (the archive's copy keeps no anomaly).
#[derive(sqlx::FromRow)]
pub(crate) struct UsageEventRow {
    request_id: String,
    tenant_id: String,
    app_id: String,
    key_id: String,
    model: String,
    period: String,
    day: NaiveDate,
    input_tokens: i64,
    output_tokens: i64,
    cost_micro: i64,
    est_tokens: i64,
    est_cost_micro: i64,
    overrun_tokens: i64,
    overrun_cost_micro: i64,
    status: String,
    stream: bool,
    replica: String,
    started_at: DateTime<Utc>,
    settled_at: DateTime<Utc>,
    usage_source: String,
    #[sqlx(default)]
    usage_anomaly: Option<String>,
    #[sqlx(default)]
    reported_usage: Option<serde_json::Value>,
    deployment: Option<String>,
    #[sqlx(default)]
    cost_pico: i64,
    #[sqlx(default)]
    breakdown: Option<serde_json::Value>,
    #[sqlx(default)]
    charges: Option<serde_json::Value>,
    /// The provider's usage object (migration 0029), its text as jsonb
    /// gives it back (normalised: key order and spacing are Postgres').
    #[sqlx(default)]
    raw_usage: Option<sqlx::types::Json<RawUsage>>,
    #[sqlx(flatten)]
    attribution: AttributionCols,
}

impl From<UsageEventRow> for UsageEvent {
    fn from(r: UsageEventRow) -> Self {
        UsageEvent {
            request_id: r.request_id,
            tenant_id: r.tenant_id,
            app_id: r.app_id,
            key_id: r.key_id,
            model: r.model,
            period: r.period,
            day: r.day.format("%Y-%m-%d").to_string(),
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            cost_micro: r.cost_micro,
            cost_pico: r.cost_pico,
            est_tokens: r.est_tokens,
            est_cost_micro: r.est_cost_micro,
            overrun_tokens: r.overrun_tokens,
            overrun_cost_micro: r.overrun_cost_micro,
            status: r.status,
            stream: r.stream,
            usage_source: r.usage_source,
            replica: r.replica,
            started_at_ms: r.started_at.timestamp_millis(),
            settled_at_ms: r.settled_at.timestamp_millis(),
            deployment: r.deployment,
            breakdown: r.breakdown.and_then(|b| serde_json::from_value(b).ok()),
            charges: r.charges.and_then(|c| serde_json::from_value(c).ok()),
            anomaly: r.usage_anomaly.map(|kind| UsageAnomaly {
                kind,
                reported: r.reported_usage.unwrap_or_default(),
            }),
            raw_usage: r.raw_usage.map(|j| j.0),
            attribution: r.attribution.into(),
        }
    }
}

/// The ledger row's columns with their SQL types, in the order the insert
/// binds them (`insert_usage_events`): the one list the statement is built
/// from. A new column goes here and is bound at the same position.
const EVENT_COLUMNS: &[(&str, &str)] = &[
    ("request_id", "text"),
    ("tenant_id", "text"),
    ("app_id", "text"),
    ("key_id", "text"),
    ("model", "text"),
    ("period", "text"),
    ("day", "date"),
    ("input_tokens", "int8"),
    ("output_tokens", "int8"),
    ("cost_micro", "int8"),
    ("est_tokens", "int8"),
    ("est_cost_micro", "int8"),
    ("overrun_tokens", "int8"),
    ("overrun_cost_micro", "int8"),
    ("status", "text"),
    ("stream", "bool"),
    ("replica", "text"),
    ("started_at", "timestamptz"),
    ("settled_at", "timestamptz"),
    ("usage_source", "text"),
    ("usage_anomaly", "text"),
    ("reported_usage", "jsonb"),
    ("deployment", "text"),
    ("tags", "jsonb"),
    ("end_user", "text"),
    ("cost_pico", "int8"),
    ("breakdown", "jsonb"),
    ("charges", "jsonb"),
    ("session_id", "text"),
    ("asked_model", "text"),
    ("raw_usage", "jsonb"),
];

/// A ledger row's exact cost ([`UsageEvent::exact_cost_pico`]).
fn stored_pico(e: &UsageEvent) -> i64 {
    e.exact_cost_pico()
}

/// A ledger row's breakdown as stored (None for plain input and output).
fn breakdown_json(e: &UsageEvent) -> Option<serde_json::Value> {
    e.breakdown
        .as_ref()
        .and_then(|b| serde_json::to_value(b).ok())
}

/// A ledger row's charge components as stored (None for an event from
/// before they were kept).
fn charges_json(e: &UsageEvent) -> Option<serde_json::Value> {
    e.charges
        .as_ref()
        .and_then(|c| serde_json::to_value(c).ok())
}

/// The grain of `usage_rollups`, its primary key: one row per
/// combination, tags and end user (migration 0013) and the name asked for
/// (migration 0026) included.
pub(crate) const ROLLUP_KEY: &str =
    "period, tenant_id, app_id, key_id, model, day, tags, end_user, asked_model";

/// `sum(col)` over events, saturating at i64::MAX: the one rule a rollup
/// total (and the events it is checked against) follows. Postgres sums a
/// bigint exactly into a numeric (with a 128-bit accumulator: no cast to
/// numeric per row, which made the books' sums 2.5× slower), so nothing
/// overflows before the cap.
pub(crate) fn sat_sum(col: &str) -> String {
    format!("LEAST(sum({col}), 9223372036854775807)::int8")
}

/// A rollup total plus the new rows' total, saturating like [`sat_sum`].
fn sat_add(table: &str, col: &str) -> String {
    format!("LEAST({table}.{col}::numeric + EXCLUDED.{col}, 9223372036854775807)::int8")
}

/// A request's tags as the ledger stores them: a JSON object of strings.
pub(crate) fn tags_json(tags: &Tags) -> serde_json::Value {
    serde_json::Value::Object(
        tags.iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect(),
    )
}

/// The end user as the ledger stores it: '' for none (it is in a key).
pub(crate) fn end_user_col(u: &Option<String>) -> &str {
    u.as_deref().unwrap_or("")
}

/// The name asked for as the ledger stores it: '' when the request asked
/// for the catalog name itself (it is in a key).
pub(crate) fn asked_model_col(m: &Option<String>) -> &str {
    m.as_deref().unwrap_or("")
}

/// A stored tags object back into tags (non-string entries skipped).
pub(crate) fn tags_of(v: serde_json::Value) -> Tags {
    v.as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn ts(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// The grain of `usage_month_rollups` (migration 0027): a month's totals
/// per tenant × app × model, what bills read.
pub(crate) const MONTH_KEY: &str = "period, tenant_id, app_id, model";

/// The grain of `usage_day_rollups` (migration 0030): a day's totals per
/// tenant × app × model × tags, what the FOCUS export and the dashboards
/// read. In its primary key's order (the export's).
pub(crate) const DAY_KEY: &str = "period, tenant_id, day, app_id, model, tags";

/// `ON CONFLICT` of an upsert into `table` keyed by `key`: a row's totals
/// plus the new rows' totals, saturating ([`sat_add`]). Both ledger writes
/// use it, for the rollups and the month rollups.
fn merge_into(table: &str, key: &str) -> String {
    let sets: Vec<String> = rollup_totals()
        .iter()
        .skip(1)
        .map(|c| format!("{c} = {}", sat_add(table, c)))
        .collect();
    format!(
        "ON CONFLICT ({key}) DO UPDATE SET
            requests = {table}.requests + EXCLUDED.requests, {}",
        sets.join(", ")
    )
}

/// The rollups' totals before the components.
const BASE_TOTALS: [&str; 7] = [
    "requests",
    "input_tokens",
    "output_tokens",
    "cost_micro",
    "overrun_tokens",
    "overrun_cost_micro",
    "cost_pico",
];

/// How many totals a rollup row has: the base ones, then a quantity and a
/// cost per charge component.
const N_TOTALS: usize = BASE_TOTALS.len() + 2 * N_COMPONENTS;

/// The rollups' columns after the key, in the order `RollupSums` binds
/// them: [`BASE_TOTALS`], then `q_<component>`, `p_<component>` for each
/// charge component (migrations/0025_charges.sql), from the one list of
/// components (`Component::ALL`).
pub(crate) fn rollup_totals() -> &'static [String] {
    static COLS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    COLS.get_or_init(|| {
        let mut cols: Vec<String> = BASE_TOTALS.iter().map(|c| c.to_string()).collect();
        for c in Component::ALL {
            cols.push(format!("q_{}", c.name()));
            cols.push(format!("p_{}", c.name()));
        }
        cols
    })
}

/// [`rollup_totals`] as a column list.
fn rollup_totals_list() -> String {
    rollup_totals().join(", ")
}

/// The SQL of one event's value of each rollup total after `requests`
/// (which counts rows), over a row set with the ledger's columns.
fn event_totals() -> Vec<String> {
    let mut v: Vec<String> = BASE_TOTALS[1..].iter().map(|c| c.to_string()).collect();
    for c in Component::ALL {
        for i in 0..2 {
            v.push(format!(
                "COALESCE((charges->'{}'->>{i})::int8, 0)",
                c.name()
            ));
        }
    }
    v
}

/// `count(*)` and [`sat_sum`] of every [`event_totals`]: the rollup totals
/// of a set of events (the skipping insert, and reconcile's recount).
pub(crate) fn event_sums() -> String {
    std::iter::once("count(*)::int8".to_string())
        .chain(event_totals().iter().map(|e| sat_sum(e)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The ledger's skipping insert (see `insert_usage_events`), built once
/// from `EVENT_COLUMNS` and `ROLLUP_KEY`: rows whose request id is already
/// stored are skipped (`ON CONFLICT DO NOTHING`: a speculative insertion, a
/// second probe and WAL record a row) and only the new ones are summed into
/// the rollups, in one statement.
fn skipping_insert_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        format!(
            "WITH new_events AS (
                INSERT INTO usage_events ({cols})
                SELECT * FROM UNNEST({arrays})
                ON CONFLICT (request_id) DO NOTHING
                RETURNING {ROLLUP_KEY}, input_tokens, output_tokens, cost_micro, overrun_tokens,
                    overrun_cost_micro, cost_pico, charges
             ), rolled AS (
                INSERT INTO usage_rollups ({ROLLUP_KEY}, {totals})
                SELECT {ROLLUP_KEY}, {sums}
                FROM new_events GROUP BY {ROLLUP_KEY} ORDER BY {ROLLUP_KEY}
                {merge}
                RETURNING 1
             ), monthly AS (
                -- After the rollups, explicitly: Postgres runs unreferenced
                -- data-modifying CTEs in an order of its own, and the copy
                -- path takes rollup rows before month rows, so must this.
                INSERT INTO usage_month_rollups ({MONTH_KEY}, {totals})
                SELECT {MONTH_KEY}, {sums}
                FROM new_events WHERE (SELECT count(*) FROM rolled) >= 0
                GROUP BY {MONTH_KEY} ORDER BY {MONTH_KEY}
                {month_merge}
                RETURNING 1
             ), daily AS (
                INSERT INTO usage_day_rollups ({DAY_KEY}, {totals})
                SELECT {DAY_KEY}, {sums}
                FROM new_events WHERE (SELECT count(*) FROM monthly) >= 0
                GROUP BY {DAY_KEY} ORDER BY {DAY_KEY}
                {day_merge}
                RETURNING 1
             )
             SELECT count(*) FROM new_events",
            cols = event_column_list(),
            arrays = EVENT_COLUMNS
                .iter()
                .enumerate()
                .map(|(i, (_, t))| format!("${}::{t}[]", i + 1))
                .collect::<Vec<_>>()
                .join(", "),
            totals = rollup_totals_list(),
            sums = event_sums(),
            merge = merge_into("usage_rollups", ROLLUP_KEY),
            month_merge = merge_into("usage_month_rollups", MONTH_KEY),
            day_merge = merge_into("usage_day_rollups", DAY_KEY),
        )
    })
}

fn event_column_list() -> String {
    EVENT_COLUMNS
        .iter()
        .map(|(c, _)| *c)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The new events' copy into the ledger (binary COPY, rows by `copy_row`).
fn copy_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        format!(
            "COPY usage_events ({}) FROM STDIN WITH (FORMAT binary)",
            event_column_list()
        )
    })
}

/// The rollups' upsert of one batch's sums per rollup row (`RollupSums`),
/// locked in the same order as the skipping insert's (`ORDER BY` the key),
/// so two writers storing overlapping rows wait for each other instead of
/// deadlocking.
fn rollup_upsert_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        let key_types = [
            "text", "text", "text", "text", "text", "date", "jsonb", "text", "text",
        ];
        unnest_upsert("usage_rollups", ROLLUP_KEY, &key_types)
    })
}

/// The month rollups' upsert of one batch's sums per tenant × app × model
/// (`RollupSums::months`), after the rollups' in the same transaction and
/// in key order, like them.
fn month_upsert_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| unnest_upsert("usage_month_rollups", MONTH_KEY, &["text"; 4]))
}

/// The day rollups' upsert of one batch's sums per tenant × day × app ×
/// model × tags (`RollupSums::days`), after the month rollups' in the same
/// transaction and in key order.
fn day_upsert_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        let key_types = ["text", "text", "date", "text", "text", "jsonb"];
        unnest_upsert("usage_day_rollups", DAY_KEY, &key_types)
    })
}

/// An upsert into `table` of rows bound as one array per column: `key`'s
/// columns (of `key_types`), then the totals, in key order.
fn unnest_upsert(table: &str, key: &str, key_types: &[&str]) -> String {
    let arrays: Vec<String> = key_types
        .iter()
        .copied()
        .chain(std::iter::repeat_n("int8", N_TOTALS))
        .enumerate()
        .map(|(i, t)| format!("${}::{t}[]", i + 1))
        .collect();
    format!(
        "INSERT INTO {table} ({key}, {totals})
         SELECT * FROM UNNEST({arrays})
             AS r({key}, {totals})
         ORDER BY {key}
         {merge}",
        totals = rollup_totals_list(),
        arrays = arrays.join(", "),
        merge = merge_into(table, key),
    )
}

/// A ledger row in binary COPY format, columns in `EVENT_COLUMNS` order
/// (the field count is checked against it; a type that does not match the
/// column fails the copy).
fn copy_row(
    c: &mut BinaryCopy,
    e: &UsageEvent,
    day: NaiveDate,
) -> std::result::Result<(), FieldTooLarge> {
    c.row(EVENT_COLUMNS.len() as i16);
    c.text(&e.request_id)?;
    c.text(&e.tenant_id)?;
    c.text(&e.app_id)?;
    c.text(&e.key_id)?;
    c.text(&e.model)?;
    c.text(&e.period)?;
    c.date(day);
    c.int8(e.input_tokens);
    c.int8(e.output_tokens);
    c.int8(e.cost_micro);
    c.int8(e.est_tokens);
    c.int8(e.est_cost_micro);
    c.int8(e.overrun_tokens);
    c.int8(e.overrun_cost_micro);
    c.text(&e.status)?;
    c.bool(e.stream);
    c.text(&e.replica)?;
    c.timestamptz(ts(e.started_at_ms));
    c.timestamptz(ts(e.settled_at_ms));
    c.text(&e.usage_source)?;
    c.opt_text(e.anomaly.as_ref().map(|a| a.kind.as_str()))?;
    c.opt_jsonb(e.anomaly.as_ref().map(|a| &a.reported))?;
    c.opt_text(e.deployment.as_deref())?;
    c.jsonb(&tags_json(&e.attribution.tags))?;
    c.text(end_user_col(&e.attribution.end_user))?;
    c.int8(stored_pico(e));
    c.opt_jsonb(breakdown_json(e).as_ref())?;
    match &e.charges {
        Some(ch) => {
            let mut json = String::with_capacity(96);
            ch.write_json(&mut json);
            c.jsonb_text(&json)?;
        }
        None => c.null(),
    }
    c.opt_text(e.attribution.session.as_deref())?;
    c.text(asked_model_col(&e.attribution.asked_model))?;
    // Valid JSON by construction, its text copied as jsonb's (no Value
    // built, no serialising).
    match &e.raw_usage {
        Some(r) => c.jsonb_text(r.as_str()),
        None => {
            c.null();
            Ok(())
        }
    }
}

/// The settle day as the ledger stores it (an unparsable day is stored as
/// the epoch, as it always was).
fn event_day(e: &UsageEvent) -> NaiveDate {
    domain::period::parse_day(&e.day).unwrap_or_default()
}

/// A rollup row's key: `ROLLUP_KEY`'s columns (tags as the map they are
/// stored from; the upsert sorts the rows itself).
type RollupKey<'a> = (
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    NaiveDate,
    &'a Tags,
    &'a str,
    &'a str,
);

/// One batch's totals per rollup row, summed in Rust for the copy path the
/// way [`sat_sum`] sums them in SQL: exactly (i128), then capped at
/// i64::MAX. Reconcile recomputes the rollups from the events with
/// `sat_sum`, so the two are checked against each other.
#[derive(Default)]
struct RollupSums<'a> {
    rows: Sums<RollupKey<'a>>,
}

/// A batch's totals per row of one grain.
type Sums<K> = rustc_hash::FxHashMap<K, [i128; N_TOTALS]>;

/// A batch's totals per month rollup row (`MONTH_KEY`).
type MonthSums<'a> = Sums<(&'a str, &'a str, &'a str, &'a str)>;

/// A day rollup row's key (`DAY_KEY`).
type DayKey<'a> = (&'a str, &'a str, NaiveDate, &'a str, &'a str, &'a Tags);

/// A batch's totals per day rollup row.
type DaySums<'a> = Sums<DayKey<'a>>;

impl<'a> RollupSums<'a> {
    /// Adds one event (its settle day parsed once, by the caller).
    fn add(&mut self, e: &'a UsageEvent, day: NaiveDate) {
        let key = (
            e.period.as_str(),
            e.tenant_id.as_str(),
            e.app_id.as_str(),
            e.key_id.as_str(),
            e.model.as_str(),
            day,
            &e.attribution.tags,
            end_user_col(&e.attribution.end_user),
            asked_model_col(&e.attribution.asked_model),
        );
        let mut one = [0i128; N_TOTALS];
        let base = [
            1,
            e.input_tokens,
            e.output_tokens,
            e.cost_micro,
            e.overrun_tokens,
            e.overrun_cost_micro,
            stored_pico(e),
        ];
        for (x, v) in one.iter_mut().zip(base) {
            *x = i128::from(v);
        }
        if let Some(ch) = &e.charges {
            for (i, c) in Component::ALL.into_iter().enumerate() {
                let at = BASE_TOTALS.len() + 2 * i;
                one[at] = i128::from(ch.quantity_of(c));
                one[at + 1] = i128::from(ch.pico_of(c));
            }
        }
        let t = self.rows.entry(key).or_insert([0; N_TOTALS]);
        for (sum, x) in t.iter_mut().zip(one) {
            *sum += x;
        }
    }

    /// The batch's rows at a coarser grain (month rows, `MONTH_KEY`; day
    /// rows, `DAY_KEY`), summed from its rollup rows by `key`: a batch has
    /// fewer rows than events, so this is cheaper than a map per event.
    fn coarser<K: std::hash::Hash + Eq>(&self, key: impl Fn(&RollupKey<'a>) -> K) -> Sums<K> {
        let mut out = Sums::default();
        for (k, t) in &self.rows {
            let c = out.entry(key(k)).or_insert([0; N_TOTALS]);
            for (sum, x) in c.iter_mut().zip(t) {
                *sum += x;
            }
        }
        out
    }

    fn capped(v: i128) -> i64 {
        i64::try_from(v.min(i128::from(i64::MAX))).unwrap_or(i64::MIN)
    }

    async fn upsert(self, conn: &mut sqlx::PgConnection) -> Result<()> {
        let rows = &self.rows;
        let q = sqlx::query(rollup_upsert_sql())
            .bind(col(rows, |k| k.0))
            .bind(col(rows, |k| k.1))
            .bind(col(rows, |k| k.2))
            .bind(col(rows, |k| k.3))
            .bind(col(rows, |k| k.4))
            .bind(col(rows, |k| k.5))
            .bind(col(rows, |k| tags_json(k.6)))
            .bind(col(rows, |k| k.7))
            .bind(col(rows, |k| k.8));
        with_totals(q, rows).execute(&mut *conn).await?;
        let months: MonthSums = self.coarser(|k| (k.0, k.1, k.2, k.4));
        let q = sqlx::query(month_upsert_sql())
            .bind(col(&months, |k| k.0))
            .bind(col(&months, |k| k.1))
            .bind(col(&months, |k| k.2))
            .bind(col(&months, |k| k.3));
        with_totals(q, &months).execute(&mut *conn).await?;
        let days: DaySums = self.coarser(|k| (k.0, k.1, k.5, k.2, k.4, k.6));
        let q = sqlx::query(day_upsert_sql())
            .bind(col(&days, |k| k.0))
            .bind(col(&days, |k| k.1))
            .bind(col(&days, |k| k.2))
            .bind(col(&days, |k| k.3))
            .bind(col(&days, |k| k.4))
            .bind(col(&days, |k| tags_json(k.5)));
        with_totals(q, &days).execute(conn).await?;
        Ok(())
    }
}

/// One key column of an upsert: `f` of each row's key, in the map's order
/// (the order [`with_totals`] binds the totals in).
fn col<K, T>(rows: &Sums<K>, f: impl Fn(&K) -> T) -> Vec<T> {
    rows.keys().map(f).collect()
}

/// `q` with the totals of `rows` bound after its key columns, one array
/// per total (`rollup_totals` order), each capped at i64::MAX.
fn with_totals<'q, K>(
    mut q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    rows: &Sums<K>,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    for i in 0..N_TOTALS {
        q = q.bind(
            rows.values()
                .map(|t| RollupSums::capped(t[i]))
                .collect::<Vec<_>>(),
        );
    }
    q
}

impl Store {
    /// Inserts events; a request_id already stored is skipped, so a retried
    /// batch never double-counts. Returns how many rows were new. The
    /// events that were new, and their sums added to the rollups, commit
    /// together or not at all. Rollup totals saturate at i64::MAX (summed
    /// exactly) so absurd reports stored before any bound existed never fail
    /// the ledger's writes.
    pub async fn insert_usage_events(&self, events: &[UsageEvent]) -> Result<u64> {
        if events.is_empty() {
            return Ok(0);
        }
        // Rows in request-id order: the ledger writer and the outbox sweeper
        // may store overlapping batches at the same moment, and two inserts
        // that take the same unique-index locks in different orders
        // deadlock (seen under load); in one order, one simply waits.
        let mut events: Vec<&UsageEvent> = events.iter().collect();
        events.sort_unstable_by(|a, b| a.request_id.cmp(&b.request_id));
        // Most batches are all new: a binary COPY, then their sums upserted
        // into the rollups, in one transaction. A request id already stored
        // (a retried batch, the outbox sweeper racing the writer, a second
        // loader run) fails the copy as a whole, nothing written; then the
        // skipping insert stores the rest.
        match self.copy_events(&events).await {
            Err(StoreError::Db(sqlx::Error::Database(e)))
                if e.constraint() == Some("usage_events_pkey") =>
            {
                self.insert_skipping(&events).await
            }
            other => other,
        }
    }

    /// The usual ledger write (`insert_usage_events`): the batch copied in
    /// (binary COPY: no arrays to decode, no intermediate result sets, the
    /// heap filled a page at a time) and its rollup sums upserted, in one
    /// transaction — four round trips instead of one statement, with a
    /// fraction of the server's work (bench/results/
    /// 2026-12-02-the-ledger-written-by-copy-measured.md).
    async fn copy_events(&self, events: &[&UsageEvent]) -> Result<u64> {
        let mut data = BinaryCopy::with_capacity(events.len() * 400);
        let mut sums = RollupSums::default();
        for e in events {
            let day = event_day(e);
            copy_row(&mut data, e, day).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
            sums.add(e, day);
        }
        let mut tx = self.pool.begin().await?;
        let mut copy = tx.copy_in_raw(copy_sql()).await?;
        copy.send(data.finish()).await?;
        let n = copy.finish().await?;
        sums.upsert(&mut tx).await?;
        tx.commit().await?;
        Ok(n)
    }

    /// The ledger write of a batch that may hold stored request ids
    /// (`skipping_insert_sql`): only the new events are stored and rolled up.
    async fn insert_skipping(&self, events: &[&UsageEvent]) -> Result<u64> {
        macro_rules! col {
            ($f:expr) => {
                events.iter().map($f).collect::<Vec<_>>()
            };
        }
        let n: i64 = sqlx::query_scalar(skipping_insert_sql())
            .bind(col!(|e| e.request_id.clone()))
            .bind(col!(|e| e.tenant_id.clone()))
            .bind(col!(|e| e.app_id.clone()))
            .bind(col!(|e| e.key_id.clone()))
            .bind(col!(|e| e.model.clone()))
            .bind(col!(|e| e.period.clone()))
            .bind(col!(|e| event_day(e)))
            .bind(col!(|e| e.input_tokens))
            .bind(col!(|e| e.output_tokens))
            .bind(col!(|e| e.cost_micro))
            .bind(col!(|e| e.est_tokens))
            .bind(col!(|e| e.est_cost_micro))
            .bind(col!(|e| e.overrun_tokens))
            .bind(col!(|e| e.overrun_cost_micro))
            .bind(col!(|e| e.status.clone()))
            .bind(col!(|e| e.stream))
            .bind(col!(|e| e.replica.clone()))
            .bind(col!(|e| ts(e.started_at_ms)))
            .bind(col!(|e| ts(e.settled_at_ms)))
            .bind(col!(|e| e.usage_source.clone()))
            .bind(col!(|e| e.anomaly.as_ref().map(|a| a.kind.clone())))
            .bind(col!(|e| e.anomaly.as_ref().map(|a| a.reported.clone())))
            .bind(col!(|e| e.deployment.clone()))
            .bind(col!(|e| tags_json(&e.attribution.tags)))
            .bind(col!(|e| end_user_col(&e.attribution.end_user).to_string()))
            .bind(col!(|e| stored_pico(e)))
            .bind(col!(|e| breakdown_json(e)))
            .bind(col!(|e| charges_json(e)))
            .bind(col!(|e| e.attribution.session.clone()))
            .bind(col!(
                |e| asked_model_col(&e.attribution.asked_model).to_string()
            ))
            .bind(col!(|e| e.raw_usage.clone().map(sqlx::types::Json)))
            .fetch_one(&self.pool)
            .await?;
        Ok(n as u64)
    }

    /// Whether a request's usage event is in the ledger (request ids are
    /// unique): a settle that finds no hold record in Redis asks this before
    /// booking, so a replay after the settled record expired books nothing.
    pub async fn usage_event_exists(
        &self,
        scope: &TenantScope,
        tenant: &str,
        request_id: &str,
    ) -> Result<bool> {
        let found: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM usage_events
                 WHERE request_id = $1 AND tenant_id = $2 AND ($3::text IS NULL OR tenant_id = $3))",
        )
        .bind(request_id)
        .bind(tenant)
        .bind(scope.tenant())
        .fetch_one(&self.pool)
        .await?;
        Ok(found)
    }

    /// A tenant's settled usage of a month by (app, key): the source a lost
    /// Redis month is rebuilt from.
    pub async fn month_usage(
        &self,
        scope: &TenantScope,
        tenant: &str,
        period: &str,
    ) -> Result<Vec<MonthUsageRow>> {
        // Summed as numeric and capped at 2^53 - 1 (the range the hold
        // engine counts in, domain::counter): absurd rows, or many large
        // ones, saturate the rebuilt month instead of failing the query on
        // `bigint out of range` (which would leave the month unknown and
        // every request refused).
        let rows = sqlx::query_as::<_, MonthUsageRow>(
            "SELECT app_id, key_id,
                    LEAST(COALESCE(SUM(input_tokens::numeric + output_tokens), 0), 9007199254740991)::int8 AS tokens,
                    LEAST(COALESCE(SUM(cost_micro::numeric), 0), 9007199254740991)::int8 AS cost,
                    LEAST(COALESCE(SUM(overrun_tokens::numeric), 0), 9007199254740991)::int8 AS otok,
                    LEAST(COALESCE(SUM(overrun_cost_micro::numeric), 0), 9007199254740991)::int8 AS ocost,
                    COALESCE(SUM(requests), 0)::int8 AS requests
             FROM usage_rollups WHERE period = $2 AND tenant_id = $1 AND ($3::text IS NULL OR tenant_id = $3)
             GROUP BY app_id, key_id",
        )
        .bind(tenant)
        .bind(period)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// Settled (tokens, cost, requests) of a tenant — of one app, or one
    /// key, when given — on `models` (None: every model) over the platform
    /// days `[days.0, days.1)`, capped like [`Self::month_usage`]: what a
    /// budget's counters are rebuilt from (`domain::budgets`).
    pub async fn window_usage(
        &self,
        scope: &TenantScope,
        tenant: &str,
        app: Option<&str>,
        key: Option<&str>,
        models: Option<&[String]>,
        days: domain::budgets::Days,
    ) -> Result<(i64, i64, i64)> {
        // The months the days fall in: the rollups' key starts with them.
        let mut months = Vec::new();
        let mut d = days.0;
        while d < days.1 {
            let m = d.format("%Y-%m").to_string();
            if months.last() != Some(&m) {
                months.push(m);
            }
            d = d.succ_opt().unwrap_or(days.1);
        }
        Ok(sqlx::query_as(
            "SELECT LEAST(COALESCE(SUM(input_tokens::numeric + output_tokens), 0), 9007199254740991)::int8,
                    LEAST(COALESCE(SUM(cost_micro::numeric), 0), 9007199254740991)::int8,
                    LEAST(COALESCE(SUM(requests::numeric), 0), 9007199254740991)::int8
             FROM usage_rollups
             WHERE period = ANY($1) AND tenant_id = $2 AND day >= $3 AND day < $4
               AND ($5::text IS NULL OR app_id = $5) AND ($6::text IS NULL OR key_id = $6)
               AND ($7::text[] IS NULL OR model = ANY($7))
               AND ($8::text IS NULL OR tenant_id = $8)",
        )
        .bind(&months)
        .bind(tenant)
        .bind(days.0)
        .bind(days.1)
        .bind(app)
        .bind(key)
        .bind(models)
        .bind(scope.tenant())
        .fetch_one(&self.pool)
        .await?)
    }

    /// One end user's settled (tokens, cost) of an app in a month, capped
    /// like [`Self::month_usage`].
    pub async fn end_user_month_usage(
        &self,
        scope: &TenantScope,
        tenant: &str,
        app: &str,
        end_user: &str,
        period: &str,
    ) -> Result<(i64, i64)> {
        Ok(sqlx::query_as(
            "SELECT LEAST(COALESCE(SUM(input_tokens::numeric + output_tokens), 0), 9007199254740991)::int8 AS tokens,
                    LEAST(COALESCE(SUM(cost_micro::numeric), 0), 9007199254740991)::int8 AS cost
             FROM usage_rollups WHERE period = $1 AND tenant_id = $2 AND app_id = $3 AND end_user = $4
               AND ($5::text IS NULL OR tenant_id = $5)",
        )
        .bind(period)
        .bind(tenant)
        .bind(app)
        .bind(end_user)
        .bind(scope.tenant())
        .fetch_one(&self.pool)
        .await?)
    }

    pub async fn usage_event(
        &self,
        scope: &TenantScope,
        request_id: &str,
    ) -> Result<Option<UsageEvent>> {
        let r = sqlx::query_as::<_, UsageEventRow>(
            "SELECT request_id, tenant_id, app_id, key_id, model, period, day, input_tokens,
                    output_tokens, cost_micro, est_tokens, est_cost_micro, overrun_tokens, overrun_cost_micro,
                    status, stream, replica, started_at, settled_at, usage_source, usage_anomaly,
                    reported_usage, deployment, tags, end_user, cost_pico, breakdown, charges,
                    session_id, asked_model, raw_usage
             FROM usage_events WHERE request_id = $1 AND ($2::text IS NULL OR tenant_id = $2)",
        )
        .bind(request_id)
        .bind(scope.tenant())
        .fetch_optional(&self.pool)
        .await?;
        Ok(r.map(UsageEvent::from))
    }

    /// The scope's tenant ids (jobs visit each tenant's Redis keys).
    pub async fn tenant_ids(&self, scope: &TenantScope) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM tenants WHERE ($1::text IS NULL OR id = $1) ORDER BY id",
        )
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?)
    }
}
