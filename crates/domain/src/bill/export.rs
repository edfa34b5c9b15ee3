//! A bill's exports: the per-app CSV, the FOCUS CSV (one row per day, app
//! and model) and the CSV grouped by a tag or by end user.

use super::{attributed_lines, AttributedRow, BillRow, DayRow, GroupBy, TenantInfo};
use crate::money::MicroUsd;

/// One field of a CSV line, quoted when it needs to be; a leading formula
/// character is defused so a spreadsheet never evaluates a tenant's name.
pub fn csv_field(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_csv_field(&mut out, s);
    out
}

/// `-` then digits, with at most one `.` between digits: "-0.25".
fn is_negative_decimal(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('-') else {
        return false;
    };
    let (int, frac) = rest.split_once('.').unwrap_or((rest, "0"));
    !int.is_empty()
        && !frac.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

/// [`csv_field`] appended to `out`: the one rule, without a string per field.
fn push_csv_field(out: &mut String, s: &str) {
    // A negative amount ("-0.25": a credit) is a number to a spreadsheet,
    // not a formula; anything else starting so is defused.
    let defuse = s.starts_with(['=', '+', '-', '@', '\t', '\r']) && !is_negative_decimal(s);
    let quote = s.contains([',', '"', '\n', '\r']);
    if quote {
        out.push('"');
    }
    if defuse {
        out.push('\'');
    }
    if quote {
        for (i, part) in s.split('"').enumerate() {
            if i > 0 {
                out.push_str("\"\"");
            }
            out.push_str(part);
        }
        out.push('"');
    } else {
        out.push_str(s);
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

pub const BILL_CSV_HEADER: [&str; 11] = [
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
    "charge_category",
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
            "usage".to_string(),
        ]));
    }
    out
}

/// The bill CSV's adjustment rows (after the usage rows): one per approved
/// adjustment share, `charge_category` `adjustment`, the model named with
/// the provider's day and account; the unallocated line has no tenant and
/// is named `unallocated`.
pub fn adjustment_csv_rows(
    period: &str,
    adjustments: &[super::AdjustmentLine],
    tenants: &[TenantInfo],
) -> String {
    let by_id = super::tenants_by_id(tenants);
    let mut out = String::new();
    for a in adjustments {
        let t = by_id.get(a.tenant_id.as_str()).copied();
        out.push_str(&csv_line(&[
            period.to_string(),
            a.tenant_id.clone(),
            if a.tenant_id.is_empty() {
                "unallocated".to_string()
            } else {
                t.map(|t| t.name.clone()).unwrap_or_default()
            },
            t.map(|t| t.cost_center.clone()).unwrap_or_default(),
            String::new(),
            format!("{} {} ({})", a.model, a.day, a.account),
            "0".into(),
            "0".into(),
            "0".into(),
            a.cost_usd.to_string(),
            "adjustment".into(),
        ]));
    }
    out
}

/// The FOCUS export's adjustment rows (after the usage rows): one per
/// approved adjustment share, `ChargeCategory` `Adjustment`, no quantity.
pub fn focus_adjustment_rows(
    p: &FocusPeriod<'_>,
    adjustments: &[super::AdjustmentLine],
    tenants: &std::collections::HashMap<&str, &TenantInfo>,
    out: &mut String,
) {
    for a in adjustments {
        let t = tenants.get(a.tenant_id.as_str()).copied();
        let cost = a.cost_usd.to_string();
        let desc = format!(
            "Provider invoice adjustment of {} on {} ({})",
            a.model, a.day, a.account
        );
        let name = if a.tenant_id.is_empty() {
            "unallocated"
        } else {
            t.map_or("", |t| t.name.as_str())
        };
        // The provider's day is a UTC day.
        let (cs, ce) = match chrono::NaiveDate::parse_from_str(&a.day, "%Y-%m-%d") {
            Ok(d) => (
                format!("{d}T00:00:00Z"),
                format!("{}T00:00:00Z", d + chrono::Duration::days(1)),
            ),
            Err(_) => (String::new(), String::new()),
        };
        let fields: [&str; 36] = [
            p.provider,
            p.provider,
            "USD",
            &p.billing_start,
            &p.billing_end,
            &cs,
            &ce,
            "Adjustment",
            "",
            &desc,
            "One-Time",
            &cost,
            &cost,
            &cost,
            &cost,
            "",
            "",
            "",
            "",
            p.provider,
            p.provider,
            p.provider,
            "AI and Machine Learning",
            &a.model,
            &format!("adjustment/{}", a.adjustment_id),
            &a.tenant_id,
            name,
            "{}",
            "",
            t.map_or("", |t| t.cost_center.as_str()),
            "",
            "0",
            "0",
            "0",
            "adjustment",
            &a.pico.to_string(),
        ];
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_csv_field(out, f);
        }
        out.push_str("\r\n");
    }
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
    pub day_bounds: &'a (dyn Fn(&str) -> (String, String) + Sync),
    /// Name of the platform (ProviderName / InvoiceIssuerName).
    pub provider: &'a str,
}

