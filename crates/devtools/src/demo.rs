//! `tollgate-dev demo`: a whole platform to look at, on the built-in mock upstream.
//! Idempotent: a second start reuses what the first created, points the demo
//! models at this run's mock, and issues a fresh key for the printed curl line.

use domain::{keys, Limits, MicroUsd};
use store::{passwords, AppRow, NewKey, NewModel, Store, TenantRow, TenantScope};

pub const ADMIN_EMAIL: &str = "admin@tollgate.local";
pub const ADMIN_PASSWORD: &str = "tollgate-demo-admin";
pub const FINANCE_EMAIL: &str = "finance@tollgate.local";
pub const FINANCE_PASSWORD: &str = "tollgate-demo-finance";
const ACTOR: &str = "system:demo";

pub struct DemoKey {
    pub tenant: String,
    pub app: String,
    pub key: String,
}

fn usd(s: &str) -> MicroUsd {
    MicroUsd::from_usd_str(s).expect("demo amounts are valid")
}

pub async fn seed(store: &Store, mock_base_url: &str, pepper: &[u8]) -> anyhow::Result<DemoKey> {
    for (email, password, role) in [
        (ADMIN_EMAIL, ADMIN_PASSWORD, "platform_admin"),
        (FINANCE_EMAIL, FINANCE_PASSWORD, "finance"),
    ] {
        if store.user_by_email(email).await?.is_none() {
            store
                .create_user(ACTOR, email, &passwords::hash(password)?, role, None)
                .await?;
        }
    }
    let models = [
        ("gpt-4o-mini", "chat", "gpt-4o-mini", 150_000, 600_000),
        ("deepseek-chat", "chat", "deepseek-chat", 270_000, 1_100_000),
        (
            "text-embedding-3-small",
            "embedding",
            "text-embedding-3-small",
            20_000,
            0,
        ),
    ];
    for (id, kind, upstream, pin, pout) in models {
        ensure_model(store, ACTOR, id, kind, upstream, (pin, pout), mock_base_url).await?;
    }
    let tenants = [
        (
            "sales",
            "Sales",
            "CC-100",
            "core",
            5_000_000,
            "50",
            600,
            vec!["chatbot", "crm-summaries"],
        ),
        (
            "research",
            "Research",
            "CC-200",
            "standard",
            2_000_000,
            "20",
            300,
            vec!["notebook"],
        ),
    ];
    for (id, name, cc, priority, tokens, cost, rpm, apps) in tenants {
        if !store.tenant_exists(&TenantScope::system(), id).await? {
            let t = TenantRow {
                id: id.into(),
                name: name.into(),
                cost_center: cc.into(),
                priority: priority.into(),
                limits: Limits {
                    monthly_tokens: Some(tokens),
                    monthly_cost_usd: Some(usd(cost)),
                    rpm: Some(rpm),
                    max_inflight: Some(64),
                    ..Default::default()
                },
                may_borrow: id == "sales",
                borrow_cap_tokens: 500_000,
                allowed_models: None,
                clamp_max_tokens: id == "sales",
                max_queued_requests: None,
                max_open_streams: None,
            };
            store.create_tenant(ACTOR, &t).await?;
            for app in apps {
                let a = AppRow {
                    tenant_id: id.into(),
                    id: app.into(),
                    name: app.replace('-', " "),
                    limits: Limits {
                        monthly_tokens: Some(tokens / 2),
                        ..Default::default()
                    },
                    allowed_models: None,
                    attribution: Default::default(),
                };
                store.create_app(ACTOR, &a).await?;
            }
        }
    }
    // The printed curl line needs a key we can show: issue a fresh one and
    // revoke the previous run's.
    let (tenant, app, name) = ("sales", "chatbot", "demo-curl");
    let key = issue_named_key(
        store,
        ACTOR,
        (tenant, app, name),
        Limits {
            rpm: Some(120),
            ..Default::default()
        },
        pepper,
    )
    .await?;
    Ok(DemoKey {
        tenant: tenant.into(),
        app: app.into(),
        key,
    })
}

