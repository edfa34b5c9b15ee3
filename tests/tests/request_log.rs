//! `GET /api/v1/requests`: the request log with its filters, keyset pages
//! and tenant scope, refusals included.

use domain::Limits;
use e2e::*;
use serde_json::Value;
use std::collections::HashSet;
use std::time::Duration;

struct Log {
    _env: TestEnv,
    srv: server::app::Running,
    base: String,
    admin: String,
    ta: String,
    other_key_id: String,
}

/// Tenant t: 4 admitted requests and 2 refused (unknown model); tenant
/// other: 2 admitted.
async fn log() -> Log {
    let env = TestEnv::new().await;
    env.simple_tenant(Limits::default()).await;
    let (_, key_t) = env.key("t", "a", Limits::default()).await;
    env.tenant("other", Limits::default(), None).await;
    env.app("other", "a", Limits::default()).await;
    let (other_key_id, key_o) = env.key("other", "a", Limits::default()).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let url = format!("{base}/v1/chat/completions");
    for _ in 0..4 {
        let r = post(&url, &key_t, &chat_body("hello", Some(8))).await;
        assert_eq!(r.status(), 200);
    }
    for _ in 0..2 {
        let mut body = chat_body("hello", Some(8));
        body["model"] = "no-such-model".into();
        assert_eq!(post(&url, &key_t, &body).await.status(), 404);
    }
    for _ in 0..2 {
        let r = post(&url, &key_o, &chat_body("hello", Some(8))).await;
        assert_eq!(r.status(), 200);
    }
    let admin = login(&base, "admin@x.io").await;
    let ta = login(&base, "ta@x.io").await;
    let l = Log {
        _env: env,
        srv,
        base,
        admin,
        ta,
        other_key_id,
    };
    // The ledger and the decision writer store in batches.
    let all = eventually(Duration::from_secs(10), || async {
        rows(&l.base, &l.admin, "limit=1000").await.len() == 8
    })
    .await;
    assert!(all, "the log never showed 8 requests");
    l
}

async fn page(base: &str, token: &str, query: &str) -> (u16, Value) {
    api(
        "GET",
        &format!("{base}/api/v1/requests?{query}"),
        Some(token),
        None,
    )
    .await
}