/// The FOCUS export of `rows`: [`focus_header`], then [`focus_rows`].
pub fn focus_csv(p: &FocusPeriod<'_>, rows: &[DayRow], tenants: &[TenantInfo]) -> String {
    let mut out = focus_header();
    focus_rows(p, rows, &super::tenants_by_id(tenants), &mut out);
    out
}

/// The FOCUS export's header line ([`FOCUS_COLUMNS`], then
/// [`FOCUS_EXTRA_COLUMNS`]).
pub fn focus_header() -> String {
    let mut out = String::new();
    for (i, c) in FOCUS_COLUMNS
        .iter()
        .chain(FOCUS_EXTRA_COLUMNS.iter())
        .enumerate()
    {
        if i > 0 {
            out.push(',');
        }
        push_csv_field(&mut out, c);
    }
    out.push_str("\r\n");
    out
}

/// The FOCUS rows of `rows`, appended to `out`: one per charge component
/// of each day row, sorted (tenant, day, app, model, tags), costs by the
/// bill's rule ([`super::line_costs`]). The rule rounds per tenant, so
/// `rows` must hold each of its tenants whole: the export of a month may be
/// written a tenant (or a few) at a time, and reads the same as in one go.
pub fn focus_rows(
    p: &FocusPeriod<'_>,
    rows: &[DayRow],
    tenants: &std::collections::HashMap<&str, &TenantInfo>,
    out: &mut String,
) {
    use std::fmt::Write;
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
    // The fields every row repeats, escaped once.
    let mut lead = String::new();
    for f in [
        p.provider,
        p.provider,
        "USD",
        &p.billing_start,
        &p.billing_end,
    ] {
        push_csv_field(&mut lead, f);
        lead.push(',');
    }
    let mut provider3 = String::new();
    for _ in 0..3 {
        push_csv_field(&mut provider3, p.provider);
        provider3.push(',');
    }
    // A day row's fields, formatted once for all its components.
    let mut day: Option<(&DayRow, String, String, String)> = None;
    let mut buf = String::new();
    for ((r, nth, component, qty, pico), cost) in charges.into_iter().zip(costs) {
        if !day.as_ref().is_some_and(|d| std::ptr::eq(d.0, r)) {
            let (cs, ce) = (p.day_bounds)(&r.day);
            let mut who = String::new();
            let t = tenants.get(r.tenant_id.as_str()).copied();
            let fields = [
                "AI and Machine Learning",
                &r.model,
                &format!("{}/{}/{}", r.tenant_id, r.app_id, r.model),
                &r.tenant_id,
                t.map_or("", |t| t.name.as_str()),
                &focus_tags(&r.tags),
            ];
            for f in fields {
                push_csv_field(&mut who, f);
                who.push(',');
            }
            let mut tail = String::new();
            push_csv_field(&mut tail, t.map_or("", |t| t.cost_center.as_str()));
            tail.push(',');
            push_csv_field(&mut tail, &r.app_id);
            day = Some((r, cs, ce, who));
            buf = tail;
        }
        let Some((_, cs, ce, who)) = &day else {
            continue;
        };
        let name = component.map_or("unsplit", |c| c.name());
        let unit = match component.map(|c| c.unit()) {
            Some("calls") => "Calls",
            Some(_) => "Tokens",
            None => "",
        };
        let first = nth == 0;
        let count = |v: i64| if first { v } else { 0 };
        let cost = MicroUsd(cost);
        out.push_str(&lead);
        push_csv_field(out, cs);
        out.push(',');
        push_csv_field(out, ce);
        out.push_str(",Usage,,");
        push_csv_field(
            out,
            &format!(
                "{qty} {} {name} of {} for app {}",
                unit.to_lowercase(),
                r.model,
                r.app_id
            ),
        );
        let _ = write!(
            out,
            ",Usage-Based,{cost},{cost},{cost},{cost},{qty},{unit},{qty},{unit},"
        );
        out.push_str(&provider3);
        out.push_str(who);
        push_csv_field(out, &unit_price(pico, qty));
        out.push(',');
        out.push_str(&buf);
        let _ = write!(
            out,
            ",{},{},{},{name},{pico}\r\n",
            count(r.totals.requests),
            count(r.totals.input_tokens),
            count(r.totals.output_tokens),
        );
    }
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
        assert_eq!(csv_field("-0.000002"), "-0.000002", "a credit is a number");
        assert_eq!(csv_field("-1+1"), "'-1+1");
        assert_eq!(csv_field("-.5"), "'-.5");
        assert_eq!(csv_field("-"), "'-");
    }

    /// November 2026 in UTC, each day its own charge period.
    fn november() -> FocusPeriod<'static> {
        FocusPeriod {
            billing_start: "2026-11-01T00:00:00Z".into(),
            billing_end: "2026-12-01T00:00:00Z".into(),
            day_bounds: &|d: &str| (format!("{d}T00:00:00Z"), format!("{d}T23:59:59Z")),
            provider: "tollgate",
        }
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
        let p = november();
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

    /// The export written a department at a time (as it is streamed)
    /// reads the same as written in one go: the rounding rule splits each
    /// department's line over its own rows only.
    #[test]
    fn focus_written_a_tenant_at_a_time_reads_the_same() {
        let mut rows = Vec::new();
        for i in 0..60i64 {
            let mut charges = crate::pricing::Charges::default();
            charges.set(
                crate::pricing::Component::Input,
                10 + i,
                i128::from(333_333_333 * (i + 1)),
            );
            charges.set(
                crate::pricing::Component::Output,
                i,
                i128::from(777_777_777 * i),
            );
            let pico = i64::try_from(charges.total_pico()).unwrap();
            rows.push(DayRow {
                tenant_id: format!("t{}", i % 4),
                app_id: format!("a{}", i % 3),
                model: "m".into(),
                day: format!("2026-11-{:02}", 1 + i % 5),
                tags: Default::default(),
                totals: Totals {
                    requests: 1,
                    input_tokens: 10 + i,
                    output_tokens: i,
                    cost_micro: pico / 1_000_000,
                    cost_pico: pico,
                    charges,
                },
            });
        }
        let p = november();
        let whole = focus_csv(&p, &rows, &[]);
        let mut piecewise = focus_header();
        for t in ["t0", "t1", "t2", "t3"] {
            let mine: Vec<DayRow> = rows.iter().filter(|r| r.tenant_id == t).cloned().collect();
            focus_rows(&p, &mine, &Default::default(), &mut piecewise);
        }
        assert_eq!(piecewise, whole);
        assert_eq!(
            whole.lines().count(),
            1 + 2 * 60 - 1,
            "a row without output has one component"
        );
    }

    #[test]
    fn unit_prices_are_exact_decimals() {
        assert_eq!(super::unit_price(300_000, 1), "0.0000003");
        assert_eq!(super::unit_price(10_000_000_000, 1), "0.01");
        assert_eq!(super::unit_price(1, 3), "0");
        assert_eq!(super::unit_price(5, 0), "");
    }
}
