//! Time and validation on the console, in headless Chromium against the
//! real server: bills, charts and exports name the platform time zone with
//! its offset; the month's state is said in plain words, and nothing is said
//! for a future or an old month; a period that is not a month shows the
//! bills page with a message (English and 中文), not an error page.

mod browser_common;

use browser_common::{browse, Driver, Ui};
use e2e::*;

async fn walk(env: &TestEnv, tz: &str) -> (server::app::Running, Driver, Ui) {
    browse(env, |c| c.platform.timezone = tz.into()).await
}

/// `YYYY-MM` `delta` months from this month in Asia/Shanghai, computed here
/// from the clock (not by the console's code).
fn shanghai_month(delta: i32) -> String {
    let now = chrono::Utc::now() + chrono::Duration::hours(8);
    let m = now.format("%Y").to_string().parse::<i32>().unwrap() * 12
        + now.format("%m").to_string().parse::<i32>().unwrap()
        - 1
        + delta;
    format!("{:04}-{:02}", m / 12, m % 12 + 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bills_name_the_time_zone_and_say_the_months_state_plainly() {
    let env = TestEnv::new().await;
    user(&env, "fin@x.io", "finance", None).await;
    let (srv, _driver, ui) = walk(&env, "Asia/Shanghai").await;
    ui.login("fin@x.io", None).await;

    let this = shanghai_month(0);
    ui.go(&format!("/console/bills?period={this}")).await;
    let span = ui.text("#bill-span").await;
    assert!(span.contains("Asia/Shanghai (UTC+08:00)"), "{span}");
    assert!(span.contains(&format!("{this}-01 00:00 – ")), "{span}");
    let exports = ui.text("#bill-exports").await;
    assert!(exports.contains("Asia/Shanghai (UTC+08:00)"), "{exports}");
    for chart in ["#daily-chart", "#burndown-chart"] {
        let t = ui.text(chart).await;
        assert!(t.contains("Asia/Shanghai (UTC+08:00)"), "{chart}: {t}");
    }
    let state = ui.text("#bill-state").await;
    assert!(state.contains("still running"), "{state}");
    let page = ui.text("main").await;
    for jargon in ["Postgres", "ClickHouse", "ledger", "UTC+00"] {
        assert!(
            !page.contains(jargon),
            "no {jargon:?} on the bills page: {page}"
        );
    }
    ui.shot("time-01-bills-zone").await;

    // A future month and an old month: no state sentence at all.
    for p in [shanghai_month(2), shanghai_month(-14)] {
        ui.go(&format!("/console/bills?period={p}")).await;
        ui.wait("#bill-span").await;
        assert!(
            ui.c.find(fantoccini::Locator::Css("#bill-state"))
                .await
                .is_err(),
            "no month state for {p}"
        );
    }

    // A period that is not a month: the bills page, this month, a message.
    ui.go("/console/bills?period=2026-13").await;
    let msg = ui.text("#bill-error").await;
    assert!(msg.contains("2026-13") && msg.contains("YYYY-MM"), "{msg}");
    assert_eq!(
        ui.wait("#bill-form input[name=period]")
            .await
            .attr("value")
            .await
            .unwrap()
            .as_deref(),
        Some(this.as_str())
    );
    ui.wait("#logout").await;
    ui.shot("time-02-bad-period").await;

    // 中文: the same, translated.
    ui.click("button[name=lang][value=zh]").await;
    ui.wait("html[lang=zh]").await;
    ui.go("/console/bills?period=<b>x</b>").await;
    let msg = ui.text("#bill-error").await;
    assert!(
        msg.contains("<b>x</b>") && msg.contains("不是有效月份"),
        "{msg}"
    );
    let span = ui.text("#bill-span").await;
    assert!(
        span.contains("账期") && span.contains("Asia/Shanghai (UTC+08:00)"),
        "{span}"
    );
    assert!(ui.text("#bill-state").await.contains("本月尚未结束"));
    ui.shot("time-03-bills-zh").await;
    ui.click("button[name=lang][value=en]").await;
    ui.wait("html[lang=en]").await;
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenant_form_shows_all_its_errors_at_once() {
    let env = TestEnv::new().await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let (srv, _driver, ui) = walk(&env, "UTC").await;
    ui.login("admin@x.io", None).await;
    ui.go("/console/tenants/new").await;
    ui.fill("#tenant-form input[name=id]", "acme").await;
    ui.fill("#tenant-form input[name=name]", "Acme").await;
    ui.fill("#tenant-form input[name=monthly_tokens]", "lots")
        .await;
    ui.fill("#tenant-form input[name=rpm]", "99999999999999999999999")
        .await;
    ui.fill("#tenant-form input[name=monthly_cost_usd]", "ten dollars")
        .await;
    ui.click("#tenant-submit").await;
    ui.wait("#tenant-form .field-error").await;
    let mut fields = Vec::new();
    for e in
        ui.c.find_all(fantoccini::Locator::Css("#tenant-form .field-error"))
            .await
            .unwrap()
    {
        fields.push(e.attr("data-field").await.unwrap().unwrap_or_default());
    }
    fields.sort();
    assert_eq!(
        fields,
        ["monthly_cost_usd", "monthly_tokens", "rpm"],
        "every bad field at once"
    );
    ui.shot("time-04-all-errors").await;
    srv.shutdown().await;
}
