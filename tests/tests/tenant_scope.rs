//! The tenant scope at the store: a tenant admin's scope (obtained the only
//! way it can be, by signing in) reads nothing of another tenant through any
//! store function that takes a scope, while the system scope reads both
//! tenants (so every "nothing" below is about the scope, not missing data).
//! The list of scoped functions is read from the store's source: a new
//! scoped read without a case here fails the test.

use chrono::{Duration, Utc};
use domain::usage::UsageEvent;
use domain::Limits;
use e2e::*;
use serde_json::json;
use store::{AuditFilter, NewAlert, NewQuotaRequest, RequestDecisionRow, Sessions};

const MINE: &str = "mine";
const THEIRS: &str = "theirs";

fn event(tenant: &str, request_id: &str, period: &str, day: &str) -> UsageEvent {
    let now = Utc::now().timestamp_millis();
    UsageEvent {
        request_id: request_id.into(),
        tenant_id: tenant.into(),
        app_id: "a".into(),
        key_id: "k".into(),
        model: "gpt-4o-mini".into(),
        period: period.into(),
        day: day.into(),
        input_tokens: 10,
        output_tokens: 20,
        cost_micro: 30,
        cost_pico: 0,
        est_tokens: 30,
        est_cost_micro: 30,
        overrun_tokens: 0,
        overrun_cost_micro: 0,
        status: "ok".into(),
        stream: false,
        usage_source: "provider".into(),
        replica: "r1".into(),
        started_at_ms: now,
        settled_at_ms: now,
        deployment: None,
        breakdown: None,
        charges: None,
        raw_usage: None,
        // A tag key and an end user named after the tenant.
        attribution: domain::attribution::Attribution {
            tags: [(tenant.to_string(), "x".to_string())].into(),
            end_user: Some(tenant.to_string()),
            ..Default::default()
        },
        anomaly: None,
    }
}

fn decision(tenant: &str, request_id: &str, period: &str) -> RequestDecisionRow {
    RequestDecisionRow {
        request_id: request_id.into(),
        at: Utc::now(),
        period: period.into(),
        day: Utc::now().date_naive(),
        tenant_id: tenant.into(),
        app_id: "a".into(),
        key_id: "k".into(),
        model: "gpt-4o-mini".into(),
        decision: "refused".into(),
        reason: "tenant_monthly_budget_exhausted".into(),
        status: 402,
        scope: Some(format!("tenant:{tenant}")),
        detail: json!({}),
        attribution: Default::default(),
    }
}

/// Both tenants get one of everything a scoped read can return.
struct Seeded {
    key: String,
    request: uuid::Uuid,
}

async fn seed(env: &TestEnv, tenant: &str, period: &str, day: &str) -> Seeded {
    let s = &env.store;
    env.tenant(tenant, Limits::default(), None).await;
    env.app(tenant, "a", Limits::default()).await;
    let (key, _) = env.key(tenant, "a", Limits::default()).await;
    let rid = format!("req_{tenant}");
    s.insert_usage_events(&[event(tenant, &rid, period, day)])
        .await
        .unwrap();
    s.insert_request_decisions(&[decision(tenant, &format!("req_{tenant}_refused"), period)])
        .await
        .unwrap();
    let requester = user(
        env,
        &format!("ta-{tenant}-req@x.io"),
        "tenant_admin",
        Some(tenant),
    )
    .await;
    let approver = user(env, &format!("admin-{tenant}@x.io"), "platform_admin", None).await;
    let q = s
        .create_quota_request(
            "test",
            &NewQuotaRequest {
                tenant_id: tenant.into(),
                app_id: None,
                tokens: 100,
                cost_micro: 0,
                expires_at: Utc::now() + Duration::days(1),
                reason: "test".into(),
                requested_by: requester.parse().unwrap(),
            },
        )
        .await
        .unwrap();
    s.decide_quota_request("test", q.id, approver.parse().unwrap(), true, "ok")
        .await
        .unwrap();
    let borrow = uuid::Uuid::now_v7();
    s.begin_borrow(borrow, tenant, period, 100, "test", "r1")
        .await
        .unwrap();
    s.finish_borrow(borrow, 100, 0).await.unwrap();
    s.reclaim("test", borrow, 10, 0, "test").await.unwrap();
    // A borrow left pending (its replica "died" mid-borrow).
    s.begin_borrow(uuid::Uuid::now_v7(), tenant, period, 50, "test", "r1")
        .await
        .unwrap();
    s.record_alert(&NewAlert {
        tenant_id: tenant.into(),
        scope: format!("tenant:{tenant}"),
        period: period.into(),
        measure: "tokens".into(),
        threshold: "70".into(),
        payload: json!({}),
        notice: "70 % used".into(),
        webhook: true,
        at: Utc::now() - Duration::minutes(1),
    })
    .await
    .unwrap();
    Seeded { key, request: q.id }
}

