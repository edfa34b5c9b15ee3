//! Issue #52, defects 17 and 19, against the real server.
//!
//! 17 (plain HTTP): the new-tenant, new-model, issue-key and new-user forms
//! check every field at once: one 422 names every field in error beside
//! it, keeps what was typed (escaped), and never sends a secret back.
//!
//! 19 (headless Chromium): a model's own upstream (deployment `default`)
//! shows where it goes; a disabled model's deployments say "disabled";
//! the deployment form picks its model, and the quota request form its
//! tenant and app, from what the reader may see; the request log's tag
//! filter reads `key=value`, the request header's syntax (and the older
//! `key:value`).

mod browser_common;

use browser_common::{browse, Ui};
use domain::Limits;
use e2e::console_web::{Page, Web};
use e2e::*;
use std::time::Duration;

/// The `data-field`s of the field errors on a page, sorted.
fn error_fields(p: &Page) -> Vec<String> {
    let re = regex::Regex::new(r#"class="field-error" data-field="([^"]+)""#).unwrap();
    let mut out: Vec<String> = re
        .captures_iter(&p.body)
        .map(|c| c[1].to_string())
        .collect();
    out.sort();
    out.dedup();
    out
}

fn sorted(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[tokio::test]
async fn every_form_refuses_every_field_at_once() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.tenant("acme", Limits::default(), None).await;
    env.app("acme", "a", Limits::default()).await;
    user(&env, "pa@x.io", "platform_admin", None).await;
    let srv = env.server().await;
    let w = Web::login(&format!("http://{}", srv.addr), "pa@x.io").await;

    // A new tenant: eight fields wrong, each for its own reason.
    let long_cc = "c".repeat(101);
    let typed = [
        ("id", "Bad Id"),
        ("name", ""),
        ("cost_center", long_cc.as_str()),
        ("priority", "standard"),
        ("monthly_tokens", "-5"),
        ("rpm", "ten"),
        ("borrow_cap_tokens", "-1"),
        ("max_queued_requests", "0"),
        ("allowed_models", "gpt-4o-mini no-such-model"),
    ];
    let p = w.post("/console/tenants", &typed).await;
    assert_eq!(p.status, 422, "{}", p.body);
    assert_eq!(
        error_fields(&p),
        sorted(&[
            "allowed_models",
            "borrow_cap_tokens",
            "cost_center",
            "id",
            "max_queued_requests",
            "monthly_tokens",
            "name",
            "rpm",
        ]),
    );
    // What was typed is kept.
    for (field, v) in typed {
        if field == "priority" {
            continue;
        }
        assert!(
            p.body.contains(&format!("name=\"{field}\" value=\"{v}\"")),
            "{field} kept as typed"
        );
    }
    assert!(env
        .store
        .tenants(&store::TenantScope::system())
        .await
        .unwrap()
        .iter()
        .all(|t| t.id == "acme"));
    // A taken id is said beside the id at once with the rest; what was
    // typed comes back escaped.
    let p = w
        .post(
            "/console/tenants",
            &[("id", "acme"), ("name", "<b>x</b>"), ("rpm", "-1")],
        )
        .await;
    assert_eq!(p.status, 422, "{}", p.body);
    assert_eq!(error_fields(&p), sorted(&["id", "rpm"]));
    assert!(p.body.contains("already exists"));
    let escaped = e2e::hostile::esc("<b>x</b>");
    assert!(p
        .body
        .contains(&format!("name=\"name\" value=\"{escaped}\"")));
    assert!(!p.body.contains("<b>x</b>"), "typed markup escaped");
    // The API keeps its one-refusal answer, the first of the same rules.
    let token = login(&w.base, "pa@x.io").await;
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/tenants", w.base))
        .bearer_auth(&token)
        .json(&serde_json::json!({"id": "Bad Id", "name": ""}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "id", "{v}");

    // A new model: six fields wrong; the provider key typed is not sent
    // back (the field asks for it again).
    let typed = [
        ("id", "-bad"),
        ("kind", "chat"),
        ("upstream_base_url", "ftp://x"),
        ("upstream_model", ""),
        ("upstream_api_key", "sk-typed-secret-1234"),
        ("input_price_per_mtok_usd", "abc"),
        ("output_price_per_mtok_usd", "-1"),
        ("default_max_output_tokens", "0"),
    ];
    let p = w.post("/console/models", &typed).await;
    assert_eq!(p.status, 422, "{}", p.body);
    assert_eq!(
        error_fields(&p),
        sorted(&[
            "default_max_output_tokens",
            "id",
            "input_price_per_mtok_usd",
            "output_price_per_mtok_usd",
            "upstream_api_key",
            "upstream_base_url",
            "upstream_model",
        ]),
    );
    assert!(p.body.contains("type the key again"));
    assert!(!p.body.contains("sk-typed-secret-1234"), "no secret echoed");
    for (field, v) in typed {
        if matches!(field, "kind" | "upstream_api_key" | "upstream_model") {
            continue;
        }
        assert!(
            p.body.contains(&format!("name=\"{field}\" value=\"{v}\"")),
            "{field} kept as typed"
        );
    }
    // A taken model id, with another fault.
    let p = w
        .post(
            "/console/models",
            &[
                ("id", "gpt-4o-mini"),
                ("upstream_base_url", "https://api.example.com/v1"),
                ("upstream_model", "m"),
                ("input_price_per_mtok_usd", "1"),
                ("output_price_per_mtok_usd", "x"),
            ],
        )
        .await;
    assert_eq!(p.status, 422, "{}", p.body);
    assert_eq!(
        error_fields(&p),
        sorted(&["id", "output_price_per_mtok_usd"])
    );

    // Issuing a key: five fields wrong.
    let typed = [
        ("name", ""),
        ("expires_at", "2001-01-01T00:00"),
        ("allowed_models", "no-such-model"),
        ("monthly_tokens", "lots"),
        ("rpm", "-3"),
    ];
    let p = w.post("/console/tenants/acme/apps/a/keys", &typed).await;
    assert_eq!(p.status, 422, "{}", p.body);
    assert_eq!(
        error_fields(&p),
        sorted(&[
            "allowed_models",
            "expires_at",
            "monthly_tokens",
            "name",
            "rpm"
        ]),
    );
    for (field, v) in typed {
        assert!(
            p.body.contains(&format!("name=\"{field}\" value=\"{v}\"")),
            "{field} kept as typed"
        );
    }
    assert!(env
        .store
        .keys_of(&store::TenantScope::system(), "acme")
        .await
        .unwrap()
        .is_empty());

    // A new user: three fields wrong; the password is not sent back.
    let p = w
        .post(
            "/console/users",
            &[
                ("email", "not-an-email"),
                ("password", "short-pw"),
                ("role", "tenant_admin"),
                ("tenant_id", ""),
            ],
        )
        .await;
    assert_eq!(p.status, 422, "{}", p.body);
    assert_eq!(
        error_fields(&p),
        sorted(&["email", "password", "tenant_id"])
    );
    assert!(p.body.contains("name=\"email\" value=\"not-an-email\""));
    assert!(!p.body.contains("short-pw"), "no password echoed");
    // A taken email and a tenant that does not exist, at once.
    let p = w
        .post(
            "/console/users",
            &[
                ("email", "PA@x.io"),
                ("password", "long enough password"),
                ("role", "tenant_admin"),
                ("tenant_id", "nowhere"),
            ],
        )
        .await;
    assert_eq!(p.status, 422, "{}", p.body);
    assert_eq!(error_fields(&p), sorted(&["email", "tenant_id"]));
    assert!(p.body.contains("already exists") && p.body.contains("no such tenant"));
}

/// The cells' texts of the deployments table row of `model/name`.
async fn deployment_row(ui: &Ui, id: &str) -> Vec<String> {
    let v =
        ui.c.execute(
            "return Array.from(document.querySelectorAll(
                 '#deployments-table tr[data-deployment=\"' + arguments[0] + '\"] td'))
               .map(td => td.textContent.trim())",
            vec![serde_json::json!(id)],
        )
        .await
        .unwrap();
    serde_json::from_value(v).unwrap()
}