/// The benchmark tenant: every limit kind set, none reachable in a run, so
/// the hold engine does its full work on every request.
pub async fn seed_bench(store: &Store, upstream: &str, pepper: &[u8]) -> anyhow::Result<String> {
    bench_model(store, upstream).await?;
    load_tenant(store, "bench", "Benchmark", bench_limits(), pepper).await
}

/// The isolation benchmark's two tenants, `iso-a` (the flood) and `iso-b`
/// (the steady one): standard priority, budgets that do not run out, and an
/// in-flight limit of 2 each, so A's flood queues and is refused while B
/// stays within its share. Returns their fresh keys (A, B).
pub async fn seed_isolation(
    store: &Store,
    upstream: &str,
    pepper: &[u8],
) -> anyhow::Result<(String, String)> {
    bench_model(store, upstream).await?;
    let two = Limits {
        max_inflight: Some(2),
        ..bench_limits()
    };
    let a = load_tenant(store, "iso-a", "Isolation A (flood)", two.clone(), pepper).await?;
    let b = load_tenant(store, "iso-b", "Isolation B (steady)", two, pepper).await?;
    Ok((a, b))
}

/// The load scenarios' tenants (docs/benchmarks.md, "Load scenarios"):
/// `scn-core`, `scn-standard`, `scn-batch` of those priorities, every limit
/// kind set — budgets and the daily soft limit out of reach, rates and
/// in-flight limits a few times each tenant's usual load, so a surge meets
/// them — plus the models the scenarios use: `gpt-4o-mini`, `gpt-4.1`
/// (a 1M-token context window) and `scn-pool` (gpt-4o-mini behind a pool of
/// 6 concurrent requests, 3 of them guaranteed to `scn-core`). `gpt-4.1`
/// is served by `long_upstream`. Returns the three fresh keys (core,
/// standard, batch).
pub async fn seed_scenarios(
    store: &Store,
    (upstream, long_upstream): (&str, &str),
    pepper: &[u8],
) -> anyhow::Result<[String; 3]> {
    bench_model(store, upstream).await?;
    let long = ("gpt-4.1", "chat", "gpt-4.1", (2_000_000, 8_000_000));
    let pool = ("scn-pool", "chat", "gpt-4o-mini", (150_000, 600_000));
    for ((id, kind, up, prices), url) in [(long, long_upstream), (pool, upstream)] {
        ensure_model(store, BENCH_ACTOR, id, kind, up, prices, url).await?;
    }
    // (id, priority, rpm, in-flight, context, input TPM, output TPM): batch
    // takes 1M-token prompts and 1,000 streams.
    let tenants = [
        ("scn-core", "core", 6_000, 16, 128_000, 1_000_000, 1_000_000),
        (
            "scn-standard",
            "standard",
            1_800,
            8,
            128_000,
            1_000_000,
            1_000_000,
        ),
        (
            "scn-batch",
            "batch",
            60_000,
            1_024,
            1_100_000,
            1_000_000_000,
            10_000_000,
        ),
    ];
    let mut keys = Vec::new();
    for (id, priority, rpm, inflight, ctx, input_tpm, output_tpm) in tenants {
        let limits = Limits {
            monthly_tokens: Some(1_000_000_000_000),
            monthly_cost_usd: Some(usd("1000000")),
            daily_cost_soft_usd: Some(usd("100000")),
            rpm: Some(rpm),
            input_tpm: Some(input_tpm),
            output_tpm: Some(output_tpm),
            max_inflight: Some(inflight),
            max_context_tokens: Some(ctx),
            max_output_tokens: Some(4_096),
            ..Default::default()
        };
        let name = format!("Scenario tenant ({priority})");
        keys.push(priority_tenant(store, id, &name, priority, limits, pepper).await?);
    }
    store
        .set_model_fairness(
            BENCH_ACTOR,
            "scn-pool",
            None,
            Some(6),
            &[("scn-core".to_string(), 3)],
        )
        .await?;
    Ok([keys[0].clone(), keys[1].clone(), keys[2].clone()])
}

