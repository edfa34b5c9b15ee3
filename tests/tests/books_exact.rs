//! The books are exact (docs/billing.md, "Exact cost, and the rounding
//! rule"): a million ledger rows priced component by component, summed by
//! the rollups and read back through the bills API, its CSV and FOCUS
//! export. What each bill line must be is computed here, from the tokens
//! the test drew and the prices it set — Σ tokens × price per component,
//! rounded once per department line, half up — never by the books' code.

use domain::pricing::sheet::{PriceSheet, TokenPrices, ToolFees};
use domain::usage::{Breakdown, UsageEvent};
use e2e::*;
use std::collections::BTreeMap;

/// How many ledger rows (`TOLLGATE_BOOKS_ROWS` to change it).
fn rows() -> usize {
    std::env::var("TOLLGATE_BOOKS_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// The test's own prices, µUSD per million tokens (fees: µUSD per call),
/// per model: input, cached, 5-minute write, 1-hour write, output, search
/// fee. Odd numbers, so that costs are fractions of a micro-dollar.
const PRICES: [(&str, [i64; 6]); 3] = [
    (
        "m-large",
        [3_000_001, 300_007, 3_750_011, 6_000_013, 15_000_017, 10_003],
    ),
    ("m-small", [150_001, 15_001, 0, 0, 600_007, 0]),
    (
        "m-cache",
        [1_250_003, 125_009, 1_562_501, 2_500_001, 10_000_019, 25_001],
    ),
];

fn sheet(p: &[i64; 6]) -> PriceSheet {
    PriceSheet {
        base: TokenPrices {
            input: p[0],
            output: p[4],
            cached_input: Some(p[1]),
            cache_write_5m: Some(p[2]),
            cache_write_1h: Some(p[3]),
            ..Default::default()
        },
        tool_fees: ToolFees { web_search: p[5] },
        ..Default::default()
    }
}

/// A small deterministic generator (the run is reproducible).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, below: u64) -> i64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % below) as i64
    }
}

