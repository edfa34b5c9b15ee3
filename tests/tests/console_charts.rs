//! The bills page's charts, in headless Chromium against the real server:
//! every value has a hover title equal to the day's spend summed here from
//! the ledger (not by the console's code); no day after today is drawn; the
//! y axis has amounts between bottom and top; the burn-down's budget
//! includes the approved grant; a forecast is there (on the first day of
//! the month too) and says what it is based on; the SVG scales to its card
//! and is not clipped at 390 px.

mod browser_common;

use browser_common::{browse, Driver, Ui};
use chrono::{Datelike, TimeZone, Utc};
use domain::usage::UsageEvent;
use domain::{Limits, MicroUsd};
use e2e::*;
use fantoccini::Locator;
use sqlx::Row;
use std::collections::BTreeMap;

async fn walk(env: &TestEnv) -> (server::app::Running, Driver, Ui) {
    browse(env, |c| c.platform.timezone = "UTC".into()).await
}

/// One settled request of tenant t on `day` (UTC) costing `cost` micro-USD.
fn event(n: u32, day: chrono::NaiveDate, cost: i64) -> UsageEvent {
    let now = Utc::now();
    let noon = Utc.from_utc_datetime(&day.and_hms_opt(12, 0, 0).unwrap());
    let at = if noon > now {
        now - chrono::Duration::seconds(30)
    } else {
        noon
    };
    let started = at.timestamp_millis();
    UsageEvent {
        request_id: format!("chart_{n}"),
        tenant_id: "t".into(),
        app_id: "a".into(),
        key_id: "k".into(),
        model: "gpt-4o-mini".into(),
        period: day.format("%Y-%m").to_string(),
        day: day.format("%Y-%m-%d").to_string(),
        input_tokens: 100,
        output_tokens: 50,
        cost_micro: cost,
        est_tokens: 150,
        est_cost_micro: cost,
        overrun_tokens: 0,
        overrun_cost_micro: 0,
        status: "ok".into(),
        stream: false,
        usage_source: "provider".into(),
        replica: "test".into(),
        started_at_ms: started,
        settled_at_ms: started + 100,
        anomaly: None,
        deployment: None,
        attribution: Default::default(),
    }
}