/// The values of the options of the `<select>` `css` (its first, empty
/// "choose" line left out), and of those not hidden.
async fn options(ui: &Ui, css: &str) -> (Vec<String>, Vec<String>) {
    let v =
        ui.c.execute(
            "const os = Array.from(document.querySelectorAll(arguments[0] + ' option'))
                 .filter(o => o.value !== '');
             const shown = o => !(o.parentElement.tagName === 'OPTGROUP' && o.parentElement.hidden);
             return [os.map(o => o.value), os.filter(shown).map(o => o.value)]",
            vec![serde_json::json!(css)],
        )
        .await
        .unwrap();
    serde_json::from_value(v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_pickers_and_tags_read_as_they_are() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.model("old-model", "chat", 150_000, 600_000).await;
    env.store
        .set_model_enabled("test", "old-model", false)
        .await
        .unwrap();
    env.tenant("acme", Limits::default(), None).await;
    env.app("acme", "a", Limits::default()).await;
    env.app("acme", "b", Limits::default()).await;
    env.tenant("globex", Limits::default(), None).await;
    env.app("globex", "g", Limits::default()).await;
    let (_, key) = env.named_key("acme", "a", "k", Limits::default()).await;
    user(&env, "pa@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("acme")).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;

    // A tagged request, in the header's syntax.
    let r = reqwest::Client::new()
        .post(format!("http://{}/v1/chat/completions", srv.addr))
        .bearer_auth(&key)
        .header("x-tollgate-tags", "project=apollo")
        .json(&chat_body("hello", Some(8)))
        .send()
        .await
        .unwrap();
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

    ui.login("pa@x.io", None).await;
    ui.go("/console/models").await;
    ui.wait("#deployments-table").await;
    ui.shot("forms-19-deployments").await;
    // The model's own upstream: where it goes, not an empty cell.
    let row = deployment_row(&ui, "gpt-4o-mini/default").await;
    assert_eq!(row[2], env.mock_url, "{row:?}");
    assert_eq!(row[3], "gpt-4o-mini", "{row:?}");
    // A disabled model's deployment says so, not "healthy".
    let row = deployment_row(&ui, "old-model/default").await;
    assert_eq!(row[7], "disabled", "{row:?}");
    assert_eq!(
        ui.count(
            "#deployments-table tr[data-deployment='old-model/default'] [data-health=disabled]"
        )
        .await,
        1
    );
    // The deployment form picks its model from the models there are.
    let (models, _) = options(&ui, "#deployment-form select[name=model]").await;
    assert_eq!(models, ["gpt-4o-mini", "old-model"]);

    // The quota request form: tenant and app picked, not typed. Choosing
    // a tenant leaves its own apps to choose from.
    ui.go("/console/quota-requests").await;
    let (tenants, _) = options(&ui, "#request-form select[name=tenant_id]").await;
    assert_eq!(tenants, ["acme", "globex"]);
    let (apps, _) = options(&ui, "#request-form select[name=app_id]").await;
    assert_eq!(apps, ["a", "b", "g"]);
    ui.select("#request-form select[name=tenant_id]", "globex")
        .await;
    let (_, shown) = options(&ui, "#request-form select[name=app_id]").await;
    assert_eq!(shown, ["g"]);
    ui.select("#request-form select[name=tenant_id]", "acme")
        .await;
    let (_, shown) = options(&ui, "#request-form select[name=app_id]").await;
    assert_eq!(shown, ["a", "b"]);
    ui.select("#request-form select[name=app_id]", "b").await;
    ui.fill("#request-form input[name=tokens]", "5000").await;
    ui.c.execute(
        "document.querySelector('#request-form input[name=expires_at]').value = arguments[0]",
        vec![serde_json::json!((chrono::Utc::now()
            + chrono::Duration::days(3))
        .format("%Y-%m-%dT%H:%M")
        .to_string())],
    )
    .await
    .unwrap();
    ui.fill("#request-form textarea[name=reason]", "launch")
        .await;
    ui.shot("forms-19-quota-pickers").await;
    ui.click("#request-submit").await;
    ui.wait("#request-created").await;
    let made = env
        .store
        .quota_requests(&store::TenantScope::system())
        .await
        .unwrap();
    assert_eq!(made.len(), 1);
    assert_eq!(
        (made[0].tenant_id.as_str(), made[0].app_id.as_deref()),
        ("acme", Some("b"))
    );

    // The request log's tag filter: the header's syntax, said so.
    ui.go("/console/requests").await;
    let ph = ui
        .wait("input[name=tag]")
        .await
        .attr("placeholder")
        .await
        .unwrap();
    assert_eq!(ph.as_deref(), Some("project=apollo"));
    assert!(ui
        .text("label:has(input[name=tag])")
        .await
        .contains("key=value"));
    for q in ["project%3Dapollo", "project%3Aapollo"] {
        ui.go(&format!("/console/requests?tag={q}")).await;
        ui.wait("#log-table").await;
        assert_eq!(ui.count("#log-bad").await, 0, "{q}: read");
        assert_eq!(
            ui.count("#log-table tbody tr[data-request]").await,
            1,
            "{q}: the tagged request"
        );
    }
    ui.go("/console/requests?tag=project%3Dother").await;
    ui.wait("#log-table").await;
    assert_eq!(ui.count("#log-table tbody tr[data-request]").await, 0);

    // A tenant admin picks among their own tenant's apps only.
    ui.logout().await;
    ui.login("ta@x.io", None).await;
    ui.go("/console/quota-requests").await;
    ui.wait("#request-form").await;
    assert_eq!(ui.count("#request-form select[name=tenant_id]").await, 0);
    let (apps, _) = options(&ui, "#request-form select[name=app_id]").await;
    assert_eq!(apps, ["a", "b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_time_zone_shown_picked_and_read() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.tenant("acme", Limits::default(), None).await;
    env.app("acme", "a", Limits::default()).await;
    let (_, key) = env.named_key("acme", "a", "k", Limits::default()).await;
    user(&env, "pa@x.io", "platform_admin", None).await;
    // A platform that is not in UTC: its bills are in its zone, and so
    // must be every other time the console shows or reads.
    let (srv, _driver, ui) = browse(&env, |c| c.platform.timezone = "Asia/Shanghai".into()).await;
    let r = post(
        &format!("http://{}/v1/chat/completions", srv.addr),
        &key,
        &chat_body("hello", Some(8)),
    )
    .await;
    assert_eq!(r.status(), 200);
    let at = eventually(Duration::from_secs(10), || async {
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
    assert!(at, "the request never reached the log");
    let logged = env
        .store
        .request_log(
            &store::TenantScope::system(),
            &store::RequestLogFilter {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap()[0]
        .at;
    ui.login("pa@x.io", None).await;

    // A key issued with an expiry picked: the label names the zone the
    // picker is read in, and the instant stored is that wall clock there.
    ui.go("/console/tenants/acme/apps").await;
    let label = ui
        .text("#key-box-a label:has(input[name=expires_at])")
        .await;
    assert!(label.contains("Asia/Shanghai"), "{label}");
    assert!(!label.contains("UTC"), "{label}");
    ui.fill("#key-box-a input[name=name]", "zoned").await;
    ui.c.execute(
        "document.querySelector('#key-box-a input[name=expires_at]').value = '2030-01-01T08:00'",
        vec![],
    )
    .await
    .unwrap();
    ui.click("#key-box-a button.issue-key").await;
    ui.wait("#new-key").await;
    let keys = env
        .store
        .keys_of(&store::TenantScope::system(), "acme")
        .await
        .unwrap();
    let zoned = keys.iter().find(|k| k.name == "zoned").expect("issued");
    assert_eq!(
        zoned.expires_at.unwrap().to_rfc3339(),
        "2030-01-01T00:00:00+00:00",
        "08:00 in Shanghai is 00:00 UTC"
    );
    // Shown back as picked, the zone named.
    ui.go("/console/tenants/acme/apps").await;
    let shown = ui.text(&format!("#key-{} td:nth-child(4)", zoned.id)).await;
    assert_eq!(shown, "2030-01-01 08:00 Asia/Shanghai");

    // The request log: its times and its From–To in the same zone.
    ui.go("/console/requests").await;
    let from = ui.text("label:has(input[name=from])").await;
    assert!(from.contains("Asia/Shanghai"), "{from}");
    let wall = logged + chrono::Duration::hours(8);
    let cell = ui.text("#log-table tbody tr[data-request] td").await;
    assert!(
        cell.contains(&wall.format("%Y-%m-%d %H:%M").to_string()) && cell.contains("Asia/Shanghai"),
        "{cell} (logged at {logged} UTC)"
    );
    // A From just after the request (in Shanghai time) leaves it out; just
    // before keeps it.
    for (delta, rows) in [(-60, 1), (60, 0)] {
        let from = (wall + chrono::Duration::seconds(delta))
            .format("%Y-%m-%dT%H:%M:%S")
            .to_string();
        ui.go(&format!("/console/requests?from={from}")).await;
        ui.wait("#log-table").await;
        assert_eq!(
            ui.count("#log-table tbody tr[data-request]").await,
            rows,
            "from {from}"
        );
    }
    ui.shot("forms-19-zone").await;
}
