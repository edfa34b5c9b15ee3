//! Issue #52, defect 20 (cosmetic), against the real server over plain
//! HTTP: the request log's `?per=` out of range is refused beside its field
//! (422), not silently 50; the login back-off names the real wait; a key
//! never used reads "never", not "not in two months"; a rejected quota
//! request shows no time left; a revoked key's limits page offers no
//! change form; creating an app lands on a page that says so; a bill
//! downloaded for one tenant is named for it.

use domain::Limits;
use e2e::console_web::{Web, PASSWORD};
use e2e::*;
use serde_json::json;

/// The `<td>` cells of the table row `<tr id="{id}" …>` on a page.
fn cells(page: &str, id: &str) -> Vec<String> {
    let at = page
        .find(&format!("<tr id=\"{id}\""))
        .unwrap_or_else(|| panic!("row {id} on the page"));
    let row = &page[at..];
    let row = &row[..row.find("</tr>").unwrap()];
    row.split("<td")
        .skip(1)
        .map(|c| {
            let c = &c[c.find('>').unwrap() + 1..];
            c[..c.find("</td>").unwrap_or(c.len())].to_string()
        })
        .collect()
}

#[tokio::test]
async fn rows_per_page_out_of_range_is_refused_beside_the_field() {
    let env = TestEnv::new().await;
    user(&env, "pa@x.io", "platform_admin", None).await;
    let srv = env.server().await;
    let w = Web::login(&format!("http://{}", srv.addr), "pa@x.io").await;

    // In range (and absent): the log, with the field offered.
    for q in ["", "?per=1", "?per=500"] {
        let p = w.get(&format!("/console/requests{q}")).await;
        assert_eq!(p.status, 200, "{q}: {}", p.body);
        assert!(p.body.contains("name=\"per\""), "{q}: the field is offered");
        assert!(!p.body.contains("log-per-error"), "{q}");
    }
    // Out of range, or not a number: 422, a message beside the field.
    for (q, says) in [
        ("501", "must be from 1 to 500"),
        ("0", "must be from 1 to 500"),
        ("-3", "must be from 1 to 500"),
        ("99999999999999999999", "must be from 1 to 500"),
        ("fifty", "must be a whole number"),
    ] {
        let p = w.get(&format!("/console/requests?per={q}")).await;
        assert_eq!(p.status, 422, "per={q}: {}", p.body);
        let at = p
            .body
            .find("id=\"log-per-error\"")
            .unwrap_or_else(|| panic!("per={q}: no message beside the field"));
        let msg = &p.body[at..at + p.body[at..].find("</span>").unwrap()];
        assert!(
            msg.contains("Rows per page") && msg.contains(says),
            "per={q}: {msg}"
        );
        // The value asked for is kept in the field, to correct.
        assert!(p.body.contains(&format!("value=\"{q}\"")), "per={q}");
    }
    srv.shutdown().await;
}