#[tokio::test]
async fn a_million_rows_add_up_to_the_micro_dollar_in_every_view() {
    let env = TestEnv::new().await;
    user(&env, "finance@example.com", "finance", None).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let token = login(&base, "finance@example.com").await;
    let period = this_month();
    let day = format!("{period}-01");
    let sheets: Vec<PriceSheet> = PRICES.iter().map(|(_, p)| sheet(p)).collect();

    let n = rows();
    let mut rng = Lcg(0x7011_6a7e);
    // Per tenant: the exact pico-USD the test computed, and per component
    // (input, cached, 5m, 1h, output, searches) the quantities.
    let mut expected: BTreeMap<String, (i128, [i64; 6])> = BTreeMap::new();
    let mut batch = Vec::with_capacity(20_000);
    for i in 0..n {
        let tenant = format!("dept-{:02}", rng.next(12));
        let m = rng.next(3) as usize;
        let (model, p) = PRICES[m];
        let b = Breakdown {
            input: rng.next(5_000),
            cached_input: rng.next(4) * rng.next(60_000),
            cache_write_5m: if rng.next(5) == 0 { rng.next(8_000) } else { 0 },
            cache_write_1h: if rng.next(9) == 0 {
                rng.next(30_000)
            } else {
                0
            },
            output: rng.next(3_000),
            web_search_calls: if rng.next(20) == 0 { rng.next(6) } else { 0 },
            ..Default::default()
        };
        // Σ tokens × price, here, independently of the price sheet's code.
        let q = [
            b.input,
            b.cached_input,
            b.cache_write_5m,
            b.cache_write_1h,
            b.output,
            b.web_search_calls,
        ];
        let mut pico: i128 = (0..5).map(|k| i128::from(q[k]) * i128::from(p[k])).sum();
        pico += i128::from(q[5]) * i128::from(p[5]) * 1_000_000;
        let e = expected.entry(tenant.clone()).or_default();
        e.0 += pico;
        for (sum, v) in e.1.iter_mut().zip(q) {
            *sum += v;
        }
        // The ledger row as the gateway books it: the sheet's charges.
        let charges = sheets[m].charges(&b);
        let cost_pico = i64::try_from(charges.total_pico()).unwrap();
        batch.push(UsageEvent {
            request_id: format!("req_books_{i:08}"),
            tenant_id: tenant,
            app_id: format!("app-{}", rng.next(3)),
            key_id: format!("key-{}", rng.next(7)),
            model: model.to_string(),
            period: period.clone(),
            day: day.clone(),
            input_tokens: b.total_input(),
            output_tokens: b.output,
            cost_micro: (cost_pico + 999_999) / 1_000_000,
            cost_pico,
            est_tokens: 0,
            est_cost_micro: 0,
            overrun_tokens: 0,
            overrun_cost_micro: 0,
            status: "ok".into(),
            stream: false,
            usage_source: "provider".into(),
            replica: "books-test".into(),
            started_at_ms: 0,
            settled_at_ms: 0,
            deployment: None,
            anomaly: None,
            breakdown: Some(b),
            charges: Some(charges),
            raw_usage: None,
            attribution: Default::default(),
        });
        if batch.len() == batch.capacity() || i + 1 == n {
            env.store.insert_usage_events(&batch).await.unwrap();
            batch.clear();
        }
    }

    // The bill: each department's line is its exact cost rounded once.
    let (status, bill) = api(
        "GET",
        &format!("{base}/api/v1/bills?period={period}&by=component"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{bill}");
    let usd = |v: &serde_json::Value| {
        domain::money::MicroUsd::from_usd_str(v.as_str().unwrap())
            .unwrap()
            .0
    };
    let half_up = |pico: i128| i64::try_from((pico + 500_000) / 1_000_000).unwrap();
    let mut total = 0;
    for t in bill["tenants"].as_array().unwrap() {
        let id = t["tenant_id"].as_str().unwrap();
        let (pico, q) = expected[id];
        assert_eq!(usd(&t["cost_usd"]), half_up(pico), "{id}: the bill line");
        total += half_up(pico);
        let lines: Vec<&serde_json::Value> = bill["lines"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["tenant_id"] == id)
            .collect();
        let qty = |k: &str| {
            lines
                .iter()
                .find(|l| l["key"] == k)
                .map_or(0, |l| l["quantity"].as_i64().unwrap())
        };
        assert_eq!(
            [
                qty("input"),
                qty("cached_input"),
                qty("cache_write_5m"),
                qty("cache_write_1h"),
                qty("output"),
                qty("web_search"),
            ],
            q,
            "{id}: quantities by component"
        );
        let by_component: i64 = lines.iter().map(|l| usd(&l["cost_usd"])).sum();
        assert_eq!(
            by_component,
            half_up(pico),
            "{id}: components add up to the line"
        );
    }
    assert_eq!(bill["tenants"].as_array().unwrap().len(), expected.len());
    assert_eq!(
        usd(&bill["total"]["cost_usd"]),
        total,
        "the total is the lines' sum"
    );

    // The CSV (tenant × app × model) and the FOCUS export (one row per
    // component) add up to each line.
    for (path, cost_col) in [("bills.csv", "cost_usd"), ("bills.focus.csv", "BilledCost")] {
        let csv = reqwest::Client::new()
            .get(format!("{base}/api/v1/{path}?period={period}"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let at = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let (tenant_col, cost_col) = (
            at(if path == "bills.csv" {
                "tenant_id"
            } else {
                "SubAccountId"
            }),
            at(cost_col),
        );
        let mut sums: BTreeMap<String, i64> = BTreeMap::new();
        for line in lines {
            // No field here holds a comma but Tags, which comes after the
            // columns read (an empty `{}` in this test).
            let f: Vec<&str> = line.split(',').collect();
            *sums.entry(f[tenant_col].to_string()).or_default() +=
                domain::money::MicroUsd::from_usd_str(f[cost_col])
                    .unwrap()
                    .0;
        }
        for (id, (pico, _)) in &expected {
            assert_eq!(sums[id], half_up(*pico), "{path}: {id}");
        }
    }
    srv.shutdown().await;
}