/// The hover titles of a chart's dots, in order.
async fn titles(ui: &Ui, css: &str) -> Vec<String> {
    let mut out = vec![];
    for t in ui.c.find_all(Locator::Css(css)).await.unwrap() {
        out.push(t.prop("textContent").await.unwrap().unwrap_or_default());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_values_match_the_ledger_no_future_day_is_drawn_and_the_forecast_says_its_basis() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let budget = Limits {
        monthly_cost_usd: Some(MicroUsd(100_000_000)),
        ..Default::default()
    };
    env.tenant("t", budget, None).await;
    env.app("t", "a", Limits::default()).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    let (srv, _driver, ui) = walk(&env).await;

    // An approved grant of $20: the burn-down's budget is $120.
    let ta = login(&ui.base, "ta@x.io").await;
    let (s, q) = api(
        "POST",
        &format!("{}/api/v1/quota-requests", ui.base),
        Some(&ta),
        Some(serde_json::json!({"tenant_id": "t", "cost_usd": "20",
            "expires_at": "2099-01-01T00:00:00Z", "reason": "launch"})),
    )
    .await;
    assert_eq!(s, 201, "{q}");
    let admin = login(&ui.base, "admin@x.io").await;
    let (s, a) = api(
        "POST",
        &format!(
            "{}/api/v1/quota-requests/{}/approve",
            ui.base,
            q["id"].as_str().unwrap()
        ),
        Some(&admin),
        Some(serde_json::json!({"note": "ok"})),
    )
    .await;
    assert_eq!(s, 200, "{a}");

    // Spend on every day of the month so far (two requests a day).
    let today = Utc::now().date_naive();
    let first = today.with_day(1).unwrap();
    let mut events = vec![];
    for d in 0..today.day() {
        let day = first + chrono::Days::new(u64::from(d));
        events.push(event(2 * d, day, 1_234_567 * i64::from(d + 1)));
        events.push(event(2 * d + 1, day, 10_001));
    }
    env.store.insert_usage_events(&events).await.unwrap();
    let period = this_month();
    // The day's spend, summed here from the ledger's events.
    let ledger: BTreeMap<String, i64> = sqlx::query(
        "SELECT day::text AS day, sum(cost_micro)::int8 AS c FROM usage_events
         WHERE tenant_id = 't' AND period = $1 GROUP BY day ORDER BY day",
    )
    .bind(&period)
    .fetch_all(env.store.pool())
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get("day"), r.get("c")))
    .collect();
    assert_eq!(ledger.len() as u32, today.day());

    ui.login("admin@x.io", None).await;
    ui.go(&format!("/console/bills?period={period}&tenant=t"))
        .await;
    ui.wait("#daily-chart svg").await;

    // Hover values: one per day so far, each the ledger's figure.
    let daily = titles(&ui, "#daily-chart svg circle.dot title").await;
    let want: Vec<String> = ledger
        .iter()
        .map(|(day, c)| format!("t · {day}: {}", MicroUsd(*c).shown()))
        .collect();
    assert_eq!(daily, want, "no day after today, each day's spend");

    // The burn-down: the budget left after each day, then the forecast.
    let budget_text = ui.text("#burndown-budget").await;
    assert!(budget_text.contains("$120.00"), "{budget_text}");
    assert!(
        budget_text.contains("$20.00"),
        "the grant named: {budget_text}"
    );
    let mut left = 120_000_000i64;
    let want: Vec<String> = ledger
        .iter()
        .map(|(day, c)| {
            left -= c;
            format!("{day}: {}", MicroUsd(left).shown())
        })
        .collect();
    let remaining = titles(
        &ui,
        "#burndown-chart g.series[data-name='Budget remaining'] circle.dot title",
    )
    .await;
    assert_eq!(remaining, want);
    let days_in_month = domain::period::days_in_month(&period).unwrap();
    let forecast = titles(
        &ui,
        "#burndown-chart g.series[data-name='Forecast month-end spend'] circle.dot title",
    )
    .await;
    if today.day() < days_in_month {
        // From today to the month's end, and said what it is based on (on
        // the first day: today so far).
        assert_eq!(forecast.len() as u32, days_in_month - today.day() + 1);
        assert!(!ui.text("#forecast").await.is_empty());
        let basis = ui.text("#forecast-basis").await;
        let expected = if today.day() == 1 {
            "First day of the month"
        } else {
            "average spend of the complete days"
        };
        assert!(basis.contains(expected), "{basis}");
    }

    // Amounts at intermediate ticks, not only top and bottom.
    for chart in ["#daily-chart", "#burndown-chart"] {
        let ticks = titles(&ui, &format!("{chart} text.y-tick")).await;
        assert_eq!(ticks.len(), 5, "{chart}: {ticks:?}");
        assert!(ticks
            .iter()
            .all(|t| t.starts_with('$') || t.starts_with("-$")));
    }
    ui.shot("charts-01-bills").await;

    // The SVG scales to its card: no fixed width, and inside a phone's
    // screen at 390 px.
    let svg = ui.wait("#burndown-chart svg").await;
    assert_eq!(svg.attr("width").await.unwrap().as_deref(), Some("100%"));
    assert!(svg.attr("viewBox").await.unwrap().is_some());
    ui.c.set_window_size(390, 844).await.unwrap();
    ui.go(&format!("/console/bills?period={period}&tenant=t"))
        .await;
    ui.wait("#burndown-chart svg").await;
    let fits =
        ui.c.execute(
            "const v = document.documentElement.clientWidth;
             return [...document.querySelectorAll('svg.chart')].every(s => {
               const r = s.getBoundingClientRect();
               return r.width > 100 && r.left >= 0 && r.right <= v + 0.5;
             });",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(fits, serde_json::json!(true), "every chart inside 390 px");
    ui.c.execute(
        "document.querySelector('#burndown-chart').scrollIntoView()",
        vec![],
    )
    .await
    .unwrap();
    ui.shot("charts-02-phone").await;

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}
