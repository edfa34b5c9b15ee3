//! Tenants, apps, virtual keys and models: what the gateway's in-memory index
//! is built from, and the writes that change it (each with its audit row).

use crate::audit::{append, NewAudit};
use crate::{conflict, Result, Store, StoreError, TenantScope};
use chrono::{DateTime, Utc};
use domain::Limits;
use serde_json::json;
use uuid::Uuid;

/// Which parts of the catalog a load reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogParts {
    /// Tenants, apps, grants and borrowed quota.
    pub tenants: bool,
    pub keys: bool,
    /// Models and their pool guarantees.
    pub models: bool,
}

impl CatalogParts {
    pub const ALL: CatalogParts = CatalogParts {
        tenants: true,
        keys: true,
        models: true,
    };
    /// Everything but the keys: small, and what a change of unknown kind
    /// reloads.
    pub const CONFIG: CatalogParts = CatalogParts {
        tenants: true,
        keys: false,
        models: true,
    };
    pub const TENANT: CatalogParts = CatalogParts {
        tenants: true,
        keys: false,
        models: false,
    };
    pub const MODELS: CatalogParts = CatalogParts {
        tenants: false,
        keys: false,
        models: true,
    };
}

#[derive(Debug, Clone)]
pub struct TenantRow {
    pub id: String,
    pub name: String,
    pub cost_center: String,
    pub priority: String,
    pub limits: Limits,
    pub may_borrow: bool,
    pub borrow_cap_tokens: i64,
    pub allowed_models: Option<Vec<String>>,
    /// Policy: a non-stream request whose max_tokens the budget cannot cover
    /// may go through clamped (decision `degrade`) instead of a 402.
    pub clamp_max_tokens: bool,
    /// How many of its requests may wait in the fair queue at once (per
    /// replica); None: the platform's `fair.queue_max_per_tenant`.
    pub max_queued_requests: Option<i32>,
    /// How many of its streamed answers may be open at once (per replica);
    /// None: the platform's `fair.max_open_streams_per_tenant`.
    pub max_open_streams: Option<i32>,
}

#[derive(Debug, Clone)]
pub struct AppRow {
    pub tenant_id: String,
    pub id: String,
    pub name: String,
    pub limits: Limits,
    pub allowed_models: Option<Vec<String>>,
    /// Default tags and required tag keys of the app's requests.
    pub attribution: domain::attribution::Policy,
}

/// A change to an app: only the fields given change
/// (`allowed_models: Some(None)` lifts the restriction).
#[derive(Debug, Clone, Default)]
pub struct AppChange {
    pub name: Option<String>,
    pub allowed_models: Option<Option<Vec<String>>>,
    pub attribution: Option<domain::attribution::Policy>,
}

#[derive(Debug, Clone)]
pub struct KeyRow {
    pub id: Uuid,
    pub tenant_id: String,
    pub app_id: String,
    pub name: String,
    pub prefix: String,
    pub key_hash: Vec<u8>,
    pub limits: Limits,
    pub allowed_models: Option<Vec<String>>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Default tags and required tag keys the key adds to its app's.
    pub attribution: domain::attribution::Policy,
    /// Set when this row is the key's previous secret (after a rotation):
    /// the end of its grace. `key_hash` and `prefix` are then the previous
    /// secret's, and `expires_at` the earlier of the key's expiry and the
    /// grace end.
    pub rotated_until: Option<DateTime<Utc>>,
}

impl KeyRow {
    /// A previous secret whose grace ends before the key expires: once
    /// `expires_at` passes, it was rotated out (not expired).
    pub fn rotated_out(&self) -> bool {
        self.rotated_until.is_some() && self.rotated_until == self.expires_at
    }
}

#[derive(Debug, Clone)]
pub struct ModelRow {
    pub id: String,
    pub kind: String,
    pub upstream_base_url: String,
    pub upstream_model: String,
    pub upstream_api_key_enc: Option<Vec<u8>>,
    pub input_price_micro_per_mtok: i64,
    pub output_price_micro_per_mtok: i64,
    pub tokenizer: Option<String>,
    pub default_max_output_tokens: i64,
    pub degrade_to: Option<String>,
    pub pool_capacity: Option<i32>,
    pub profile: domain::provider::ProviderProfile,
    /// A disabled model is not in the gateway's catalog: requests naming
    /// it are answered as for an unknown model.
    pub enabled: bool,
}