#[tokio::test]
async fn the_login_back_off_names_the_real_wait() {
    let env = TestEnv::new().await;
    user(&env, "ta@x.io", "auditor", None).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let w = Web::at_login_form(&base).await;
    let mut refused = None;
    for _ in 0..10 {
        let p = w
            .post_raw(
                "/console/login",
                &[
                    ("email", "ta@x.io"),
                    ("password", "wrong password 123"),
                    ("_csrf", &w.csrf),
                ],
            )
            .await;
        if p.status == 429 {
            refused = Some(p);
            break;
        }
        assert_eq!(p.status, 401, "{}", p.body);
    }
    let p = refused.expect("the back-off refused an attempt");
    let at = p.body.find("id=\"login-error\"").expect("the error shown");
    let msg = &p.body[at..at + p.body[at..].find("</p>").unwrap()];
    assert!(!msg.contains("a minute"), "{msg}");
    // "wait N s", N the same whole seconds as the API's Retry-After.
    let n: u64 = msg
        .split("wait ")
        .nth(1)
        .and_then(|r| r.split(" s").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no seconds in {msg}"));
    assert!((1..=300).contains(&n), "{msg}");
    // The right password still waits, and says so.
    let p = w
        .post_raw(
            "/console/login",
            &[
                ("email", "ta@x.io"),
                ("password", PASSWORD),
                ("_csrf", &w.csrf),
            ],
        )
        .await;
    assert_eq!(p.status, 429);
    assert!(p.body.contains(" s and try again."), "{}", p.body);
    srv.shutdown().await;
}

#[tokio::test]
async fn key_rows_quota_rows_and_revoked_key_limits_read_right() {
    let env = TestEnv::new().await;
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    user(&env, "pa@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    let (fresh, _) = env.named_key("t", "a", "fresh", Limits::default()).await;
    let (gone, _) = env.named_key("t", "a", "gone", Limits::default()).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let pa = Web::login(&base, "pa@x.io").await;

    // A key made today and never used: "never", not "not in two months".
    let apps = pa.get("/console/tenants/t/apps").await;
    assert_eq!(apps.status, 200, "{}", apps.body);
    let last_used = &cells(&apps.body, &format!("key-{fresh}"))[5];
    assert!(last_used.contains("never"), "{last_used}");
    assert!(!last_used.contains("two months"), "{last_used}");

    // A rejected quota request: no time left (its expiry is moot); a
    // pending one still counts down.
    let token = login(&base, "ta@x.io").await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (status, q) = api(
            "POST",
            &format!("{base}/api/v1/quota-requests"),
            Some(&token),
            Some(
                json!({"tenant_id": "t", "tokens": 5, "expires_at": days_ahead(30), "reason": "x"}),
            ),
        )
        .await;
        assert_eq!(status, 201, "{q}");
        ids.push(q["id"].as_str().unwrap().to_string());
    }
    let r = pa
        .post(
            &format!("/console/quota-requests/{}/reject", ids[0]),
            &[("note", "no")],
        )
        .await;
    assert!(r.status < 400, "{} {}", r.status, r.body);
    let page = pa.get("/console/quota-requests").await;
    assert_eq!(page.status, 200);
    let rejected = cells(&page.body, &format!("q-{}", ids[0]));
    assert!(rejected[5].contains("rejected"), "{rejected:?}");
    assert_eq!(rejected[7].trim(), "", "time left of a rejected request");
    let pending = cells(&page.body, &format!("q-{}", ids[1]));
    assert!(pending[5].contains("pending"), "{pending:?}");
    assert!(
        pending[7].contains('d'),
        "a pending request counts down: {pending:?}"
    );

    // A revoked key's limits page: history, no form to change them.
    let live = pa.get(&format!("/console/keys/{gone}/limits")).await;
    assert_eq!(live.status, 200);
    assert!(
        live.body.contains("id=\"limits-form\""),
        "a live key's form"
    );
    let r = pa.post(&format!("/console/keys/{gone}/revoke"), &[]).await;
    assert!(r.status < 400, "{} {}", r.status, r.body);
    let revoked = pa.get(&format!("/console/keys/{gone}/limits")).await;
    assert_eq!(revoked.status, 200);
    assert!(
        !revoked.body.contains("id=\"limits-form\""),
        "{}",
        revoked.body
    );
    assert!(!revoked.body.contains("Change the limits"));
    assert!(revoked.body.contains("id=\"limits-revoked\""));
    // A change posted anyway (a form left open) is refused, not saved.
    let before = sqlx::query_scalar::<_, i64>("SELECT version FROM virtual_keys WHERE id = $1")
        .bind(uuid::Uuid::parse_str(&gone).unwrap())
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    let v = before.to_string();
    let r = pa
        .post(
            &format!("/console/keys/{gone}/limits"),
            &[("rpm", "7"), ("version", v.as_str())],
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("revoked"), "{}", r.body);
    let after = sqlx::query_scalar::<_, i64>("SELECT version FROM virtual_keys WHERE id = $1")
        .bind(uuid::Uuid::parse_str(&gone).unwrap())
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    assert_eq!(after, before, "the revoked key's limits were not changed");
    srv.shutdown().await;
}

#[tokio::test]
async fn creating_an_app_is_confirmed() {
    let env = TestEnv::new().await;
    env.tenant("t", Limits::default(), None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    let srv = env.server().await;
    let w = Web::login(&format!("http://{}", srv.addr), "ta@x.io").await;
    let r = w
        .post(
            "/console/tenants/t/apps",
            &[("id", "chat"), ("name", "Chat")],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let to = r.location.expect("a redirect");
    assert_eq!(to, "/console/tenants/t/apps?created=chat#app-chat");
    let page = w.get(to.split('#').next().unwrap()).await;
    assert_eq!(page.status, 200);
    let at = page
        .body
        .find("id=\"app-created\"")
        .expect("a confirmation");
    let msg = &page.body[at..at + page.body[at..].find("</p>").unwrap()];
    assert!(
        msg.contains("App created") && msg.contains("<code>chat</code>"),
        "{msg}"
    );
    // Only an app of the page is confirmed: not one the address makes up,
    // nor on the plain list.
    for q in ["?created=nope", ""] {
        let p = w.get(&format!("/console/tenants/t/apps{q}")).await;
        assert_eq!(p.status, 200);
        assert!(!p.body.contains("app-created"), "{q}");
    }
    srv.shutdown().await;
}

#[tokio::test]
async fn a_tenants_bill_download_is_named_for_the_tenant() {
    let env = TestEnv::new().await;
    env.tenant("acme", Limits::default(), None).await;
    user(&env, "pa@x.io", "platform_admin", None).await;
    let srv = env.server().await;
    let w = Web::login(&format!("http://{}", srv.addr), "pa@x.io").await;
    let month = this_month();
    for (path, tenant, name) in [
        (
            "bills.csv",
            "acme",
            format!("tollgate-bill-acme-{month}.csv"),
        ),
        ("bills.csv", "", format!("tollgate-bill-{month}.csv")),
        (
            "bills.focus.csv",
            "acme",
            format!("tollgate-focus-acme-{month}.csv"),
        ),
    ] {
        let r = reqwest::Client::new()
            .get(format!(
                "{}/console/{path}?period={month}&tenant={tenant}",
                w.base
            ))
            .header("cookie", &w.cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path} {tenant}");
        let cd = r.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(
            cd,
            format!("attachment; filename=\"{name}\""),
            "{path} {tenant}"
        );
        // A UTF-8 byte-order mark first: Excel reads 中文 right.
        let body = r.bytes().await.unwrap();
        assert!(
            body.starts_with(b"\xEF\xBB\xBF"),
            "{path}: {:?}",
            &body[..body.len().min(40)]
        );
    }
    // The audit export too; the API's CSV (read by programs) has none.
    let token = login(&w.base, "pa@x.io").await;
    for (url, bom) in [
        (format!("{}/console/audit.csv", w.base), true),
        (format!("{}/api/v1/bills.csv?period={month}", w.base), false),
    ] {
        let r = reqwest::Client::new()
            .get(&url)
            .header("cookie", &w.cookie)
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{url}");
        let body = r.bytes().await.unwrap();
        assert_eq!(body.starts_with(b"\xEF\xBB\xBF"), bom, "{url}");
        assert!(body.len() > 10, "{url}: a header line at least");
    }
    srv.shutdown().await;
}

/// The jobs page (#52 defect "jobs' Counts shown as raw JSON and
/// unpaged"): a run's counts are labelled numbers, and its runs come 50 a
/// page, older and newest linked.
#[tokio::test]
async fn the_jobs_page_labels_counts_and_pages_its_runs() {
    let env = TestEnv::new().await;
    user(&env, "pa@x.io", "platform_admin", None).await;
    let now = chrono::Utc::now();
    for _ in 0..60 {
        let id = env
            .store
            .claim_job_run("rollover", None, now, "replica-1")
            .await
            .unwrap()
            .unwrap();
        env.store
            .finish_job_run(
                id,
                "ok",
                &json!({"closed": 1, "deferred": 0, "purged": 1200}),
                &serde_json::Value::Null,
                None,
            )
            .await
            .unwrap();
    }
    let srv = env.server().await;
    let w = Web::login(&format!("http://{}", srv.addr), "pa@x.io").await;
    let first = w.get("/console/jobs").await;
    assert_eq!(first.status, 200);
    let rows = |body: &str| body.matches("<ul class=\"counts\">").count();
    assert_eq!(rows(&first.body), 50, "a page of 50 runs");
    assert!(first
        .body
        .contains("months closed: <span class=\"num\">1</span>"));
    assert!(first
        .body
        .contains("months purged: <span class=\"num\">1,200</span>"));
    assert!(!first.body.contains("{&#34;") && !first.body.contains("&#34;closed&#34;"));
    assert!(!first.body.contains("id=\"runs-newest\""));
    let older = regex::Regex::new(r#"href="(/console/jobs\?before=\d+)" id="runs-older""#)
        .unwrap()
        .captures(&first.body)
        .map(|c| c[1].to_string())
        .expect("a link to the older runs");
    let second = w.get(&older).await;
    assert_eq!(second.status, 200);
    // The rest of the 60, and whatever the server's own jobs ran meanwhile.
    assert!(rows(&second.body) >= 10, "the older runs");
    assert!(second.body.contains("id=\"runs-newest\""));
    srv.shutdown().await;
}