/// One tenant of the fairness benchmark (`scripts/bench_fair.sh`; the
/// spec is written by `fair-bench plan`, so the bench crate is the one
/// place that sizes the month).
#[derive(serde::Deserialize)]
pub struct FairTenant {
    pub id: String,
    pub priority: String,
    pub monthly_tokens: i64,
    pub max_inflight: i64,
    pub may_borrow: bool,
    pub borrow_cap_tokens: i64,
    /// Guaranteed slots of the benchmark's model pool (core tenants).
    #[serde(default)]
    pub guarantee: i32,
}

/// The fairness benchmark's catalog: the pool, the model `fair-pool`
/// (gpt-4o-mini behind `capacity` concurrent requests) and its tenants.
#[derive(serde::Deserialize)]
pub struct FairSpec {
    pub pool_tokens: i64,
    pub max_borrow_share_ppm: i64,
    pub reclaim_below_share_ppm: i64,
    pub capacity: i32,
    pub tenants: Vec<FairTenant>,
}

/// Seeds the fairness benchmark (docs/fair.md, "Fairness, measured") from
/// its spec (JSON): every tenant with a monthly token budget, an in-flight
/// limit, its borrowing rights and an app `load` with a key `bench` (the
/// app's and key's limits out of reach); returns `tenant key` lines.
pub async fn seed_fair(
    store: &Store,
    upstream: &str,
    pepper: &[u8],
    spec: &FairSpec,
) -> anyhow::Result<Vec<(String, String)>> {
    bench_model(store, upstream).await?;
    let pool = ("fair-pool", "chat", "gpt-4o-mini", (150_000, 600_000));
    ensure_model(store, BENCH_ACTOR, pool.0, pool.1, pool.2, pool.3, upstream).await?;
    store
        .set_pool_policy(
            BENCH_ACTOR,
            &domain::borrowing::PoolPolicy {
                monthly_tokens: Some(spec.pool_tokens),
                monthly_cost_micro: None,
                max_borrow_share_ppm: spec.max_borrow_share_ppm,
                reclaim_below_share_ppm: spec.reclaim_below_share_ppm,
            },
        )
        .await?;
    let mut keys = Vec::new();
    let mut guarantees = Vec::new();
    for t in &spec.tenants {
        if !store.tenant_exists(&TenantScope::system(), &t.id).await? {
            let row = TenantRow {
                id: t.id.clone(),
                name: format!("Fairness tenant {} ({})", t.id, t.priority),
                cost_center: format!("CC-{}", t.id.to_uppercase()),
                priority: t.priority.clone(),
                limits: Limits {
                    monthly_tokens: Some(t.monthly_tokens),
                    max_inflight: Some(t.max_inflight),
                    ..Default::default()
                },
                may_borrow: t.may_borrow,
                borrow_cap_tokens: t.borrow_cap_tokens,
                allowed_models: None,
                clamp_max_tokens: false,
                max_queued_requests: None,
                max_open_streams: None,
            };
            store.create_tenant(BENCH_ACTOR, &row).await?;
            let a = AppRow {
                tenant_id: t.id.clone(),
                id: "load".into(),
                name: "load".into(),
                limits: bench_limits(),
                allowed_models: None,
                attribution: Default::default(),
            };
            store.create_app(BENCH_ACTOR, &a).await?;
        }
        if t.guarantee > 0 {
            guarantees.push((t.id.clone(), t.guarantee));
        }
        let key = issue_named_key(
            store,
            BENCH_ACTOR,
            (&t.id, "load", "bench"),
            bench_limits(),
            pepper,
        )
        .await?;
        keys.push((t.id.clone(), key));
    }
    store
        .set_model_fairness(
            BENCH_ACTOR,
            "fair-pool",
            None,
            Some(spec.capacity),
            &guarantees,
        )
        .await?;
    Ok(keys)
}

