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
    let weights: Vec<(&str, i128)> = rows
        .iter()
        .map(|r| (r.tenant_id.as_str(), i128::from(r.totals.cost_pico)))
        .collect();
    let by_id = super::tenants_by_id(tenants);
    for (r, cost) in rows.iter().zip(super::line_costs(&weights)) {
        let t = by_id.get(r.tenant_id.as_str()).copied();
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
            MicroUsd(cost).to_string(),
        ]));
    }
    out
}

/// FOCUS (FinOps Open Cost and Usage Specification) columns this export
/// fills, in order. One row per tenant × app × model × day × tags × charge
/// component (cached input, cache write, output, tool calls …), each with
/// its quantity, unit and unit price; a tenant's rows add up to its bill
/// line. Requests and tokens (`x_Requests`, `x_InputTokens`,
/// `x_OutputTokens`) are on the first component row of each day row (0 on
/// the others), so every column sums to the bill.
pub const FOCUS_COLUMNS: [&str; 29] = [
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
    "ListUnitPrice",
];

/// Extra columns (FOCUS allows `x_` prefixed custom columns).
pub const FOCUS_EXTRA_COLUMNS: [&str; 7] = [
    "x_CostCenter",
    "x_AppId",
    "x_Requests",
    "x_InputTokens",
    "x_OutputTokens",
    "x_ChargeComponent",
    "x_ExactCostPicoUSD",
];

/// A unit price in USD from an exact cost and a quantity, as a decimal
/// with up to 12 places (FOCUS `ListUnitPrice`); empty without a quantity.
fn unit_price(pico: i128, quantity: i64) -> String {
    if quantity <= 0 {
        return String::new();
    }
    // pico-USD per unit, to 6 more places: USD with 12 + 6 decimals,
    // rounded half up to 12.
    let per = (pico * 1_000_000 + i128::from(quantity) / 2) / i128::from(quantity);
    let per = (per + 500_000) / 1_000_000;
    let whole = per / 1_000_000_000_000;
    let frac = format!("{:012}", per % 1_000_000_000_000);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        whole.to_string()
    } else {
        format!("{whole}.{frac}")
    }
}

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
    // One row per component of each day row; costs by the bill's rule.
    let mut charges: Vec<(&DayRow, usize, Option<crate::pricing::Component>, i64, i128)> =
        Vec::new();
    for r in rows {
        let weights = r.totals.component_weights();
        if weights.is_empty() {
            charges.push((r, 0, None, 0, 0));
        }
        for (i, (c, q, pico)) in weights.into_iter().enumerate() {
            charges.push((r, i, c, q, pico));
        }
    }
    let weights: Vec<(&str, i128)> = charges
        .iter()
        .map(|(r, _, _, _, pico)| (r.tenant_id.as_str(), *pico))
        .collect();
    let costs = super::line_costs(&weights);
    let by_id = super::tenants_by_id(tenants);
    for ((r, nth, component, qty, pico), cost) in charges.into_iter().zip(costs) {
        let t = by_id.get(r.tenant_id.as_str()).copied();
        let (cs, ce) = (p.day_bounds)(&r.day);
        let cost = MicroUsd(cost).to_string();
        let name = component.map_or("unsplit", |c| c.name());
        let unit = match component.map(|c| c.unit()) {
            Some("calls") => "Calls",
            Some(_) => "Tokens",
            None => "",
        };
        let qty_s = qty.to_string();
        let first = nth == 0;
        let count = |v: i64| if first { v } else { 0 }.to_string();
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
            format!(
                "{qty} {} {name} of {} for app {}",
                unit.to_lowercase(),
                r.model,
                r.app_id
            ),
            "Usage-Based".into(),
            cost.clone(),
            cost.clone(),
            cost.clone(),
            cost,
            qty_s.clone(),
            unit.into(),
            qty_s,
            unit.into(),
            p.provider.to_string(),
            p.provider.to_string(),
            p.provider.to_string(),
            "AI and Machine Learning".into(),
            r.model.clone(),
            format!("{}/{}/{}", r.tenant_id, r.app_id, r.model),
            r.tenant_id.clone(),
            t.map(|t| t.name.clone()).unwrap_or_default(),
            focus_tags(&r.tags),
            unit_price(pico, qty),
            t.map(|t| t.cost_center.clone()).unwrap_or_default(),
            r.app_id.clone(),
            count(r.totals.requests),
            count(r.totals.input_tokens),
            count(r.totals.output_tokens),
            name.to_string(),
            pico.to_string(),
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
    let by_id = super::tenants_by_id(tenants);
    for l in attributed_lines(rows) {
        let t = by_id.get(l.tenant_id.as_str()).copied();
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
        let mut charges = crate::pricing::Charges::default();
        charges.set(crate::pricing::Component::CachedInput, 10, 500_000_000_000);
        charges.set(crate::pricing::Component::Output, 5, 1_000_000_000_001);
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
                cost_micro: 1_500_001,
                cost_pico: 1_500_000_000_001,
                charges,
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
        let cached: Vec<_> = lines.next().unwrap().split(',').collect();
        let output: Vec<_> = lines.next().unwrap().split(',').collect();
        assert!(lines.next().is_none());
        let col =
            |line: &[&str], n: &str| line[header.iter().position(|h| *h == n).unwrap()].to_string();
        // One row per component, each at its own quantity and price; the
        // rows add up to the line, rounded once (1.500000000001 → 1.500000).
        assert_eq!(col(&cached, "x_ChargeComponent"), "cached_input");
        assert_eq!(col(&cached, "BilledCost"), "0.500000");
        assert_eq!(col(&cached, "ConsumedQuantity"), "10");
        assert_eq!(col(&cached, "ConsumedUnit"), "Tokens");
        assert_eq!(col(&cached, "ListUnitPrice"), "0.05");
        assert_eq!(col(&cached, "x_Requests"), "2");
        assert_eq!(col(&output, "x_ChargeComponent"), "output");
        assert_eq!(col(&output, "BilledCost"), "1.000000");
        assert_eq!(col(&output, "EffectiveCost"), "1.000000");
        assert_eq!(col(&output, "ConsumedQuantity"), "5");
        assert_eq!(col(&output, "ListUnitPrice"), "0.2");
        assert_eq!(col(&output, "x_Requests"), "0");
        assert_eq!(col(&output, "x_ExactCostPicoUSD"), "1000000000001");
        assert_eq!(col(&cached, "SubAccountId"), "a");
        assert_eq!(col(&cached, "ChargePeriodStart"), "2026-11-02T00:00:00Z");
        assert_eq!(col(&cached, "Tags"), "\"{\"\"project\"\":\"\"apollo\"\"}\"");
    }

    #[test]
    fn unit_prices_are_exact_decimals() {
        assert_eq!(super::unit_price(300_000, 1), "0.0000003");
        assert_eq!(super::unit_price(10_000_000_000, 1), "0.01");
        assert_eq!(super::unit_price(1, 3), "0");
        assert_eq!(super::unit_price(5, 0), "");
    }
}
