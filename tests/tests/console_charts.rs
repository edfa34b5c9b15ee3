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
        cost_pico: 0,
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
        breakdown: None,
        charges: None,
        raw_usage: None,
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
            "expires_at": days_ahead(30), "reason": "launch"})),
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

/// The platform admin's and finance's dashboards: this month's spend so
/// far beside last month's, the change against the same days of last
/// month, the cumulative trend (every hover value the running sum of the
/// ledger's days, computed here) and the biggest spenders by name, in
/// order; a tenant admin does not see the platform's spend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_this_months_spend_beside_last_months_from_the_ledger() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.tenant("t", Limits::default(), None).await;
    env.tenant("u", Limits::default(), None).await;
    sqlx::query(
        "UPDATE tenants SET name = CASE id WHEN 'u' THEN 'Research Lab' ELSE 'Core Team' END",
    )
    .execute(env.store.pool())
    .await
    .unwrap();
    env.app("t", "a", Limits::default()).await;
    env.app("u", "a", Limits::default()).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "fin@x.io", "finance", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    let (srv, _driver, ui) = walk(&env).await;

    let today = Utc::now().date_naive();
    let first = today.with_day(1).unwrap();
    let prev_first = (first - chrono::Days::new(1)).with_day(1).unwrap();
    let prev_days = (first - prev_first).num_days() as u32;
    let mut events = vec![];
    let mut n = 10_000;
    let mut push = |tenant: &str, day: chrono::NaiveDate, cost: i64| {
        let mut e = event(n, day, cost);
        e.tenant_id = tenant.into();
        events.push(e);
        n += 1;
    };
    // This month: u spends most every day so far; last month: every day.
    for d in 0..today.day() {
        let day = first + chrono::Days::new(u64::from(d));
        push("t", day, 1_500_000 + i64::from(d) * 10_000);
        push("u", day, 4_000_000);
    }
    for d in 0..prev_days {
        let day = prev_first + chrono::Days::new(u64::from(d));
        push("t", day, 2_000_000);
        push("u", day, 1_000_000 + i64::from(d) * 3_333);
    }
    env.store.insert_usage_events(&events).await.unwrap();

    // What the page must say, summed here from the ledger's events.
    let per_day = |period: String| {
        let pool = env.store.pool().clone();
        async move {
            sqlx::query(
                "SELECT day::text AS day, sum(cost_micro)::int8 AS c FROM usage_events
                 WHERE period = $1 GROUP BY day ORDER BY day",
            )
            .bind(period)
            .fetch_all(&pool)
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get::<String, _>("day"), r.get::<i64, _>("c")))
            .collect::<Vec<_>>()
        }
    };
    let period = this_month();
    let previous = prev_first.format("%Y-%m").to_string();
    let this_days = per_day(period.clone()).await;
    let last_days = per_day(previous.clone()).await;
    assert_eq!(this_days.len() as u32, today.day());
    assert_eq!(last_days.len() as u32, prev_days);
    let mtd: i64 = this_days.iter().map(|d| d.1).sum();
    let last_total: i64 = last_days.iter().map(|d| d.1).sum();
    // The change compares the days that are over (1 to today − 1).
    let complete = today.day() as usize - 1;
    let this_complete: i64 = this_days.iter().take(complete).map(|d| d.1).sum();
    let same_point: i64 = last_days.iter().take(complete).map(|d| d.1).sum();
    let days_in_month = domain::period::days_in_month(&period).unwrap() as i64;
    // From the second day on, the forecast is the complete days' average
    // (rounded up) for today (at least what it spent) and each day left.
    let forecast = (complete > 0 && (today.day() as i64) < days_in_month).then(|| {
        let avg = (this_complete + complete as i64 - 1) / complete as i64;
        let spent_today = this_days.last().unwrap().1;
        this_complete + spent_today.max(avg) + avg * (days_in_month - today.day() as i64)
    });
    let u_this = events_sum(&env, "u", &period).await;
    let running = |name: &str, days: &[(String, i64)]| {
        let mut total = 0;
        days.iter()
            .map(|(day, c)| {
                total += c;
                format!("{name} · {day}: {}", MicroUsd(total).shown())
            })
            .collect::<Vec<_>>()
    };

    for who in ["admin@x.io", "fin@x.io"] {
        ui.login(who, None).await;
        ui.go("/console").await;
        ui.wait("#spend").await;
        assert_eq!(ui.text("#spend-mtd").await, MicroUsd(mtd).shown(), "{who}");
        assert_eq!(ui.text("#spend-last").await, MicroUsd(last_total).shown());
        let change = ui.text("#spend-change").await;
        let want = if complete == 0 {
            "first day: nothing to compare yet".to_string()
        } else {
            let pct = (this_complete - same_point) * 100 / same_point;
            if pct > 0 {
                format!("+{pct} %")
            } else {
                format!("\u{2212}{} %", pct.abs())
            }
        };
        assert_eq!(change, want, "against {}", MicroUsd(same_point).shown());
        let section = ui.text("#spend").await;
        if complete > 0 {
            assert!(section.contains(&MicroUsd(same_point).shown()), "{section}");
        }
        if let Some(f) = forecast {
            assert_eq!(ui.text("#spend-forecast").await, MicroUsd(f).shown());
        }
        assert!(section.contains("UTC"), "the time zone named: {section}");
        let this_line = titles(
            &ui,
            "#spend-trend g.series[data-name='This month'] circle.dot title",
        )
        .await;
        assert_eq!(
            this_line,
            running("This month", &this_days),
            "no day after today"
        );
        let last_line = titles(
            &ui,
            "#spend-trend g.series[data-name='Last month'] circle.dot title",
        )
        .await;
        assert_eq!(last_line, running("Last month", &last_days));
        // The biggest spender first, by name, with last month beside it.
        let rows = ui.text("#top-spenders tbody").await;
        let u_at = rows.find("Research Lab").expect("u by its name");
        let t_at = rows.find("Core Team").expect("t by its name");
        assert!(u_at < t_at, "{rows}");
        let u_last: i64 = events_sum(&env, "u", &previous).await;
        let first_row = rows.lines().next().unwrap_or_default().to_string();
        assert!(first_row.contains(&MicroUsd(u_this).shown()), "{rows}");
        assert!(first_row.contains(&MicroUsd(u_last).shown()), "{rows}");
        let share = format!("{:.1} %", u_this as f64 * 100.0 / mtd as f64);
        assert!(first_row.contains(&share), "{share} in {first_row}");
        if who == "fin@x.io" {
            ui.shot("dashboard-01-spend").await;
        }
        ui.logout().await;
    }

    // In Chinese, the same figures under Chinese labels.
    ui.login("fin@x.io", None).await;
    ui.click("button[name=lang][value=zh]").await;
    ui.wait("html[lang=zh]").await;
    ui.go("/console").await;
    let section = ui.text("#spend").await;
    assert!(
        section.contains("本月至今花费") && section.contains("上月同期"),
        "{section}"
    );
    ui.click("button[name=lang][value=en]").await;
    ui.wait("html[lang=en]").await;
    ui.logout().await;

    // A tenant admin's dashboard is their own tenant's, without the
    // platform's spend.
    ui.login("ta@x.io", None).await;
    ui.go("/console").await;
    ui.wait("h1").await;
    assert!(ui.c.find(Locator::Css("#spend")).await.is_err());

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

async fn events_sum(env: &TestEnv, tenant: &str, period: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT sum(cost_micro)::int8 FROM usage_events WHERE tenant_id = $1 AND period = $2",
    )
    .bind(tenant)
    .bind(period)
    .fetch_one(env.store.pool())
    .await
    .unwrap()
}