/// A tenant `id` of `priority` with `limits` (an existing one is reused as
/// it is), an app `load` and a fresh key `bench` with the bench's high limits.
async fn priority_tenant(
    store: &Store,
    id: &str,
    name: &str,
    priority: &str,
    limits: Limits,
    pepper: &[u8],
) -> anyhow::Result<String> {
    if store.tenant_exists(&TenantScope::system(), id).await? {
        return issue_named_key(
            store,
            BENCH_ACTOR,
            (id, "load", "bench"),
            bench_limits(),
            pepper,
        )
        .await;
    }
    let t = TenantRow {
        id: id.into(),
        name: name.into(),
        cost_center: format!("CC-{}", id.to_uppercase()),
        priority: priority.into(),
        limits,
        may_borrow: false,
        borrow_cap_tokens: 0,
        allowed_models: None,
        clamp_max_tokens: false,
        max_queued_requests: None,
        max_open_streams: None,
    };
    store.create_tenant(BENCH_ACTOR, &t).await?;
    let a = AppRow {
        tenant_id: id.into(),
        id: "load".into(),
        name: "load".into(),
        limits: bench_limits(),
        allowed_models: None,
        attribution: Default::default(),
    };
    store.create_app(BENCH_ACTOR, &a).await?;
    issue_named_key(
        store,
        BENCH_ACTOR,
        (id, "load", "bench"),
        bench_limits(),
        pepper,
    )
    .await
}

const BENCH_ACTOR: &str = "system:bench";

async fn bench_model(store: &Store, upstream: &str) -> anyhow::Result<()> {
    ensure_model(
        store,
        BENCH_ACTOR,
        "gpt-4o-mini",
        "chat",
        "gpt-4o-mini",
        (150_000, 600_000),
        upstream,
    )
    .await
}

fn bench_limits() -> Limits {
    Limits {
        monthly_tokens: Some(1_000_000_000_000),
        monthly_cost_usd: Some(usd("1000000")),
        // Out of reach like the rest, but read on every request.
        daily_cost_soft_usd: Some(usd("100000")),
        rpm: Some(100_000_000),
        input_tpm: Some(100_000_000_000),
        output_tpm: Some(100_000_000_000),
        max_inflight: Some(100_000),
        ..Default::default()
    }
}

/// Creates (or reuses) a standard tenant `id` with an app `load`, and
/// issues a fresh key `bench` whose own limits are the bench's high ones.
async fn load_tenant(
    store: &Store,
    id: &str,
    name: &str,
    limits: Limits,
    pepper: &[u8],
) -> anyhow::Result<String> {
    priority_tenant(store, id, name, "standard", limits, pepper).await
}

/// Creates a model on `base_url`, or points the existing one there.
async fn ensure_model(
    store: &Store,
    actor: &str,
    id: &str,
    kind: &str,
    upstream_model: &str,
    prices: (i64, i64),
    base_url: &str,
) -> anyhow::Result<()> {
    if store.model_exists(id).await? {
        store.set_model_upstream(actor, id, base_url).await?;
        return Ok(());
    }
    let m = NewModel {
        id: id.into(),
        kind: kind.into(),
        upstream_base_url: base_url.into(),
        upstream_model: upstream_model.into(),
        upstream_api_key_enc: None,
        input_price_micro_per_mtok: prices.0,
        output_price_micro_per_mtok: prices.1,
        tokenizer: None,
        default_max_output_tokens: 1024,
        profile: domain::provider::ProviderProfile::suggested_for(upstream_model),
    };
    store.create_model(actor, &m).await?;
    Ok(())
}

/// Issues a fresh key named `name` for (tenant, app), revoking earlier keys
/// of that name: the key is shown once, so a restart needs a new one.
async fn issue_named_key(
    store: &Store,
    actor: &str,
    (tenant, app, name): (&str, &str, &str),
    limits: Limits,
    pepper: &[u8],
) -> anyhow::Result<String> {
    store.revoke_keys_named(actor, tenant, app, name).await?;
    let key = keys::generate();
    let k = NewKey {
        tenant_id: tenant.into(),
        app_id: app.into(),
        name: name.into(),
        prefix: keys::display_prefix(&key),
        key_hash: keys::keyed_hash(pepper, &key),
        limits,
        allowed_models: None,
        expires_at: None,
        attribution: Default::default(),
    };
    store.create_key(actor, &k).await?;
    Ok(key)
}
