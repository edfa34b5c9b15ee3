//! The end user, the hold's fourth scope, against the real Redis: its
//! budget, rpm and per-minute cap refuse all or nothing, settle / release /
//! extend move its counters, its month is rebuilt from the ledger.

use domain::attribution::{end_user_digest, EndUserLimits};
use domain::limits::{LimitKind, ScopeKind};
use domain::Limits;
use quota::{
    EndUserScope, ExtendOutcome, ExtendRequest, HoldOutcome, HoldRequest, LedgerSource,
    QuotaEngine, ScopeUsage, SettleOutcome, SettleRequest,
};
use std::collections::BTreeMap;
use std::time::Duration;

fn redis_url() -> String {
    std::env::var("TOLLGATE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn engine() -> QuotaEngine {
    let prefix = format!("tgtest{}", uuid::Uuid::new_v4().simple());
    QuotaEngine::new(&redis_url(), &prefix, Duration::from_millis(500), "test").unwrap()
}

/// A ledger where end user `spent` has used (tokens, cost) already.
struct Ledger {
    spent: (i64, i64),
}

impl LedgerSource for Ledger {
    async fn month_usage(&self, _t: &str, _m: &str) -> Result<Vec<ScopeUsage>, String> {
        Ok(vec![])
    }
    async fn end_user_month_usage(
        &self,
        _t: &str,
        _a: &str,
        end_user: &str,
        _m: &str,
    ) -> Result<(i64, i64), String> {
        Ok(if end_user == "spent" {
            self.spent
        } else {
            (0, 0)
        })
    }
}

const NONE: Limits = Limits::NONE;

fn hold(rid: &str, est: i64) -> HoldRequest<'_> {
    HoldRequest {
        budgets: &[],
        request_id: rid,
        tenant: "acme",
        app: "web",
        key: "k1",
        month: "2026-11",
        est_input: est / 2,
        est_output: est - est / 2,
        est_cost: est,
        model: "m",
        limits: [&NONE, &NONE, &NONE],
    }
}

fn settle<'a>(rid: &'a str, tokens: i64) -> SettleRequest<'a> {
    SettleRequest {
        request_id: rid,
        tenant: "acme",
        app: "web",
        key: "k1",
        month: "2026-11",
        input_tokens: tokens / 2,
        output_tokens: tokens - tokens / 2,
        cost: tokens,
        event_json: "{}",
        status: "ok",
        limits: [&NONE, &NONE, &NONE],
        bound: domain::usage::Bound::SAFE,
    }
}

/// Every key of the tenant and its content (hashes and sorted sets).
async fn snapshot(q: &QuotaEngine) -> BTreeMap<String, Vec<String>> {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let pattern = q.keys().month("acme", "x").replace(":m:x", ":*");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut c)
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for k in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&k)
            .query_async(&mut c)
            .await
            .unwrap();
        let mut v: Vec<String> = match kind.as_str() {
            "hash" => redis::cmd("HGETALL")
                .arg(&k)
                .query_async(&mut c)
                .await
                .unwrap(),
            "zset" => redis::cmd("ZRANGE")
                .arg(&k)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut c)
                .await
                .unwrap(),
            _ => vec![],
        };
        v.sort();
        out.insert(k, v);
    }
    out
}

async fn eu_month(q: &QuotaEngine, end_user: &str) -> BTreeMap<String, i64> {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let key = q
        .keys()
        .end_user_month("acme", "web", &end_user_digest(end_user), "2026-11");
    let raw: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap();
    raw.into_iter()
        .filter_map(|(k, v)| v.parse().ok().map(|v| (k, v)))
        .collect()
}

fn refused(out: &HoldOutcome) -> Option<(ScopeKind, LimitKind)> {
    match out {
        HoldOutcome::Refused(r) => Some((r.scope, r.limit)),
        _ => None,
    }
}

#[tokio::test]
async fn an_end_users_budget_refuses_all_or_nothing_and_settles_into_used() {
    let q = engine();
    let limits = EndUserLimits {
        monthly_tokens: Some(100),
        ..Default::default()
    };
    let ledger = Ledger { spent: (0, 0) };
    let alice = Some(EndUserScope {
        id: "alice",
        limits: &limits,
    });
    let out = q.hold_with(&hold("r1", 60), alice, &ledger).await.unwrap();
    assert!(matches!(out, HoldOutcome::Admitted { .. }), "{out:?}");
    let m = eu_month(&q, "alice").await;
    assert_eq!((m["ut"], m["ht"], m["_rb"]), (0, 60, 1), "{m:?}");
    // 60 held + 50 more would pass 100: refused by the end user, nothing changes.
    let before = snapshot(&q).await;
    let out = q.hold_with(&hold("r2", 50), alice, &ledger).await.unwrap();
    assert_eq!(
        refused(&out),
        Some((ScopeKind::EndUser, LimitKind::MonthlyTokens))
    );
    assert_eq!(snapshot(&q).await, before, "a refusal changed a counter");
    // Another end user is not affected.
    let bob = Some(EndUserScope {
        id: "bob",
        limits: &limits,
    });
    let out = q.hold_with(&hold("r3", 50), bob, &ledger).await.unwrap();
    assert!(matches!(out, HoldOutcome::Admitted { .. }), "{out:?}");
    // Settle below the hold: used is the actual, held is given back.
    let s = q
        .settle_with(&settle("r1", 30), Some("alice"))
        .await
        .unwrap();
    assert!(matches!(s, SettleOutcome::Settled { .. }), "{s:?}");
    let m = eu_month(&q, "alice").await;
    assert_eq!((m["ut"], m["ht"]), (30, 0), "{m:?}");
    // A release gives the hold back.
    assert!(q
        .release_with(
            "acme",
            "web",
            "k1",
            "2026-11",
            "r3",
            [&NONE; 3],
            Some("bob")
        )
        .await
        .unwrap());
    let m = eu_month(&q, "bob").await;
    assert_eq!(
        (m.get("ut").copied().unwrap_or(0), m["ht"]),
        (0, 0),
        "{m:?}"
    );
}