/// Everything the data plane needs, read in one consistent snapshot.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub tenants: Vec<TenantRow>,
    pub apps: Vec<AppRow>,
    pub keys: Vec<KeyRow>,
    pub models: Vec<ModelRow>,
    pub grants: Vec<crate::GrantRow>,
    /// Outstanding borrowed quota per tenant and period.
    pub borrowed: Vec<crate::BorrowedRow>,
    /// Core tenants' guaranteed slots of model pools.
    pub guarantees: Vec<crate::GuaranteeRow>,
    /// Models' deployments and fallback models.
    pub routing: crate::RoutingRows,
    /// Models' dated price sheets, oldest first.
    pub price_sheets: Vec<crate::PriceSheetRow>,
    /// Names clients ask for that catalog models serve (with the models).
    pub aliases: Vec<domain::alias::ModelAlias>,
}

#[derive(Debug, Clone)]
pub struct NewKey {
    pub tenant_id: String,
    pub app_id: String,
    pub name: String,
    pub prefix: String,
    pub key_hash: [u8; 32],
    pub limits: Limits,
    pub allowed_models: Option<Vec<String>>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Default tags and required tag keys the key adds to its app's.
    pub attribution: domain::attribution::Policy,
}

#[derive(Debug, Clone)]
pub struct NewModel {
    pub id: String,
    pub kind: String,
    pub upstream_base_url: String,
    pub upstream_model: String,
    pub upstream_api_key_enc: Option<Vec<u8>>,
    pub input_price_micro_per_mtok: i64,
    pub output_price_micro_per_mtok: i64,
    pub tokenizer: Option<String>,
    pub default_max_output_tokens: i64,
    pub profile: domain::provider::ProviderProfile,
}

fn limits_of(v: serde_json::Value) -> Result<Limits> {
    serde_json::from_value(v).map_err(|e| StoreError::Corrupt(format!("limits: {e}")))
}

/// A `virtual_keys` row as stored (limits still JSON).
#[derive(sqlx::FromRow)]
pub(crate) struct KeyCols {
    id: Uuid,
    tenant_id: String,
    app_id: String,
    name: String,
    prefix: String,
    key_hash: Vec<u8>,
    limits: serde_json::Value,
    allowed_models: Option<Vec<String>>,
    expires_at: Option<DateTime<Utc>>,
    attribution: serde_json::Value,
    rotated_until: Option<DateTime<Utc>>,
}

/// The columns `KeyCols` reads, in one place for every key query (from
/// [`KEY_SECRETS`]).
pub(crate) const KEY_COLS: &str =
    "id, tenant_id, app_id, name, prefix, key_hash, limits, allowed_models, expires_at, attribution, rotated_until";

/// Every secret of every key, one row each (`FROM {KEY_SECRETS}`): its
/// current secret, and after a rotation its previous one, with that
/// secret's hash and prefix, `expires_at` the earlier of the key's expiry
/// and the grace end, and `rotated_until` the grace end. Conditions on
/// `key_hash` reach each arm's index.
pub(crate) const KEY_SECRETS: &str = "(
    SELECT id, tenant_id, app_id, name, prefix, key_hash, limits, allowed_models, expires_at,
           attribution, revoked_at, NULL::timestamptz AS rotated_until
    FROM virtual_keys
    UNION ALL
    SELECT id, tenant_id, app_id, name, previous_prefix, previous_key_hash, limits, allowed_models,
           LEAST(expires_at, previous_valid_until), attribution, revoked_at, previous_valid_until
    FROM virtual_keys WHERE previous_key_hash IS NOT NULL
) AS secrets";

pub(crate) fn key_row(r: KeyCols) -> Result<KeyRow> {
    Ok(KeyRow {
        id: r.id,
        tenant_id: r.tenant_id,
        app_id: r.app_id,
        name: r.name,
        prefix: r.prefix,
        key_hash: r.key_hash,
        limits: limits_of(r.limits)?,
        allowed_models: r.allowed_models,
        expires_at: r.expires_at,
        attribution: serde_json::from_value(r.attribution)
            .map_err(|e| StoreError::Corrupt(format!("key attribution: {e}")))?,
        rotated_until: r.rotated_until,
    })
}

/// An `apps` row as stored (limits and attribution policy still JSON).
#[derive(sqlx::FromRow)]
pub(crate) struct AppCols {
    tenant_id: String,
    id: String,
    name: String,
    limits: serde_json::Value,
    allowed_models: Option<Vec<String>>,
    attribution: serde_json::Value,
}

