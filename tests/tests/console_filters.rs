//! Issue #52, defect 18: contradictory or unknown filters answer, not
//! silently. In headless Chromium against the real server: the audit log
//! and the request log refuse a From after the To, and a date that cannot
//! be read, with 422, a message beside the field naming it, and no rows
//! (not every row, as if unfiltered); the bills page (and the request log)
//! asked for a tenant that does not exist says so (404), not "Nothing here
//! yet"; a tenant admin asking for another tenant's bills gets exactly the
//! answer a nonexistent tenant gets.

mod browser_common;

use browser_common::{browse, Ui};
use domain::Limits;
use e2e::console_web::Web;
use e2e::*;
use std::time::Duration;

/// The rows of a table body that are data rows (not its "nothing" line).
async fn data_rows(ui: &Ui, css: &str) -> usize {
    ui.count(css).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contradictory_or_unknown_filters_are_refused_in_words() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.tenant("acme", Limits::default(), None).await;
    env.app("acme", "a", Limits::default()).await;
    env.tenant("globex", Limits::default(), None).await;
    env.app("globex", "g", Limits::default()).await;
    let (_, key) = env.named_key("acme", "a", "k", Limits::default()).await;
    user(&env, "pa@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("acme")).await;
    for i in 0..3 {
        env.store
            .audit(store::NewAudit::new(
                "test",
                "filters.row",
                format!("row:{i}"),
            ))
            .await
            .unwrap();
    }
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let r = post(
        &format!("http://{}/v1/chat/completions", srv.addr),
        &key,
        &chat_body("hello", Some(8)),
    )
    .await;
    assert_eq!(r.status(), 200);
    let logged = eventually(Duration::from_secs(10), || async {
        !env.store
            .request_log(
                &store::TenantScope::system(),
                &store::RequestLogFilter {
                    limit: 10,
                    ..Default::default()
                },
            )
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    assert!(logged, "the request never reached the log");

    let pa = Web::login(&ui.base, "pa@x.io").await;
    ui.login("pa@x.io", None).await;

    // Unfiltered, both logs have rows (so "no rows" below is the refusal).
    ui.go("/console/audit?action=filters.row").await;
    assert_eq!(
        data_rows(&ui, "#audit-table > tbody > tr[id^='audit-']").await,
        3
    );
    ui.go("/console/requests").await;
    assert_eq!(data_rows(&ui, "#log-table tbody tr[data-request]").await, 1);

    // The audit log: a From after the To, then an unreadable From.
    let after = "/console/audit?action=filters.row&from=2026-12-02T00:00&to=2026-12-01T00:00";
    let p = pa.get(after).await;
    assert_eq!(p.status, 422, "{}", p.body);
    ui.go(after).await;
    let msg = ui.text("#audit-from-error").await;
    assert!(
        msg.contains("From (UTC)") && msg.contains("From is after To"),
        "{msg}"
    );
    assert_eq!(ui.count("#audit-bad-filter").await, 1);
    assert_eq!(
        data_rows(&ui, "#audit-table > tbody > tr[id^='audit-']").await,
        0
    );
    ui.shot("filters-01-audit-from-after-to").await;

    let unreadable = "/console/audit?action=filters.row&from=notadate";
    assert_eq!(pa.get(unreadable).await.status, 422);
    ui.go(unreadable).await;
    let msg = ui.text("#audit-from-error").await;
    assert!(
        msg.contains("From (UTC)") && msg.contains("must be a date and time"),
        "{msg}"
    );
    assert_eq!(
        ui.count("#audit-to-error").await,
        0,
        "only the From is named"
    );
    assert_eq!(
        data_rows(&ui, "#audit-table > tbody > tr[id^='audit-']").await,
        0
    );
    let unreadable_to = "/console/audit?to=31%2F12%2F2026";
    assert_eq!(pa.get(unreadable_to).await.status, 422);
    ui.go(unreadable_to).await;
    assert!(ui.text("#audit-to-error").await.contains("To (UTC)"));
    assert_eq!(ui.count("#audit-from-error").await, 0);

    // The request log, likewise.
    let after = "/console/requests?from=2026-12-02T00:00:00&to=2026-12-01T00:00:00";
    assert_eq!(pa.get(after).await.status, 422);
    ui.go(after).await;
    let msg = ui.text("#log-from-error").await;
    assert!(
        msg.contains("From (UTC)") && msg.contains("From is after To"),
        "{msg}"
    );
    assert_eq!(data_rows(&ui, "#log-table tbody tr[data-request]").await, 0);
    ui.shot("filters-02-requests-from-after-to").await;
    let unreadable = "/console/requests?from=notadate";
    assert_eq!(pa.get(unreadable).await.status, 422);
    ui.go(unreadable).await;
    let msg = ui.text("#log-from-error").await;
    assert!(
        msg.contains("From (UTC)") && msg.contains("must be a date and time"),
        "{msg}"
    );
    assert_eq!(data_rows(&ui, "#log-table tbody tr[data-request]").await, 0);

    // In Chinese too.
    ui.click("button[name=lang][value=zh]").await;
    ui.wait("html[lang=zh]").await;
    ui.go("/console/audit?from=2026-12-02T00:00&to=2026-12-01T00:00")
        .await;
    let msg = ui.text("#audit-from-error").await;
    assert!(
        msg.contains("起（UTC）") && msg.contains("起始时间晚于结束时间"),
        "{msg}"
    );
    ui.go("/console/bills?tenant=nosuch").await;
    assert!(ui.text("#error-message").await.contains("没有此租户"));
    ui.click("button[name=lang][value=en]").await;
    ui.wait("html[lang=en]").await;

    // A tenant that does not exist: said so, not an empty bill.
    let p = pa.get("/console/bills?tenant=nosuch").await;
    assert_eq!(p.status, 404, "{}", p.body);
    assert!(!p.body.contains("Nothing here yet"));
    ui.go("/console/bills?tenant=nosuch").await;
    let msg = ui.text("#error-message").await;
    assert!(msg.contains("No such tenant"), "{msg}");
    ui.shot("filters-03-bills-no-such-tenant").await;
    assert_eq!(pa.get("/console/bills?tenant=acme").await.status, 200);
    assert_eq!(pa.get("/console/requests?tenant=nosuch").await.status, 404);
    assert_eq!(pa.get("/console/requests?tenant=globex").await.status, 200);

    // A tenant admin: another tenant's bills read exactly as a nonexistent
    // tenant's (the same status and page, but for the id echoed).
    let ta = Web::login(&ui.base, "ta@x.io").await;
    assert_eq!(ta.get("/console/bills?tenant=acme").await.status, 200);
    for page in ["bills", "requests"] {
        let theirs = ta.get(&format!("/console/{page}?tenant=globex")).await;
        let none = ta.get(&format!("/console/{page}?tenant=nosuch")).await;
        assert_eq!(theirs.status, 404, "{page}: {}", theirs.body);
        assert_eq!(theirs.status, none.status, "{page}");
        assert_eq!(
            theirs.body.replace("globex", "X"),
            none.body.replace("nosuch", "X"),
            "{page}: another tenant's reads as none"
        );
    }
    ui.logout().await;
    ui.login("ta@x.io", None).await;
    ui.go("/console/bills?tenant=globex").await;
    let theirs = ui.text("#error-message").await;
    ui.go("/console/bills?tenant=nosuch").await;
    assert_eq!(ui.text("#error-message").await, theirs);
    assert!(theirs.contains("No such tenant"), "{theirs}");
    drop(srv);
}
