//! The hold engine runs unchanged on a 3-master Redis Cluster: the budget
//! race of the foundation passes on it.

use domain::Limits;
use e2e::*;
use futures::future::join_all;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_budget_race_holds_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let env = TestEnv::with_redis(cluster.nodes[0].clone(), Default::default()).await;
    let budget = 100 * (11 + 16);
    // Tenants hash to different nodes; each one's keys share a slot.
    for t in ["t", "u"] {
        if t == "t" {
            env.simple_tenant(Limits {
                monthly_tokens: Some(budget),
                ..Default::default()
            })
            .await;
        } else {
            env.tenant(
                t,
                Limits {
                    monthly_tokens: Some(budget),
                    ..Default::default()
                },
                None,
            )
            .await;
            env.app(t, "a", Limits::default()).await;
        }
    }
    let (_, key_t) = env.key("t", "a", Limits::default()).await;
    let (_, key_u) = env.key("u", "a", Limits::default()).await;
    let mut cfg = env.config();
    cfg.redis.cluster_nodes = Some(cluster.nodes.join(","));
    // Correctness on a cluster, not latency: six servers share two cores here.
    cfg.redis.timeout_ms = 1000;
    let replicas = [
        env.server_with(cfg.clone()).await,
        env.server_with(cfg.clone()).await,
        env.server_with(cfg).await,
    ];
    let client = reqwest::Client::new();
    let body = chat_body("hello", Some(16));
    let calls = (0..400).map(|i| {
        let url = format!("http://{}/v1/chat/completions", replicas[i % 3].addr);
        let key = if i % 2 == 0 {
            key_t.clone()
        } else {
            key_u.clone()
        };
        let (client, body) = (client.clone(), body.clone());
        async move {
            let r = client
                .post(url)
                .bearer_auth(key)
                .json(&body)
                .send()
                .await
                .unwrap();
            (
                i % 2,
                r.status().as_u16(),
                r.headers()
                    .get("x-tollgate-reason")
                    .map(|v| v.to_str().unwrap().to_string()),
            )
        }
    });
    let results = join_all(calls).await;
    let q = quota::QuotaEngine::new_cluster(
        &cluster.nodes,
        &env.prefix,
        quota::Timeouts::both(Duration::from_secs(2)),
        "check",
    )
    .unwrap();
    let month = this_month();
    for (tenant, side) in [("t", 0), ("u", 1)] {
        let ok = results.iter().filter(|r| r.0 == side && r.1 == 200).count();
        for r in results.iter().filter(|r| r.0 == side && r.1 != 200) {
            assert_eq!(
                (r.1, r.2.as_deref()),
                (402, Some("tenant_monthly_budget_exhausted"))
            );
        }
        assert!(
            ok >= 90 && ok as i64 <= budget / 24,
            "{tenant}: {ok} succeeded"
        );
        let settled = eventually(Duration::from_secs(10), || async {
            let c = q.month_counters(tenant, &month).await.unwrap();
            c.held_tokens("t") == 0
                && c.used_tokens("t") == env.ledger_tokens(tenant, &month).await.0
        })
        .await;
        let c = q.month_counters(tenant, &month).await.unwrap();
        assert!(settled, "{tenant}: {c:?}");
        assert!(c.used_tokens("t") <= budget);
        assert_eq!(c.used_tokens("t"), ok as i64 * 24);
    }
    for r in replicas {
        r.shutdown().await;
    }
}