pub(crate) fn app_row(r: AppCols) -> Result<AppRow> {
    Ok(AppRow {
        tenant_id: r.tenant_id,
        id: r.id,
        name: r.name,
        limits: limits_of(r.limits)?,
        allowed_models: r.allowed_models,
        attribution: serde_json::from_value(r.attribution)
            .map_err(|e| StoreError::Corrupt(format!("app attribution: {e}")))?,
    })
}

/// A `tenants` row as stored (limits still JSON).
#[derive(sqlx::FromRow)]
pub(crate) struct TenantCols {
    id: String,
    name: String,
    cost_center: String,
    priority: String,
    limits: serde_json::Value,
    may_borrow: bool,
    borrow_cap_tokens: i64,
    allowed_models: Option<Vec<String>>,
    clamp_max_tokens: bool,
    max_queued_requests: Option<i32>,
    max_open_streams: Option<i32>,
}

pub(crate) fn tenant_row(r: TenantCols) -> Result<TenantRow> {
    Ok(TenantRow {
        id: r.id,
        name: r.name,
        cost_center: r.cost_center,
        priority: r.priority,
        limits: limits_of(r.limits)?,
        may_borrow: r.may_borrow,
        borrow_cap_tokens: r.borrow_cap_tokens,
        allowed_models: r.allowed_models,
        clamp_max_tokens: r.clamp_max_tokens,
        max_queued_requests: r.max_queued_requests,
        max_open_streams: r.max_open_streams,
    })
}

/// A `models` row as the catalog selects it (its profile still columns).
#[derive(sqlx::FromRow)]
pub(crate) struct ModelCols {
    id: String,
    kind: String,
    upstream_base_url: String,
    upstream_model: String,
    /// Left out of the console's select: it never reads the provider key.
    #[sqlx(default)]
    upstream_api_key_enc: Option<Vec<u8>>,
    input_price_micro_per_mtok: i64,
    output_price_micro_per_mtok: i64,
    tokenizer: Option<String>,
    default_max_output_tokens: i64,
    degrade_to: Option<String>,
    pool_capacity: Option<i32>,
    #[sqlx(flatten)]
    profile: crate::provider::ProfileCols,
    enabled: bool,
}

pub(crate) fn model_row(r: ModelCols) -> Result<ModelRow> {
    Ok(ModelRow {
        id: r.id,
        kind: r.kind,
        upstream_base_url: r.upstream_base_url,
        upstream_model: r.upstream_model,
        upstream_api_key_enc: r.upstream_api_key_enc,
        input_price_micro_per_mtok: r.input_price_micro_per_mtok,
        output_price_micro_per_mtok: r.output_price_micro_per_mtok,
        tokenizer: r.tokenizer,
        default_max_output_tokens: r.default_max_output_tokens,
        degrade_to: r.degrade_to,
        pool_capacity: r.pool_capacity,
        profile: r.profile.profile()?,
        enabled: r.enabled,
    })
}

fn limits_json(l: &Limits) -> serde_json::Value {
    serde_json::to_value(l).expect("limits serialise")
}

impl Store {
    /// The catalog of the tenants in `scope` (the gateway's is the system
    /// scope's), with every enabled model.
    pub async fn load_catalog(&self, scope: &TenantScope) -> Result<Catalog> {
        self.load_catalog_parts(scope, CatalogParts::ALL).await
    }

