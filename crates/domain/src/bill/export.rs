//! A bill's exports: the per-app CSV, the FOCUS CSV (one row per day, app
//! and model) and the CSV grouped by a tag or by end user.

use super::{attributed_lines, AttributedRow, BillRow, DayRow, GroupBy, TenantInfo};
use crate::money::MicroUsd;

/// One field of a CSV line, quoted when it needs to be; a leading formula
/// character is defused so a spreadsheet never evaluates a tenant's name.
pub fn csv_field(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_string()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

fn csv_line(fields: &[String]) -> String {
    let mut l = fields
        .iter()
        .map(|f| csv_field(f))
        .collect::<Vec<_>>()
        .join(",");
    l.push_str("\r\n");
    l
}

pub const BILL_CSV_HEADER: [&str; 10] = [
    "period",
    "tenant_id",
    "tenant_name",
    "cost_center",
    "app_id",
    "model",
    "requests",
    "input_tokens",
    "output_tokens",
    "cost_usd",
];

/// The month's bill rows as CSV (tenant × app × model); the cost column
/// sums to the bill's total.
pub fn bill_csv(period: &str, rows: &[BillRow], tenants: &[TenantInfo]) -> String {
    let mut out = csv_line(&BILL_CSV_HEADER.map(String::from));
    let mut rows: Vec<&BillRow> = rows.iter().collect();
    rows.sort_by(|a, b| {
        (&a.tenant_id, &a.app_id, &a.model).cmp(&(&b.tenant_id, &b.app_id, &b.model))
    });
    for r in rows {
        let t = tenants.iter().find(|t| t.id == r.tenant_id);
        out.push_str(&csv_line(&[
            period.to_string(),
            r.tenant_id.clone(),
            t.map(|t| t.name.clone()).unwrap_or_default(),
            t.map(|t| t.cost_center.clone()).unwrap_or_default(),
            r.app_id.clone(),
            r.model.clone(),
            r.totals.requests.to_string(),
            r.totals.input_tokens.to_string(),
            r.totals.output_tokens.to_string(),
            MicroUsd(r.totals.cost_micro).to_string(),
        ]));
    }
    out
}

/// FOCUS (FinOps Open Cost and Usage Specification) columns this export
/// fills, in order. One row per tenant × app × model × day.
pub const FOCUS_COLUMNS: [&str; 28] = [
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "ConsumedQuantity",
    "ConsumedUnit",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "InvoiceIssuerName",
    "ServiceCategory",
    "ServiceName",
    "ResourceId",
    "SubAccountId",
    "SubAccountName",
    "Tags",
];

/// Extra columns (FOCUS allows `x_` prefixed custom columns).
pub const FOCUS_EXTRA_COLUMNS: [&str; 5] = [
    "x_CostCenter",
    "x_AppId",
    "x_Requests",
    "x_InputTokens",
    "x_OutputTokens",
];

/// Instants of the export, already formatted (`2026-11-01T00:00:00Z`).
pub struct FocusPeriod<'a> {
    pub billing_start: String,
    pub billing_end: String,
    /// `day` → (start, end) of the charge period.
    pub day_bounds: &'a dyn Fn(&str) -> (String, String),
    /// Name of the platform (ProviderName / InvoiceIssuerName).
    pub provider: &'a str,
}