async fn rows(base: &str, token: &str, query: &str) -> Vec<Value> {
    let (status, body) = page(base, token, query).await;
    assert_eq!(status, 200, "{query}: {body}");
    body["data"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_walk_the_whole_log_newest_first_without_repeats() {
    let l = log().await;
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let q = match &cursor {
            Some(c) => format!("limit=3&cursor={c}"),
            None => "limit=3".into(),
        };
        let (status, body) = page(&l.base, &l.admin, &q).await;
        assert_eq!(status, 200, "{body}");
        let data = body["data"].as_array().unwrap();
        assert!(data.len() <= 3);
        seen.extend(data.iter().cloned());
        pages += 1;
        match body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 3, "8 rows in pages of 3");
    assert_eq!(seen.len(), 8);
    let ids: HashSet<&str> = seen
        .iter()
        .map(|r| r["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 8, "a row repeated across pages");
    let times: Vec<chrono::DateTime<chrono::Utc>> = seen
        .iter()
        .map(|r| r["at"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "not newest first: {times:?}"
    );
    let (status, _) = page(&l.base, &l.admin, "cursor=garbage").await;
    assert_eq!(status, 400);
    l.srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_select_refusals_models_keys_and_times() {
    let l = log().await;
    assert_eq!(rows(&l.base, &l.admin, "tenant=t").await.len(), 6);
    let refused = rows(&l.base, &l.admin, "tenant=t&status=refused").await;
    assert_eq!(refused.len(), 2);
    for r in &refused {
        assert_eq!(r["outcome"], "refused");
        assert_eq!(r["reason"], "model_not_found");
        assert_eq!(r["http_status"], 404);
        assert_eq!(r["model"], "no-such-model");
    }
    assert_eq!(
        rows(&l.base, &l.admin, "reason=model_not_found")
            .await
            .len(),
        2
    );
    assert_eq!(
        rows(&l.base, &l.admin, "model=no-such-model").await.len(),
        2
    );
    let ok = rows(&l.base, &l.admin, "status=ok").await;
    assert_eq!(ok.len(), 6);
    assert!(ok
        .iter()
        .all(|r| r["outcome"] == "admitted" && r["output_tokens"].as_i64() > Some(0)));
    let theirs = rows(&l.base, &l.admin, &format!("key={}", l.other_key_id)).await;
    assert_eq!(theirs.len(), 2);
    assert!(theirs.iter().all(|r| r["tenant_id"] == "other"));
    assert_eq!(rows(&l.base, &l.admin, "app=nope").await.len(), 0);
    // from is inclusive, to exclusive: the oldest row's time splits the log.
    let all = rows(&l.base, &l.admin, "").await;
    let oldest = all.last().unwrap()["at"].as_str().unwrap().to_string();
    let enc = oldest.replace('+', "%2B");
    assert_eq!(rows(&l.base, &l.admin, &format!("to={enc}")).await.len(), 0);
    assert_eq!(
        rows(&l.base, &l.admin, &format!("from={enc}")).await.len(),
        8
    );
    let (status, _) = page(&l.base, &l.admin, "from=yesterday").await;
    assert_eq!(status, 400);
    l.srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_admin_reads_only_their_tenant() {
    let l = log().await;
    let mine = rows(&l.base, &l.ta, "").await;
    assert_eq!(mine.len(), 6);
    assert!(mine.iter().all(|r| r["tenant_id"] == "t"));
    let (status, _) = page(&l.base, &l.ta, "tenant=other").await;
    assert_eq!(status, 404, "another tenant answers like an unknown one");
    // A filter naming another tenant's key finds nothing of it.
    assert_eq!(
        rows(&l.base, &l.ta, &format!("key={}", l.other_key_id))
            .await
            .len(),
        0
    );
    l.srv.shutdown().await;
}

/// A chat request whose body arrives in two halves `gap` apart; its answer's
/// status and request id.
async fn slow_post(url: &str, key: &str, body: &Value, gap: Duration) -> (u16, String) {
    let bytes = serde_json::to_vec(body).unwrap();
    let (a, b) = bytes.split_at(bytes.len() / 2);
    let (a, b) = (a.to_vec(), b.to_vec());
    let chunks = futures::stream::unfold(0, move |i| {
        let (a, b) = (a.clone(), b.clone());
        async move {
            match i {
                0 => Some((Ok::<_, std::io::Error>(a), 1)),
                1 => {
                    tokio::time::sleep(gap).await;
                    Some((Ok(b), 2))
                }
                _ => None,
            }
        }
    });
    let r = reqwest::Client::new()
        .post(url)
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    let id = r.headers()["x-request-id"].to_str().unwrap().to_string();
    (r.status().as_u16(), id)
}

/// The log is in request-id order; a request's time there is when it was
/// received (the time in its id), not when its body finished arriving or
/// when it was refused — admitted and refused alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_logged_at_the_time_it_was_received() {
    let env = TestEnv::new().await;
    env.simple_tenant(Limits::default()).await;
    let (_, key) = env.key("t", "a", Limits::default()).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let url = format!("{base}/v1/chat/completions");
    let gap = Duration::from_millis(400);
    let sent = chrono::Utc::now();
    let (status, admitted) = slow_post(&url, &key, &chat_body("hello", Some(8)), gap).await;
    assert_eq!(status, 200);
    let mut unknown = chat_body("hello", Some(8));
    unknown["model"] = "no-such-model".into();
    let (status, refused) = slow_post(&url, &key, &unknown, gap).await;
    assert_eq!(status, 404);
    let admin = login(&base, "admin@x.io").await;
    let both = eventually(Duration::from_secs(10), || async {
        rows(&base, &admin, "tenant=t").await.len() == 2
    })
    .await;
    assert!(both, "the log never showed both requests");
    let logged = rows(&base, &admin, "tenant=t").await;
    let ids: Vec<&str> = logged
        .iter()
        .map(|r| r["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [refused.as_str(), admitted.as_str()], "newest first");
    for r in &logged {
        let id = r["request_id"].as_str().unwrap();
        let at: chrono::DateTime<chrono::Utc> = r["at"].as_str().unwrap().parse().unwrap();
        let received = domain::request_id::time_of(id).expect("a gateway id carries its time");
        assert_eq!(at, received, "{r}");
    }
    // Received before the body's second half was sent: the first request's
    // time is within the gap after it was sent.
    let first = domain::request_id::time_of(&admitted).unwrap();
    assert!(first < sent + gap, "{first} vs sent at {sent}");
    srv.shutdown().await;
}
