//! A key's life in the console, in headless Chromium against the real
//! server (docs/console.md, "Rotating a key", "Editing a key", "Finding a
//! key"): a tenant admin rotates a key — the new secret shown once, the row
//! saying until when the previous one works, both working meanwhile —
//! edits its name (a stale tab is refused, naming the change), and finds
//! keys by name with revoked ones hidden unless asked for.

mod browser_common;

use browser_common::browse;
use domain::Limits;
use e2e::*;
use serde_json::json;
use std::time::Duration;

async fn works(base: &str, key: &str) -> bool {
    let url = format!("{base}/v1/chat/completions");
    eventually(Duration::from_secs(2), || async {
        post(&url, key, &chat_body("hello", Some(8))).await.status() == 200
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_admin_rotates_edits_and_finds_keys_in_the_browser() {
    let env = TestEnv::new().await;
    // Tenant t, app a, model gpt-4o-mini and a key named "k".
    env.simple_tenant(Limits::default()).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let base = ui.base.clone();
    ui.login("ta@x.io", None).await;
    ui.go("/console/tenants/t/apps").await;

    // Issue a key, then rotate it with a one-hour grace.
    ui.fill("#key-box-a input[name=name]", "payments").await;
    ui.click("#key-box-a button.issue-key").await;
    let old = ui.text("#new-key").await;
    assert!(works(&base, &old).await);
    let keys = env
        .store
        .keys_of(&TenantScope::system(), "t")
        .await
        .unwrap();
    let id = keys.iter().find(|k| k.name == "payments").unwrap().id;
    ui.go("/console/tenants/t/apps").await;
    let row = format!("#key-{id}");
    ui.c.execute("window.confirm = () => true", vec![])
        .await
        .unwrap();
    ui.c.execute(
        "document.querySelector(arguments[0] + ' select[name=grace_secs]').value = '3600'",
        vec![row.clone().into()],
    )
    .await
    .unwrap();
    ui.click(&format!("{row} button.rotate")).await;
    ui.wait("#key-box-a.rotated").await;
    let new = ui.text("#new-key").await;
    assert!(new.starts_with("tg-") && new != old, "{new}");
    let note = ui.text("#key-box-a .key-grace-note").await;
    assert!(note.contains(&old[..12]), "{note}");
    assert!(ui.text("#grace-ends").await.ends_with("UTC"));
    // The table (swapped in out of band) says the key is rotating.
    ui.wait(&format!("{row}[data-rotation=grace]")).await;
    let cell = ui.text(&format!("{row} td.key-prefix")).await;
    assert!(
        cell.contains(&new[..12]) && cell.contains(&old[..12]) && cell.contains("works until"),
        "{cell}"
    );
    ui.shot("keys-01-rotated").await;
    // Both secrets work during the grace.
    assert!(works(&base, &new).await, "new secret");
    assert!(works(&base, &old).await, "old secret during the grace");
    // Reloading shows neither secret again.
    ui.go("/console/tenants/t/apps").await;
    let page = ui.c.source().await.unwrap();
    assert!(!page.contains(&new) && !page.contains(&old));
    assert!(ui
        .text(&format!("{row} td.key-state"))
        .await
        .contains("rotating"));

    // Edit the name; a second tab's stale save is refused, naming it.
    let token = login(&base, "ta@x.io").await;
    ui.click(&format!("{row} details.key-edit summary")).await;
    ui.fill(
        &format!("{row} form.key-edit-form input[name=name]"),
        "payments-v2",
    )
    .await;
    ui.click(&format!("{row} form.key-edit-form button[type=submit]"))
        .await;
    ui.wait(&row).await;
    let t0 = std::time::Instant::now();
    while !ui
        .text(&format!("{row} td.key-name"))
        .await
        .contains("payments-v2")
    {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the new name never showed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ui.click(&format!("{row} details.key-edit summary")).await;
    let (st, e) = api(
        "PATCH",
        &format!("{base}/api/v1/keys/{id}"),
        Some(&token),
        Some(json!({"name": "payments-api"})),
    )
    .await;
    assert_eq!(st, 200, "{e}");
    ui.fill(
        &format!("{row} form.key-edit-form input[name=name]"),
        "payments-tab",
    )
    .await;
    ui.click(&format!("{row} form.key-edit-form button[type=submit]"))
        .await;
    ui.wait("#stale").await;
    let stale = ui.text("#stale").await;
    assert!(stale.contains("payments-api"), "{stale}");
    ui.shot("keys-02-stale-edit").await;
    let k = env
        .store
        .key_detail(&TenantScope::system(), id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(k.name, "payments-api", "the stale save changed nothing");

    // Revoked keys are hidden unless asked for; search by name.
    let k0 = keys.iter().find(|k| k.name == "k").unwrap().id;
    let (st, _) = api(
        "DELETE",
        &format!("{base}/api/v1/keys/{k0}"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(st, 204);
    ui.go("/console/tenants/t/apps").await;
    assert_eq!(
        ui.count(&format!("#key-{k0}")).await,
        0,
        "revoked key shown"
    );
    assert!(ui.text("#hidden-revoked").await.ends_with('1'));
    ui.click("#key-filter input[name=revoked]").await;
    ui.click("#key-filter button[type=submit]").await;
    ui.wait(&format!("#key-{k0}[data-state=revoked]")).await;
    ui.fill("#key-filter input[name=q]", "PAYMENTS").await;
    ui.click("#key-filter button[type=submit]").await;
    ui.wait(&row).await;
    let t0 = std::time::Instant::now();
    while ui.count(&format!("#key-{k0}")).await != 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the search kept key k"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let url = ui.c.current_url().await.unwrap();
    assert!(
        url.query().unwrap_or_default().contains("q=PAYMENTS"),
        "{url}"
    );
    ui.shot("keys-03-search").await;

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}