#[tokio::test]
async fn an_end_users_month_is_rebuilt_from_the_ledger() {
    let q = engine();
    let limits = EndUserLimits {
        monthly_tokens: Some(100),
        ..Default::default()
    };
    let ledger = Ledger { spent: (90, 7) };
    let spent = Some(EndUserScope {
        id: "spent",
        limits: &limits,
    });
    let out = q.hold_with(&hold("r1", 20), spent, &ledger).await.unwrap();
    assert_eq!(
        refused(&out),
        Some((ScopeKind::EndUser, LimitKind::MonthlyTokens)),
        "90 used in the ledger + 20 > 100"
    );
    let m = eu_month(&q, "spent").await;
    assert_eq!((m["ut"], m["uc"], m["_rb"]), (90, 7, 1), "{m:?}");
    let out = q.hold_with(&hold("r2", 10), spent, &ledger).await.unwrap();
    assert!(matches!(out, HoldOutcome::Admitted { .. }), "{out:?}");
}

#[tokio::test]
async fn an_end_users_rpm_and_the_apps_cap_on_end_users() {
    let q = engine();
    let ledger = Ledger { spent: (0, 0) };
    let limits = EndUserLimits {
        rpm: Some(2),
        end_users_per_minute: Some(2),
        ..Default::default()
    };
    let eu = |id| {
        Some(EndUserScope {
            id,
            limits: &limits,
        })
    };
    for rid in ["r1", "r2"] {
        let out = q.hold_with(&hold(rid, 1), eu("a"), &ledger).await.unwrap();
        assert!(matches!(out, HoldOutcome::Admitted { .. }), "{out:?}");
    }
    let before = snapshot(&q).await;
    let out = q.hold_with(&hold("r3", 1), eu("a"), &ledger).await.unwrap();
    assert_eq!(refused(&out), Some((ScopeKind::EndUser, LimitKind::Rpm)));
    match &out {
        HoldOutcome::Refused(r) => assert!(r.retry_after_ms.unwrap() > 0),
        _ => unreachable!(),
    }
    assert_eq!(
        snapshot(&q).await,
        before,
        "an rpm refusal changed a counter"
    );
    let out = q.hold_with(&hold("r4", 1), eu("b"), &ledger).await.unwrap();
    assert!(matches!(out, HoldOutcome::Admitted { .. }), "{out:?}");
    // A third end user within the minute: the app's cap.
    let before = snapshot(&q).await;
    let out = q.hold_with(&hold("r5", 1), eu("c"), &ledger).await.unwrap();
    assert_eq!(
        refused(&out),
        Some((ScopeKind::EndUser, LimitKind::EndUsersPerMinute))
    );
    assert_eq!(
        snapshot(&q).await,
        before,
        "a cap refusal changed a counter"
    );
}

#[tokio::test]
async fn an_extension_checks_the_end_users_budget() {
    let q = engine();
    let ledger = Ledger { spent: (0, 0) };
    let limits = EndUserLimits {
        monthly_tokens: Some(100),
        ..Default::default()
    };
    let alice = Some(EndUserScope {
        id: "alice",
        limits: &limits,
    });
    let out = q.hold_with(&hold("r1", 60), alice, &ledger).await.unwrap();
    assert!(matches!(out, HoldOutcome::Admitted { .. }), "{out:?}");
    let ext = |add| ExtendRequest {
        budgets: &[],
        request_id: "r1",
        tenant: "acme",
        app: "web",
        key: "k1",
        month: "2026-11",
        add_output: add,
        add_cost: 0,
        limits: [&NONE, &NONE, &NONE],
    };
    let out = q.extend_with(&ext(30), alice).await.unwrap();
    assert!(matches!(out, ExtendOutcome::Extended { .. }), "{out:?}");
    let out = q.extend_with(&ext(30), alice).await.unwrap();
    match out {
        ExtendOutcome::Refused(r) => {
            assert_eq!(
                (r.scope, r.limit),
                (ScopeKind::EndUser, LimitKind::MonthlyTokens)
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(eu_month(&q, "alice").await["ht"], 90);
}
