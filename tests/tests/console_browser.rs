//! The console in a real browser: headless Chromium driven through
//! chromedriver (Debian's `chromium` and `chromium-driver`, installed by
//! scripts/test.sh). A tenant admin signs in, issues a key (seen once) and
//! requests temporary quota; a platform admin approves it; the tenant admin
//! sees it active. Screenshots of the main pages land in the artifacts
//! directory (see `artifacts_dir`).

mod browser_common;

use browser_common::{artifacts_dir, Driver, Ui};
use domain::Limits;
use e2e::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_admin_requests_quota_and_a_platform_admin_approves_it_in_the_browser() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let budget = Limits {
        monthly_tokens: Some(200),
        ..Default::default()
    };
    env.tenant("t", budget, None).await;
    env.app("t", "a", Limits::default()).await;
    env.tenant("other", Limits::default(), None).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    user(&env, "finance@x.io", "finance", None).await;
    user(&env, "auditor@x.io", "auditor", None).await;
    // Plain HTTP on 127.0.0.1: the development setting.
    let mut cfg = env.config();
    cfg.auth.cookie_secure = false;
    let srv = env.server_with(cfg).await;
    let base = format!("http://{}", srv.addr);
    let driver = Driver::start();
    let ui = Ui {
        c: driver.browser().await,
        base: base.clone(),
        shots: artifacts_dir(),
    };

    // The tenant admin signs in and issues a key: shown once.
    ui.login("ta@x.io", Some("01-login")).await;
    ui.shot("02-dashboard-tenant-admin").await;
    ui.go("/console/apps").await;
    ui.fill("#key-box-a input[name=name]", "browser key").await;
    ui.click("#key-box-a button.issue-key").await;
    let key = ui.text("#new-key").await;
    assert!(key.starts_with("tg-"), "{key}");
    ui.shot("03-key-issued-once").await;
    ui.go("/console/tenants/t/apps").await;
    ui.wait("#app-a").await;
    let page = ui.c.source().await.unwrap();
    assert!(!page.contains(&key), "the key is shown only once");
    assert!(page.contains("browser key"));
    ui.shot("04-apps-and-keys").await;

    // The key works, and the small budget refuses a large request.
    let url = format!("{base}/v1/chat/completions");
    let refused = eventually(Duration::from_secs(3), || async {
        post(&url, &key, &chat_body("hello", Some(4000)))
            .await
            .status()
            == 402
    })
    .await;
    assert!(refused, "the budget did not refuse");
    let r = post(&url, &key, &chat_body("hello", Some(4000))).await;
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();

    // …and asks for temporary quota.
    ui.go("/console/quota-requests").await;
    ui.fill("#request-form input[name=tokens]", "100000").await;
    ui.c.execute(
        "document.querySelector('#request-form input[name=expires_at]').value = arguments[0]",
        vec![days_ahead_local(30).into()],
    )
    .await
    .unwrap();
    ui.fill("#request-form textarea[name=reason]", "launch week")
        .await;
    ui.click("#request-submit").await;
    ui.wait("#request-created").await;
    ui.wait_attr("#quota-rows .pill", "data-state", "pending")
        .await;
    ui.shot("05-quota-requested").await;

    // The request lookup explains the refusal.
    let found = eventually(Duration::from_secs(5), || async {
        env.store
            .request_decision(&TenantScope::system(), &rid)
            .await
            .unwrap()
            .is_some()
    })
    .await;
    assert!(found);
    ui.go(&format!("/console/requests?id={rid}")).await;
    assert_eq!(
        ui.wait("#request-found .pill")
            .await
            .attr("data-outcome")
            .await
            .unwrap()
            .as_deref(),
        Some("refused")
    );
    assert!(ui
        .c
        .source()
        .await
        .unwrap()
        .contains("tenant_monthly_budget_exhausted"));
    ui.shot("06-request-lookup").await;
    ui.logout().await;

    // A platform admin approves it with a note.
    ui.login("admin@x.io", None).await;
    ui.shot("07-dashboard-platform-admin").await;
    ui.go("/console/quota-requests").await;
    ui.fill("#quota-rows input[name=note]", "ok for the launch")
        .await;
    ui.click("#quota-rows button.approve").await;
    ui.wait_attr("#quota-rows .pill", "data-state", "active")
        .await;
    ui.shot("08-quota-approved").await;
    ui.go("/console/tenants").await;
    ui.wait("#tenants-table").await;
    ui.shot("09-tenants").await;
    ui.go("/console/tenants/t").await;
    ui.wait("#tenant-form").await;
    ui.shot("10-tenant-edit").await;
    ui.go("/console/audit").await;
    ui.click("#verify").await;
    ui.wait("#chain-intact").await;
    ui.shot("11-audit-verified").await;
    ui.go("/console/models").await;
    ui.shot("12-models").await;
    ui.go("/console/users").await;
    ui.shot("13-users").await;
    ui.logout().await;

    // The tenant admin sees it active, and the grant lets requests through.
    ui.login("ta@x.io", None).await;
    ui.go("/console/quota-requests").await;
    ui.wait_attr("#quota-rows .pill", "data-state", "active")
        .await;
    assert!(ui.c.source().await.unwrap().contains("ok for the launch"));
    ui.shot("14-quota-active-tenant-admin").await;
    let passes = eventually(Duration::from_secs(3), || async {
        post(&url, &key, &chat_body("hello", Some(16)))
            .await
            .status()
            == 200
    })
    .await;
    assert!(passes, "the approved grant did not reach the gateway");

    // 中文: the language switch changes every label.
    ui.click("button[name=lang][value=zh]").await;
    ui.wait("html[lang=zh]").await;
    let h1 = ui.text("h1").await;
    assert_eq!(h1, "临时额度申请");
    let nav = ui.text("nav.main-nav").await;
    assert!(
        nav.contains("应用与密钥") && nav.contains("请求日志"),
        "{nav}"
    );
    assert_eq!(ui.text("#quota-rows .pill").await, "生效中");
    ui.shot("15-quota-zh").await;
    ui.go("/console").await;
    ui.shot("16-dashboard-zh").await;
    ui.click("button[name=lang][value=en]").await;
    ui.wait("html[lang=en]").await;
    ui.logout().await;

    // The other roles' start pages.
    ui.login("finance@x.io", None).await;
    ui.shot("17-dashboard-finance").await;
    ui.logout().await;
    ui.login("auditor@x.io", None).await;
    ui.click("#verify").await;
    ui.wait("#chain-intact").await;
    ui.shot("18-dashboard-auditor").await;
    ui.logout().await;

    ui.c.close().await.unwrap();
    srv.shutdown().await;
    eprintln!("screenshots in {}", ui.shots.display());
}