#[tokio::test]
async fn a_tenant_admins_scope_reads_nothing_of_another_tenant() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let period = this_month();
    let day = Utc::now().format("%Y-%m-%d").to_string();
    seed(&env, MINE, &period, &day).await;
    let theirs = seed(&env, THEIRS, &period, &day).await;
    let s = &env.store;
    s.set_model_fairness("test", "gpt-4o-mini", None, Some(10), &[(THEIRS.into(), 2)])
        .await
        .unwrap();
    s.claim_job_run("reconcile", None, Utc::now(), "r1")
        .await
        .unwrap();

    // The only way to a one-tenant scope: sign in as that tenant's admin
    // (or present a session token signed for them).
    user(&env, "ta@x.io", "tenant_admin", Some(MINE)).await;
    assert!(s
        .sign_in("ta@x.io", "wrong password".into())
        .await
        .unwrap()
        .is_none());
    let me = s
        .sign_in("ta@x.io", PASSWORD.into())
        .await
        .unwrap()
        .unwrap();
    let sessions = Sessions::new(b"0123456789abcdef0123456789abcdef", 60);
    let token = s
        .open_session(&sessions, &me, store::SignedInVia::Password)
        .await
        .unwrap()
        .unwrap()
        .token;
    let again = s
        .authenticate(&sessions.verify(&token).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.scope(), me.scope());
    let mine = me.scope();
    assert_eq!(mine.tenant(), Some(MINE));
    let all = &TenantScope::system();
    let (start, end) = (
        Utc::now() - Duration::days(1),
        Utc::now() + Duration::days(1),
    );
    let later = Utc::now() + Duration::days(1);
    let kid: uuid::Uuid = theirs.key.parse().unwrap();
    let rid = format!("req_{THEIRS}");
    let refused = format!("req_{THEIRS}_refused");

    // Catalog.
    let c = s.load_catalog(mine).await.unwrap();
    assert!(c.tenants.iter().all(|t| t.id == MINE) && !c.tenants.is_empty());
    assert!(c.apps.iter().all(|a| a.tenant_id == MINE));
    assert!(c.keys.iter().all(|k| k.tenant_id == MINE));
    assert!(c.grants.iter().all(|g| g.tenant_id == MINE));
    assert!(c.borrowed.iter().all(|b| b.tenant_id == MINE));
    assert!(c.guarantees.is_empty());
    let c = s.load_catalog(all).await.unwrap();
    assert_eq!(c.tenants.len(), 2);
    assert_eq!(c.guarantees.len(), 1);
    assert!(!s.tenant_exists(mine, THEIRS).await.unwrap());
    assert!(s.tenant_exists(all, THEIRS).await.unwrap());
    assert!(s.tenant(mine, THEIRS).await.unwrap().is_none());
    assert!(s.tenant(all, THEIRS).await.unwrap().is_some());
    assert!(!s.app_exists(mine, THEIRS, "a").await.unwrap());
    assert!(s.app_exists(all, THEIRS, "a").await.unwrap());
    assert_eq!(s.key_tenant(mine, kid).await.unwrap(), None);
    assert_eq!(
        s.key_tenant(all, kid).await.unwrap().as_deref(),
        Some(THEIRS)
    );

    // Console lists.
    let ids = |v: Vec<store::TenantRow>| v.into_iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(ids(s.tenants(mine).await.unwrap()), [MINE]);
    assert_eq!(ids(s.tenants(all).await.unwrap()), [MINE, THEIRS]);
    assert!(s.apps_of(mine, THEIRS).await.unwrap().is_empty());
    assert_eq!(s.apps_of(all, THEIRS).await.unwrap().len(), 1);
    assert!(s.key_detail(mine, kid).await.unwrap().is_none());
    assert_eq!(
        s.key_detail(all, kid).await.unwrap().map(|k| k.tenant_id),
        Some(THEIRS.to_string())
    );
    assert!(s.keys_of(mine, THEIRS).await.unwrap().is_empty());
    assert_eq!(s.keys_of(all, THEIRS).await.unwrap().len(), 1);
    assert!(s
        .key_spend(mine, THEIRS, &period, &period)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        s.key_spend(all, THEIRS, &period, &period)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(s.key_names(mine, &[kid]).await.unwrap().is_empty());
    assert_eq!(s.key_names(all, &[kid]).await.unwrap().len(), 1);
    let f = AuditFilter {
        limit: 100,
        ..Default::default()
    };
    assert!(s.audit_search(mine, &f).await.unwrap().is_empty());
    assert!(!s.audit_search(all, &f).await.unwrap().is_empty());
    assert!(s.audit_chain(mine).await.unwrap().is_empty());
    assert!(!s.audit_chain(all).await.unwrap().is_empty());
    // Limits history: their tenant's, app's and key's creations are not
    // read in my scope; mine are.
    let owners = [
        store::LimitsOwner::Tenant {
            tenant: THEIRS.into(),
        },
        store::LimitsOwner::App {
            tenant: THEIRS.into(),
            app: "a".into(),
        },
        store::LimitsOwner::Key {
            tenant: THEIRS.into(),
            id: kid,
        },
    ];
    for o in &owners {
        assert!(s.limit_history(mine, o).await.unwrap().is_empty(), "{o:?}");
        assert_eq!(s.limit_history(all, o).await.unwrap().len(), 1, "{o:?}");
    }
    let my_tenant = store::LimitsOwner::Tenant {
        tenant: MINE.into(),
    };
    assert_eq!(s.limit_history(mine, &my_tenant).await.unwrap().len(), 1);
    // Row versions (the stale-save check): theirs unread in my scope.
    for o in &owners {
        assert_eq!(
            s.limits_owner_version(mine, o).await.unwrap(),
            None,
            "{o:?}"
        );
        assert_eq!(
            s.limits_owner_version(all, o).await.unwrap(),
            Some(1),
            "{o:?}"
        );
    }
    assert_eq!(s.tenant_version(mine, THEIRS).await.unwrap(), None);
    assert_eq!(s.tenant_version(all, THEIRS).await.unwrap(), Some(1));
    assert_eq!(s.tenant_version(mine, MINE).await.unwrap(), Some(1));

    // Quota requests and grants.
    assert!(s
        .quota_request(mine, theirs.request)
        .await
        .unwrap()
        .is_none());
    assert!(s
        .quota_request(all, theirs.request)
        .await
        .unwrap()
        .is_some());
    let tenants_of =
        |v: &[store::QuotaRequestRow]| v.iter().map(|q| q.tenant_id.clone()).collect::<Vec<_>>();
    assert_eq!(tenants_of(&s.quota_requests(mine).await.unwrap()), [MINE]);
    assert_eq!(s.quota_requests(all).await.unwrap().len(), 2);
    assert!(s
        .active_grants(mine)
        .await
        .unwrap()
        .iter()
        .all(|g| g.tenant_id == MINE));
    assert_eq!(s.active_grants(all).await.unwrap().len(), 2);

    // Requests, the ledger.
    assert!(s.request_decision(mine, &refused).await.unwrap().is_none());
    assert!(s.request_decision(all, &refused).await.unwrap().is_some());
    let mine_spent = s.budget_refusals(mine, &period).await.unwrap();
    assert!(mine_spent.iter().all(|r| r.tenant_id == MINE));
    let all_spent = s.budget_refusals(all, &period).await.unwrap();
    assert!(all_spent.iter().any(|r| r.tenant_id == THEIRS) || all_spent.len() >= mine_spent.len());
    assert!(s.usage_event(mine, &rid).await.unwrap().is_none());
    assert!(s.usage_event(all, &rid).await.unwrap().is_some());
    assert!(!s.usage_event_exists(mine, THEIRS, &rid).await.unwrap());
    assert!(s.usage_event_exists(all, THEIRS, &rid).await.unwrap());
    assert!(s
        .month_usage(mine, THEIRS, &period)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(s.month_usage(all, THEIRS, &period).await.unwrap().len(), 1);
    assert_eq!(s.tenant_ids(mine).await.unwrap(), [MINE]);
    assert_eq!(s.tenant_ids(all).await.unwrap(), [MINE, THEIRS]);

    // Bills.
    let keys = |m: std::collections::BTreeMap<String, domain::bill::Totals>| {
        m.into_keys().collect::<Vec<_>>()
    };
    assert_eq!(keys(s.period_totals(mine, &period).await.unwrap()), [MINE]);
    assert_eq!(
        keys(s.period_totals(all, &period).await.unwrap()),
        [MINE, THEIRS]
    );
    // Day totals: a scope's days sum to its tenants' month, no more.
    let cost = |m: std::collections::BTreeMap<String, domain::bill::Totals>| {
        m.values().map(|t| t.cost_micro).sum::<i64>()
    };
    let mine_month = cost(s.period_totals(mine, &period).await.unwrap());
    let all_month = cost(s.period_totals(all, &period).await.unwrap());
    assert!(mine_month > 0 && all_month > mine_month);
    let days = |m: std::collections::BTreeMap<String, i64>| m.values().sum::<i64>();
    assert_eq!(days(s.day_costs(mine, &period).await.unwrap()), mine_month);
    assert_eq!(days(s.day_costs(all, &period).await.unwrap()), all_month);
    let only_mine = |ts: Vec<String>| ts.iter().all(|t| t == MINE) && !ts.is_empty();
    let both = |ts: Vec<String>| ts.iter().any(|t| t == THEIRS);
    let bill = |v: Vec<domain::bill::BillRow>| v.into_iter().map(|r| r.tenant_id).collect();
    assert!(only_mine(bill(s.bill_rows(mine, &period).await.unwrap())));
    assert!(both(bill(s.bill_rows(all, &period).await.unwrap())));
    let days = |v: Vec<domain::bill::DayRow>| v.into_iter().map(|r| r.tenant_id).collect();
    assert!(only_mine(days(s.day_rows(mine, &period).await.unwrap())));
    assert!(both(days(s.day_rows(all, &period).await.unwrap())));
    // The same rows through the FOCUS export's cursor, a batch at a time.
    let drain = |mut c: store::DayRowsCursor| async move {
        let mut rows = Vec::new();
        loop {
            let batch = c.next_batch().await.unwrap();
            if batch.is_empty() {
                return rows;
            }
            rows.extend(batch);
        }
    };
    assert!(only_mine(days(
        drain(s.day_rows_cursor(mine, &period).await.unwrap()).await
    )));
    assert!(both(days(
        drain(s.day_rows_cursor(all, &period).await.unwrap()).await
    )));
    // Provider-invoice adjustments: a department sees its own shares
    // (the unallocated line is the platform's).
    s.put_provider_account(
        "test",
        &store::PutProviderAccount {
            id: "acct".into(),
            kind: "openai".into(),
            api_base_url: "http://127.0.0.1:9/v1".into(),
            admin_key_enc: Some(vec![1, 2, 3]),
            drift_alert_bps: 100,
            links: vec![],
        },
    )
    .await
    .unwrap();
    let fin1: uuid::Uuid = user(&env, "fin1@x.io", "finance", None)
        .await
        .parse()
        .unwrap();
    let fin2: uuid::Uuid = user(&env, "fin2@x.io", "finance", None)
        .await
        .parse()
        .unwrap();
    let adj = s
        .propose_adjustment(
            "test",
            &store::NewAdjustment {
                account_id: "acct".into(),
                day: Utc::now().date_naive(),
                model: "m".into(),
                period: period.clone(),
                amount_pico: 30,
                allocation: "pro_rata".into(),
                reason: "test".into(),
                proposed_by: fin1,
            },
        )
        .await
        .unwrap();
    let share = |t: &str, p: i64| store::AdjustmentShare {
        tenant_id: t.into(),
        amount_pico: p,
    };
    s.decide_adjustment(
        "test",
        adj.id,
        fin2,
        Some(&[share(MINE, 10), share(THEIRS, 15), share("", 5)]),
        "",
    )
    .await
    .unwrap();
    let adjusted =
        |v: Vec<store::BillAdjustment>| v.into_iter().map(|a| a.tenant_id).collect::<Vec<_>>();
    assert_eq!(
        adjusted(s.bill_adjustments(mine, &period).await.unwrap()),
        [MINE]
    );
    assert_eq!(
        adjusted(s.bill_adjustments(all, &period).await.unwrap()),
        ["", MINE, THEIRS]
    );
    let eu = domain::bill::GroupBy::EndUser;
    let attributed =
        |v: Vec<domain::bill::AttributedRow>| v.into_iter().map(|r| r.tenant_id).collect();
    assert!(only_mine(attributed(
        s.attributed_rows(mine, &period, &eu).await.unwrap()
    )));
    assert!(both(attributed(
        s.attributed_rows(all, &period, &eu).await.unwrap()
    )));
    assert_eq!(s.tag_keys(mine, &period).await.unwrap(), [MINE]);
    assert_eq!(s.tag_keys(all, &period).await.unwrap(), [MINE, THEIRS]);
    let theirs_eu = s.end_user_month_usage(mine, THEIRS, "a", THEIRS, &period);
    assert_eq!(theirs_eu.await.unwrap(), (0, 0));
    let theirs_eu = s.end_user_month_usage(all, THEIRS, "a", THEIRS, &period);
    assert!(theirs_eu.await.unwrap().0 > 0);
    assert_eq!(
        keys(s.period_event_totals(mine, &period).await.unwrap()),
        [MINE]
    );
    assert_eq!(
        keys(s.period_event_totals(all, &period).await.unwrap()),
        [MINE, THEIRS]
    );

    // The request log, the ledger's replay check and the catalog's parts.
    let log = |v: Vec<store::RequestLogRow>| v.into_iter().map(|r| r.tenant_id).collect();
    let f = store::RequestLogFilter {
        limit: 100,
        ..Default::default()
    };
    assert!(only_mine(log(s.request_log(mine, &f).await.unwrap())));
    assert!(both(log(s.request_log(all, &f).await.unwrap())));
    let theirs_rid = format!("req_{THEIRS}");
    assert!(!s
        .usage_event_exists(mine, THEIRS, &theirs_rid)
        .await
        .unwrap());
    assert!(s
        .usage_event_exists(all, THEIRS, &theirs_rid)
        .await
        .unwrap());
    let cat = |c: store::Catalog| c.tenants.into_iter().map(|t| t.id).collect();
    let parts = store::CatalogParts::ALL;
    assert!(only_mine(cat(s
        .load_catalog_parts(mine, parts)
        .await
        .unwrap())));
    assert!(both(cat(s.load_catalog_parts(all, parts).await.unwrap())));
    let refusals = |v: Vec<domain::bill::RefusalRow>| v.into_iter().map(|r| r.tenant_id).collect();
    assert!(only_mine(refusals(
        s.refusal_rows(mine, &period).await.unwrap()
    )));
    assert!(both(refusals(s.refusal_rows(all, &period).await.unwrap())));
    let amounts =
        |m: std::collections::BTreeMap<String, domain::bill::QuotaAmount>| m.into_keys().collect();
    assert!(only_mine(amounts(
        s.granted_between(mine, start, end).await.unwrap()
    )));
    assert!(both(amounts(
        s.granted_between(all, start, end).await.unwrap()
    )));
    assert!(only_mine(amounts(
        s.borrowed_in(mine, &period).await.unwrap()
    )));
    assert!(both(amounts(s.borrowed_in(all, &period).await.unwrap())));
    let infos = |v: Vec<domain::bill::TenantInfo>| v.into_iter().map(|t| t.id).collect();
    assert!(only_mine(infos(s.tenant_infos(mine).await.unwrap())));
    assert!(both(infos(s.tenant_infos(all).await.unwrap())));
    let events = |v: Vec<UsageEvent>| v.into_iter().map(|e| e.tenant_id).collect();
    assert!(only_mine(events(
        s.usage_events_page(mine, &period, "", 100).await.unwrap()
    )));
    assert!(both(events(
        s.usage_events_page(all, &period, "", 100).await.unwrap()
    )));
    let books = billing::Books::new(
        s.clone(),
        None,
        domain::period::PlatformClock::parse("UTC").unwrap(),
    );
    let b = books.bill(&period, mine).await.unwrap();
    assert!(b.tenants.iter().all(|t| t.tenant_id == MINE) && !b.tenants.is_empty());
    assert_eq!(books.bill(&period, all).await.unwrap().tenants.len(), 2);

    // Borrowing.
    let borrows = |v: Vec<store::BorrowRow>| v.into_iter().map(|b| b.tenant_id).collect();
    assert!(only_mine(borrows(
        s.pending_borrows(mine, later).await.unwrap()
    )));
    assert!(both(borrows(s.pending_borrows(all, later).await.unwrap())));
    assert!(only_mine(borrows(s.borrows(mine, &period).await.unwrap())));
    assert!(both(borrows(s.borrows(all, &period).await.unwrap())));
    let borrowed = |v: Vec<store::BorrowedRow>| v.into_iter().map(|b| b.tenant_id).collect();
    assert!(only_mine(borrowed(s.borrowed(mine).await.unwrap())));
    assert!(both(borrowed(s.borrowed(all).await.unwrap())));
    let reclaims = |v: Vec<store::ReclaimRow>| v.into_iter().map(|r| r.tenant_id).collect();
    assert!(only_mine(reclaims(
        s.reclaims(mine, &period, false).await.unwrap()
    )));
    assert!(both(reclaims(
        s.reclaims(all, &period, false).await.unwrap()
    )));
    assert_eq!(s.tenant_day_cost(mine, THEIRS, &day).await.unwrap(), 0);
    assert_eq!(s.tenant_day_cost(all, THEIRS, &day).await.unwrap(), 30);

    // Usage analytics over a range of days (the events' day is today).
    let today = Utc::now().date_naive();
    let (from, to) = (today - Duration::days(1), today + Duration::days(1));
    let day_cost = |v: Vec<store::DayUsage>| v.iter().map(|d| d.sums.cost_micro).sum::<i64>();
    assert_eq!(day_cost(s.usage_days(mine, from, to).await.unwrap()), 30);
    assert_eq!(day_cost(s.usage_days(all, from, to).await.unwrap()), 60);
    let group_tenants =
        |v: Vec<store::GroupUsage>| v.into_iter().map(|g| g.tenant_id).collect::<Vec<_>>();
    for by in [
        store::UsageBy::Key,
        store::UsageBy::App,
        store::UsageBy::EndUser,
        store::UsageBy::Tag(THEIRS.into()),
    ] {
        let mine_top = s.usage_top(mine, from, to, &by, 10).await.unwrap();
        assert!(mine_top.iter().all(|g| g.tenant_id == MINE), "{by:?}");
        assert!(both(group_tenants(
            s.usage_top(all, from, to, &by, 10).await.unwrap()
        )));
    }
    // Their tag is on none of my requests: my one group is "without it".
    let untagged = s
        .usage_top(mine, from, to, &store::UsageBy::Tag(THEIRS.into()), 10)
        .await
        .unwrap();
    assert_eq!(untagged.len(), 1);
    assert_eq!(untagged[0].value, None);
    assert!(only_mine(group_tenants(
        s.usage_top(mine, from, to, &store::UsageBy::Key, 10)
            .await
            .unwrap()
    )));
    // By model, across tenants: my scope's line is my spend only.
    let by_model = |v: Vec<store::GroupUsage>| v.iter().map(|g| g.sums.cost_micro).sum::<i64>();
    assert_eq!(
        by_model(
            s.usage_top(mine, from, to, &store::UsageBy::Model, 10)
                .await
                .unwrap()
        ),
        30
    );
    assert_eq!(
        by_model(
            s.usage_top(all, from, to, &store::UsageBy::Model, 10)
                .await
                .unwrap()
        ),
        60
    );
    assert_eq!(s.usage_tag_keys(mine, from, to).await.unwrap(), [MINE]);
    assert_eq!(
        s.usage_tag_keys(all, from, to).await.unwrap(),
        [MINE, THEIRS]
    );

    // Jobs' records.
    let alerts = |v: Vec<store::AlertRow>| v.into_iter().map(|a| a.tenant_id).collect();
    assert!(only_mine(alerts(s.due_alerts(mine, later).await.unwrap())));
    assert!(both(alerts(s.due_alerts(all, later).await.unwrap())));
    assert!(only_mine(alerts(s.alerts(mine, None).await.unwrap())));
    assert!(both(alerts(s.alerts(all, None).await.unwrap())));
    let notices = |v: Vec<store::NoticeRow>| {
        v.into_iter()
            .map(|n| n.tenant_id.unwrap_or_default())
            .collect()
    };
    assert!(only_mine(notices(s.notices(mine, 100).await.unwrap())));
    assert!(both(notices(s.notices(all, 100).await.unwrap())));
    assert!(s.job_runs(mine, None, 10).await.unwrap().is_empty());
    assert_eq!(s.job_runs(all, None, 10).await.unwrap().len(), 1);
    assert!(s.job_runs_page(mine, None, 10).await.unwrap().is_empty());
    assert_eq!(s.job_runs_page(all, None, 10).await.unwrap().len(), 1);
    let app_tenants =
        |v: Vec<(String, String)>| -> Vec<String> { v.into_iter().map(|(t, _)| t).collect() };
    assert!(only_mine(app_tenants(s.app_ids(mine).await.unwrap())));
    assert!(both(app_tenants(s.app_ids(all).await.unwrap())));
    // A budget's rebuild reads another tenant's days as nothing.
    let today = Utc::now().date_naive();
    let days = (today, today.succ_opt().unwrap());
    let theirs_window = s.window_usage(mine, THEIRS, None, None, None, days);
    assert_eq!(theirs_window.await.unwrap(), (0, 0, 0));
    let theirs_window = s.window_usage(all, THEIRS, None, None, None, days);
    assert!(theirs_window.await.unwrap().0 > 0);
}

/// Every store function that takes a scope has a case above.
#[test]
fn every_scoped_store_function_is_tested_here() {
    let here: String = include_str!("tenant_scope.rs").split_whitespace().collect();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/store/src");
    let re = regex::Regex::new(r"pub async fn (\w+)\(\s*&self,\s*scope: &TenantScope").unwrap();
    let mut scoped = Vec::new();
    for f in std::fs::read_dir(dir).unwrap() {
        let src = std::fs::read_to_string(f.unwrap().path()).unwrap();
        scoped.extend(re.captures_iter(&src).map(|c| c[1].to_string()));
    }
    assert!(scoped.len() >= 30, "found only {scoped:?}");
    let untested: Vec<_> = scoped
        .iter()
        .filter(|name| !here.contains(&format!(".{name}(mine")))
        .collect();
    assert!(
        untested.is_empty(),
        "scoped reads without a case: {untested:?}"
    );
}