    /// The parts of the catalog a change touched (see [`CatalogParts`]).
    pub async fn load_catalog_parts(
        &self,
        scope: &TenantScope,
        p: CatalogParts,
    ) -> Result<Catalog> {
        let t = scope.tenant();
        // A part not wanted binds the empty tenant id, which no tenant has:
        // the query shape stays one, and it returns nothing.
        let t_or_none = if p.tenants { t } else { Some("") };
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let tenants = sqlx::query_as::<_, TenantCols>(
            "SELECT id, name, cost_center, priority, limits, may_borrow, borrow_cap_tokens, allowed_models, clamp_max_tokens,
                    max_queued_requests, max_open_streams FROM tenants
             WHERE ($1::text IS NULL OR id = $1)",
        )
        .bind(t_or_none)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(tenant_row)
        .collect::<Result<Vec<_>>>()?;
        let apps = sqlx::query_as::<_, AppCols>(
            "SELECT tenant_id, id, name, limits, allowed_models, attribution FROM apps WHERE ($1::text IS NULL OR tenant_id = $1)",
        )
        .bind(t_or_none)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(app_row)
        .collect::<Result<Vec<_>>>()?;
        let keys = sqlx::query_as::<_, KeyCols>(&format!(
            "SELECT {KEY_COLS}
             FROM {KEY_SECRETS} WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
               AND ($1::text IS NULL OR tenant_id = $1)"
        ))
        .bind(if p.keys { t } else { Some("") })
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(key_row)
        .collect::<Result<Vec<_>>>()?;
        let models = sqlx::query_as::<_, ModelCols>(
            "SELECT id, kind, upstream_base_url, upstream_model, upstream_api_key_enc,
                    input_price_micro_per_mtok, output_price_micro_per_mtok, tokenizer,
                    default_max_output_tokens, degrade_to, pool_capacity, cap_field,
                    hidden_reasoning, apis, enabled
             FROM models WHERE enabled AND $1",
        )
        .bind(p.models)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(model_row)
        .collect::<Result<Vec<_>>>()?;
        let grants = sqlx::query_as(crate::quota_requests::ACTIVE_GRANTS)
            .bind(t_or_none)
            .fetch_all(&mut *tx)
            .await?;
        let borrowed = sqlx::query_as(crate::pool::OUTSTANDING)
            .bind(t_or_none)
            .fetch_all(&mut *tx)
            .await?;
        let guarantees = sqlx::query_as::<_, crate::GuaranteeRow>(
            "SELECT model_id, tenant_id, slots FROM model_guarantees WHERE ($1::text IS NULL OR tenant_id = $1) AND $2",
        )
        .bind(t)
        .bind(p.models)
        .fetch_all(&mut *tx)
        .await?;
        let routing = crate::deployments::load(&mut tx).await?;
        let price_sheets = if p.models {
            crate::prices::load(&mut tx).await?
        } else {
            Vec::new()
        };
        let aliases = crate::model_aliases::load(&mut tx, p.models).await?;
        tx.commit().await?;
        Ok(Catalog {
            tenants,
            apps,
            keys,
            models,
            grants,
            borrowed,
            guarantees,
            routing,
            price_sheets,
            aliases,
        })
    }