pub fn focus_csv(p: &FocusPeriod<'_>, rows: &[DayRow], tenants: &[TenantInfo]) -> String {
    let header: Vec<String> = FOCUS_COLUMNS
        .iter()
        .chain(FOCUS_EXTRA_COLUMNS.iter())
        .map(|s| s.to_string())
        .collect();
    let mut out = csv_line(&header);
    let mut rows: Vec<&DayRow> = rows.iter().collect();
    rows.sort_by(|a, b| {
        (&a.tenant_id, &a.day, &a.app_id, &a.model, &a.tags).cmp(&(
            &b.tenant_id,
            &b.day,
            &b.app_id,
            &b.model,
            &b.tags,
        ))
    });
    for r in rows {
        let t = tenants.iter().find(|t| t.id == r.tenant_id);
        let (cs, ce) = (p.day_bounds)(&r.day);
        let cost = MicroUsd(r.totals.cost_micro).to_string();
        let qty = r.totals.tokens().to_string();
        out.push_str(&csv_line(&[
            p.provider.to_string(),
            p.provider.to_string(),
            "USD".into(),
            p.billing_start.clone(),
            p.billing_end.clone(),
            cs,
            ce,
            "Usage".into(),
            String::new(),
            format!("{} tokens of {} for app {}", qty, r.model, r.app_id),
            "Usage-Based".into(),
            cost.clone(),
            cost.clone(),
            cost.clone(),
            cost,
            qty.clone(),
            "Tokens".into(),
            qty,
            "Tokens".into(),
            p.provider.to_string(),
            p.provider.to_string(),
            p.provider.to_string(),
            "AI and Machine Learning".into(),
            r.model.clone(),
            format!("{}/{}/{}", r.tenant_id, r.app_id, r.model),
            r.tenant_id.clone(),
            t.map(|t| t.name.clone()).unwrap_or_default(),
            focus_tags(&r.tags),
            t.map(|t| t.cost_center.clone()).unwrap_or_default(),
            r.app_id.clone(),
            r.totals.requests.to_string(),
            r.totals.input_tokens.to_string(),
            r.totals.output_tokens.to_string(),
        ]));
    }
    out
}

/// FOCUS `Tags`: a JSON object of the row's tags (`{}` for none).
fn focus_tags(tags: &crate::attribution::Tags) -> String {
    crate::attribution::tags_json(tags)
}

/// A bill grouped by a tag or by end user, as CSV: the grouping's column
/// is named after it (`tag:project`, `end_user`); an empty cell is the
/// requests without a value.
pub fn attributed_csv(
    period: &str,
    by: &GroupBy,
    rows: &[AttributedRow],
    tenants: &[TenantInfo],
) -> String {
    let mut out = csv_line(&[
        "period".into(),
        "tenant_id".into(),
        "tenant_name".into(),
        "cost_center".into(),
        by.as_param(),
        "requests".into(),
        "input_tokens".into(),
        "output_tokens".into(),
        "cost_usd".into(),
    ]);
    for l in attributed_lines(rows) {
        let t = tenants.iter().find(|t| t.id == l.tenant_id);
        out.push_str(&csv_line(&[
            period.to_string(),
            l.tenant_id.clone(),
            t.map(|t| t.name.clone()).unwrap_or_default(),
            t.map(|t| t.cost_center.clone()).unwrap_or_default(),
            l.value.clone().unwrap_or_default(),
            l.requests.to_string(),
            l.input_tokens.to_string(),
            l.output_tokens.to_string(),
            l.cost_usd.to_string(),
        ]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bill::Totals;

    #[test]
    fn csv_fields_are_quoted_and_defused() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("=SUM(A1)"), "'=SUM(A1)");
    }

    #[test]
    fn focus_rows_carry_cost_and_quantity() {
        let rows = vec![DayRow {
            tenant_id: "a".into(),
            app_id: "x".into(),
            model: "m1".into(),
            day: "2026-11-02".into(),
            tags: [("project".to_string(), "apollo".to_string())].into(),
            totals: Totals {
                requests: 2,
                input_tokens: 10,
                output_tokens: 5,
                cost_micro: 1_500_000,
            },
        }];
        let bounds = |d: &str| (format!("{d}T00:00:00Z"), format!("{d}T23:59:59Z"));
        let p = FocusPeriod {
            billing_start: "2026-11-01T00:00:00Z".into(),
            billing_end: "2026-12-01T00:00:00Z".into(),
            day_bounds: &bounds,
            provider: "tollgate",
        };
        let csv = focus_csv(&p, &rows, &[]);
        let mut lines = csv.lines();
        let header: Vec<_> = lines.next().unwrap().split(',').collect();
        let line: Vec<_> = lines.next().unwrap().split(',').collect();
        let col = |n: &str| line[header.iter().position(|h| *h == n).unwrap()];
        assert_eq!(col("BilledCost"), "1.500000");
        assert_eq!(col("EffectiveCost"), "1.500000");
        assert_eq!(col("ConsumedQuantity"), "15");
        assert_eq!(col("SubAccountId"), "a");
        assert_eq!(col("ChargePeriodStart"), "2026-11-02T00:00:00Z");
        assert_eq!(col("Tags"), "\"{\"\"project\"\":\"\"apollo\"\"}\"");
    }
}