    pub async fn create_tenant(&self, actor: &str, t: &TenantRow) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        bind_tenant(t, sqlx::query(
            "INSERT INTO tenants (id, name, cost_center, priority, limits, may_borrow, borrow_cap_tokens, allowed_models, clamp_max_tokens,
                max_queued_requests, max_open_streams)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        ))
        .execute(&mut *tx)
        .await
        .map_err(conflict(format!("tenant {}", t.id)))?;
        let after = json!({"id": t.id, "name": t.name, "cost_center": t.cost_center, "priority": t.priority,
            "limits": t.limits, "may_borrow": t.may_borrow, "borrow_cap_tokens": t.borrow_cap_tokens,
            "allowed_models": t.allowed_models, "clamp_max_tokens": t.clamp_max_tokens,
            "max_queued_requests": t.max_queued_requests, "max_open_streams": t.max_open_streams});
        append(
            &mut tx,
            NewAudit::new(actor, "tenant.create", format!("tenant:{}", t.id)).after(after),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Replaces a tenant's limits (the hot path sees it within a second).
    pub async fn set_tenant_limits(
        &self,
        actor: &str,
        tenant: &str,
        limits: &Limits,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let before: Option<serde_json::Value> =
            sqlx::query_scalar("SELECT limits FROM tenants WHERE id = $1 FOR UPDATE")
                .bind(tenant)
                .fetch_optional(&mut *tx)
                .await?;
        let before = before.ok_or_else(|| StoreError::NotFound(format!("tenant {tenant}")))?;
        sqlx::query("UPDATE tenants SET limits = $2, updated_at = now(), version = version + 1 WHERE id = $1")
            .bind(tenant)
            .bind(limits_json(limits))
            .execute(&mut *tx)
            .await?;
        append(
            &mut tx,
            NewAudit::new(actor, "tenant.limits", format!("tenant:{tenant}"))
                .before(json!({"limits": before}))
                .after(json!({"limits": limits})),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn create_app(&self, actor: &str, a: &AppRow) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("INSERT INTO apps (tenant_id, id, name, limits, allowed_models, attribution) VALUES ($1, $2, $3, $4, $5, $6)")
            .bind(&a.tenant_id)
            .bind(&a.id)
            .bind(&a.name)
            .bind(limits_json(&a.limits))
            .bind(&a.allowed_models)
            .bind(serde_json::to_value(&a.attribution).expect("policy serialises"))
            .execute(&mut *tx)
            .await
            .map_err(conflict(format!("app {}/{}", a.tenant_id, a.id)))?;
        let after = json!({"tenant_id": a.tenant_id, "id": a.id, "name": a.name, "limits": a.limits,
            "allowed_models": a.allowed_models, "attribution": a.attribution});
        append(
            &mut tx,
            NewAudit::new(actor, "app.create", format!("app:{}/{}", a.tenant_id, a.id))
                .after(after),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Changes an app's name, allowed models and/or attribution policy
    /// (only what `c` gives; its limits change through `set_limits`),
    /// merged under the row's lock so two changes of different fields both
    /// stay; audited as `app.update` with what it was before. The app as
    /// stored after.
    pub async fn update_app(
        &self,
        actor: &str,
        tenant: &str,
        app: &str,
        c: &AppChange,
    ) -> Result<AppRow> {
        let mut tx = self.pool.begin().await?;
        let before: Option<(String, Option<Vec<String>>, serde_json::Value)> = sqlx::query_as(
            "SELECT name, allowed_models, attribution FROM apps WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
        )
        .bind(tenant)
        .bind(app)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((name, allowed, attribution)) = before else {
            return Err(StoreError::NotFound(format!("app {tenant}/{app}")));
        };
        let after_name = c.name.clone().unwrap_or_else(|| name.clone());
        let after_allowed = c.allowed_models.clone().unwrap_or_else(|| allowed.clone());
        let after_attribution = match &c.attribution {
            Some(p) => serde_json::to_value(p).expect("policy serialises"),
            None => attribution.clone(),
        };
        sqlx::query(
            "UPDATE apps SET name = $3, allowed_models = $4, attribution = $5, version = version + 1
             WHERE tenant_id = $1 AND id = $2",
        )
        .bind(tenant)
        .bind(app)
        .bind(&after_name)
        .bind(&after_allowed)
        .bind(&after_attribution)
        .execute(&mut *tx)
        .await?;
        append(
            &mut tx,
            NewAudit::new(actor, "app.update", format!("app:{tenant}/{app}"))
                .before(
                    json!({"name": name, "allowed_models": allowed, "attribution": attribution}),
                )
                .after(json!({"name": after_name, "allowed_models": after_allowed,
                    "attribution": after_attribution})),
        )
        .await?;
        tx.commit().await?;
        let row = sqlx::query_as::<_, AppCols>(
            "SELECT tenant_id, id, name, limits, allowed_models, attribution FROM apps
             WHERE tenant_id = $1 AND id = $2",
        )
        .bind(tenant)
        .bind(app)
        .fetch_one(&self.pool)
        .await?;
        app_row(row)
    }

    /// Stores a new key by its keyed hash; returns its id.
    pub async fn create_key(&self, actor: &str, k: &NewKey) -> Result<Uuid> {
        let id = Uuid::now_v7();
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO virtual_keys (id, tenant_id, app_id, name, prefix, key_hash, limits, allowed_models, expires_at,
                                       attribution)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(id)
        .bind(&k.tenant_id)
        .bind(&k.app_id)
        .bind(&k.name)
        .bind(&k.prefix)
        .bind(k.key_hash.as_slice())
        .bind(limits_json(&k.limits))
        .bind(&k.allowed_models)
        .bind(k.expires_at)
        .bind(serde_json::to_value(&k.attribution).expect("policy serialises"))
        .execute(&mut *tx)
        .await
        .map_err(conflict("key"))?;
        let after = json!({"id": id, "tenant_id": k.tenant_id, "app_id": k.app_id, "name": k.name,
            "prefix": k.prefix, "limits": k.limits, "allowed_models": k.allowed_models, "expires_at": k.expires_at,
            "attribution": k.attribution});
        append(
            &mut tx,
            NewAudit::new(actor, "key.create", format!("key:{id}")).after(after),
        )
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    /// Stores many keys in one statement (`tollgate-dev load-keys`, the
    /// scale benchmark's catalog): the same rows `create_key` writes, one
    /// audit record for the batch (it names how many and the first and last
    /// id). Returns the ids in input order.
    pub async fn load_keys(&self, actor: &str, keys: &[NewKey]) -> Result<Vec<Uuid>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = keys.iter().map(|_| Uuid::now_v7()).collect();
        macro_rules! col {
            ($f:expr) => {
                keys.iter().map($f).collect::<Vec<_>>()
            };
        }
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO virtual_keys (id, tenant_id, app_id, name, prefix, key_hash, limits, allowed_models, expires_at,
                                       attribution)
             SELECT id, tenant_id, app_id, name, prefix, key_hash, limits,
                    CASE WHEN models IS NULL THEN NULL ELSE ARRAY(SELECT jsonb_array_elements_text(models)) END,
                    expires_at, attribution
             FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::jsonb[],
                         $8::jsonb[], $9::timestamptz[], $10::jsonb[])
                  AS k(id, tenant_id, app_id, name, prefix, key_hash, limits, models, expires_at, attribution)",
        )
        .bind(&ids)
        .bind(col!(|k| k.tenant_id.clone()))
        .bind(col!(|k| k.app_id.clone()))
        .bind(col!(|k| k.name.clone()))
        .bind(col!(|k| k.prefix.clone()))
        .bind(col!(|k| k.key_hash.to_vec()))
        .bind(col!(|k| limits_json(&k.limits)))
        .bind(col!(|k| k.allowed_models.as_ref().map(|m| json!(m))))
        .bind(col!(|k| k.expires_at))
        .bind(col!(|k| serde_json::to_value(&k.attribution).expect("policy serialises")))
        .execute(&mut *tx)
        .await
        .map_err(conflict("key"))?;
        append(
            &mut tx,
            NewAudit::new(actor, "key.load", format!("keys:{}", keys.len()))
                .after(json!({"keys": keys.len(), "first": ids.first(), "last": ids.last()})),
        )
        .await?;
        tx.commit().await?;
        Ok(ids)
    }

    /// Revokes a key, audited as `key.revoke` with which key it was (its
    /// name, tenant, app and prefix) and its state before and after.
    pub async fn revoke_key(&self, actor: &str, id: Uuid) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let row: Option<(String, String, String, String)> = sqlx::query_as(
            "UPDATE virtual_keys SET revoked_at = now(), version = version + 1
             WHERE id = $1 AND revoked_at IS NULL
             RETURNING name, tenant_id, app_id, prefix",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((name, tenant, app, prefix)) = row else {
            return Err(StoreError::NotFound(format!("active key {id}")));
        };
        append(
            &mut tx,
            NewAudit::new(actor, "key.revoke", format!("key:{id}"))
                .before(
                    json!({"name": name, "tenant": tenant, "app": app, "prefix": prefix,
                    "state": "active"}),
                )
                .after(
                    json!({"name": name, "tenant": tenant, "app": app, "prefix": prefix,
                    "state": "revoked"}),
                ),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn create_model(&self, actor: &str, m: &NewModel) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO models (id, kind, upstream_base_url, upstream_model, upstream_api_key_enc,
                input_price_micro_per_mtok, output_price_micro_per_mtok, tokenizer, default_max_output_tokens,
                cap_field, hidden_reasoning, apis)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(&m.id)
        .bind(&m.kind)
        .bind(&m.upstream_base_url)
        .bind(&m.upstream_model)
        .bind(&m.upstream_api_key_enc)
        .bind(m.input_price_micro_per_mtok)
        .bind(m.output_price_micro_per_mtok)
        .bind(&m.tokenizer)
        .bind(m.default_max_output_tokens)
        .bind(m.profile.cap_field.as_str())
        .bind(m.profile.hidden_reasoning)
        .bind(crate::provider::apis_of(&m.profile))
        .execute(&mut *tx)
        .await
        .map_err(conflict(format!("model {}", m.id)))?;
        // The upstream key is never written to the audit trail.
        let after = json!({"id": m.id, "kind": m.kind, "upstream_base_url": m.upstream_base_url,
            "upstream_model": m.upstream_model, "has_upstream_api_key": m.upstream_api_key_enc.is_some(),
            "input_price_micro_per_mtok": m.input_price_micro_per_mtok,
            "output_price_micro_per_mtok": m.output_price_micro_per_mtok,
            "profile": crate::provider::profile_json(&m.profile)});
        append(
            &mut tx,
            NewAudit::new(actor, "model.create", format!("model:{}", m.id)).after(after),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A model's prices (micro-USD per million tokens), audited as
    /// `model.prices` before → after. Requests admitted after the change are
    /// priced by it; what is already booked keeps the cost it was booked at.
    pub async fn set_model_prices(
        &self,
        actor: &str,
        id: &str,
        input_micro_per_mtok: i64,
        output_micro_per_mtok: i64,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let before: (i64, i64) = sqlx::query_as(
            "SELECT input_price_micro_per_mtok, output_price_micro_per_mtok FROM models
             WHERE id = $1 FOR UPDATE",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("model {id}")))?;
        sqlx::query(
            "UPDATE models SET input_price_micro_per_mtok = $2, output_price_micro_per_mtok = $3,
                    updated_at = now()
             WHERE id = $1",
        )
        .bind(id)
        .bind(input_micro_per_mtok)
        .bind(output_micro_per_mtok)
        .execute(&mut *tx)
        .await?;
        let prices = |i: i64, o: i64| json!({"input_price_micro_per_mtok": i, "output_price_micro_per_mtok": o});
        append(
            &mut tx,
            NewAudit::new(actor, "model.prices", format!("model:{id}"))
                .before(prices(before.0, before.1))
                .after(prices(input_micro_per_mtok, output_micro_per_mtok)),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Enables or disables a whole model (each deployment keeps its own
    /// switch), audited as `model.enabled` with what it was; the catalog
    /// listener drops it from (or returns it to) every replica's catalog.
    pub async fn set_model_enabled(&self, actor: &str, id: &str, enabled: bool) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let before: bool =
            sqlx::query_scalar("SELECT enabled FROM models WHERE id = $1 FOR UPDATE")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::NotFound(format!("model {id}")))?;
        sqlx::query("UPDATE models SET enabled = $2, updated_at = now() WHERE id = $1")
            .bind(id)
            .bind(enabled)
            .execute(&mut *tx)
            .await?;
        append(
            &mut tx,
            NewAudit::new(actor, "model.enabled", format!("model:{id}"))
                .before(json!({"enabled": before}))
                .after(json!({"enabled": enabled})),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn tenant_exists(&self, scope: &TenantScope, id: &str) -> Result<bool> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1 AND ($2::text IS NULL OR id = $2))",
        )
        .bind(id)
        .bind(scope.tenant())
        .fetch_one(&self.pool)
        .await?)
    }
}

impl Store {
    pub async fn model_exists(&self, id: &str) -> Result<bool> {
        Ok(
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM models WHERE id = $1)")
                .bind(id)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Points a model at another upstream base URL (audited).
    pub async fn set_model_upstream(&self, actor: &str, id: &str, base_url: &str) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let before: Option<String> =
            sqlx::query_scalar("SELECT upstream_base_url FROM models WHERE id = $1 FOR UPDATE")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
        let before = before.ok_or_else(|| StoreError::NotFound(format!("model {id}")))?;
        if before == base_url {
            return Ok(());
        }
        // A stored key stays only with the origin it was given for.
        let keep_key = domain::secret::key_stays_with(&before, base_url);
        sqlx::query(
            "UPDATE models SET upstream_base_url = $2,
                upstream_api_key_enc = CASE WHEN $3 THEN upstream_api_key_enc END, updated_at = now()
             WHERE id = $1",
        )
        .bind(id)
        .bind(base_url)
        .bind(keep_key)
        .execute(&mut *tx)
        .await?;
        let mut after = json!({"upstream_base_url": base_url});
        if !keep_key {
            after["upstream_api_key"] = json!("dropped: the upstream's origin changed");
        }
        append(
            &mut tx,
            NewAudit::new(actor, "model.upstream", format!("model:{id}"))
                .before(json!({"upstream_base_url": before}))
                .after(after),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Revokes every active key of an app with this name; returns how many.
    pub async fn revoke_keys_named(
        &self,
        actor: &str,
        tenant: &str,
        app: &str,
        name: &str,
    ) -> Result<u64> {
        let mut tx = self.pool.begin().await?;
        let ids: Vec<(Uuid, String)> = sqlx::query_as(
            "UPDATE virtual_keys SET revoked_at = now(), version = version + 1
             WHERE tenant_id = $1 AND app_id = $2 AND name = $3 AND revoked_at IS NULL
             RETURNING id, prefix",
        )
        .bind(tenant)
        .bind(app)
        .bind(name)
        .fetch_all(&mut *tx)
        .await?;
        for (id, prefix) in &ids {
            let who = |state: &str| json!({"name": name, "tenant": tenant, "app": app, "prefix": prefix, "state": state});
            append(
                &mut tx,
                NewAudit::new(actor, "key.revoke", format!("key:{id}"))
                    .before(who("active"))
                    .after(who("revoked"))
                    .reason("replaced"),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(ids.len() as u64)
    }
}

impl Store {
    pub async fn tenant(&self, scope: &TenantScope, id: &str) -> Result<Option<TenantRow>> {
        let r = sqlx::query_as::<_, TenantCols>(
            "SELECT id, name, cost_center, priority, limits, may_borrow, borrow_cap_tokens, allowed_models, clamp_max_tokens,
                    max_queued_requests, max_open_streams
             FROM tenants WHERE id = $1 AND ($2::text IS NULL OR id = $2)",
        )
        .bind(id)
        .bind(scope.tenant())
        .fetch_optional(&self.pool)
        .await?;
        r.map(tenant_row).transpose()
    }

    /// A tenant's row version (see migrations/0023_row_versions.sql).
    pub async fn tenant_version(&self, scope: &TenantScope, id: &str) -> Result<Option<i64>> {
        Ok(sqlx::query_scalar(
            "SELECT version FROM tenants WHERE id = $1 AND ($2::text IS NULL OR id = $2)",
        )
        .bind(id)
        .bind(scope.tenant())
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Writes a tenant's settings (the caller merged the patch onto the row
    /// at version `expected`, `None`: whichever is stored); refused as
    /// `Stale` when the row is at another version by now. Audited with the row before and after, each with its
    /// version. Returns the new version.
    pub async fn update_tenant(
        &self,
        actor: &str,
        t: &TenantRow,
        mut before: serde_json::Value,
        expected: Option<i64>,
    ) -> Result<i64> {
        let mut tx = self.pool.begin().await?;
        let target = format!("tenant:{}", t.id);
        let current: i64 =
            sqlx::query_scalar("SELECT version FROM tenants WHERE id = $1 FOR UPDATE")
                .bind(&t.id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::NotFound(format!("tenant {}", t.id)))?;
        if let Some(expected) = expected.filter(|v| *v != current) {
            return Err(StoreError::Stale {
                what: target,
                expected,
                current,
            });
        }
        bind_tenant(t, sqlx::query(
            "UPDATE tenants SET name = $2, cost_center = $3, priority = $4, limits = $5, may_borrow = $6,
                borrow_cap_tokens = $7, allowed_models = $8, clamp_max_tokens = $9,
                max_queued_requests = $10, max_open_streams = $11, updated_at = now(),
                version = version + 1
             WHERE id = $1",
        ))
        .execute(&mut *tx)
        .await?;
        before["version"] = json!(current);
        let after = json!({"id": t.id, "name": t.name, "cost_center": t.cost_center, "priority": t.priority,
            "limits": t.limits, "may_borrow": t.may_borrow, "borrow_cap_tokens": t.borrow_cap_tokens,
            "allowed_models": t.allowed_models, "clamp_max_tokens": t.clamp_max_tokens,
            "max_queued_requests": t.max_queued_requests, "max_open_streams": t.max_open_streams,
            "version": current + 1});
        append(
            &mut tx,
            NewAudit::new(actor, "tenant.update", target)
                .before(before)
                .after(after),
        )
        .await?;
        tx.commit().await?;
        Ok(current + 1)
    }

    pub async fn app_exists(&self, scope: &TenantScope, tenant: &str, app: &str) -> Result<bool> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM apps WHERE tenant_id = $1 AND id = $2 AND ($3::text IS NULL OR tenant_id = $3))",
        )
        .bind(tenant)
        .bind(app)
        .bind(scope.tenant())
        .fetch_one(&self.pool)
        .await?)
    }

    /// The tenant a key belongs to (to authorize its revocation).
    pub async fn key_tenant(&self, scope: &TenantScope, id: Uuid) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT tenant_id FROM virtual_keys WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)",
        )
        .bind(id)
        .bind(scope.tenant())
        .fetch_optional(&self.pool)
        .await?)
    }
}

/// A tenant row's eleven columns as $1..$11, in the order INSERT and UPDATE use.
fn bind_tenant<'q>(
    t: &'q TenantRow,
    q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    q.bind(&t.id)
        .bind(&t.name)
        .bind(&t.cost_center)
        .bind(&t.priority)
        .bind(limits_json(&t.limits))
        .bind(t.may_borrow)
        .bind(t.borrow_cap_tokens)
        .bind(&t.allowed_models)
        .bind(t.clamp_max_tokens)
        .bind(t.max_queued_requests)
        .bind(t.max_open_streams)
}
