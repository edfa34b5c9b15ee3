//! Models' provider profiles (cap field, hidden reasoning, native dialects),
//! stored as three columns of `models`.

use crate::audit::{append, NewAudit};
use crate::{Result, Store, StoreError};
use domain::provider::{CapField, Dialect, ProviderProfile};
use serde_json::json;
use sqlx::Row;

/// The profile's columns, for SELECT lists.
pub(crate) const PROFILE_COLUMNS: &str = "cap_field, hidden_reasoning, apis";

pub(crate) fn profile_of(r: &sqlx::postgres::PgRow) -> Result<ProviderProfile> {
    let cap: String = r.get("cap_field");
    let apis: Vec<String> = r.get("apis");
    Ok(ProviderProfile {
        cap_field: CapField::parse(&cap)
            .ok_or_else(|| StoreError::Corrupt(format!("cap_field {cap:?}")))?,
        hidden_reasoning: r.get("hidden_reasoning"),
        apis: apis
            .iter()
            .map(|a| Dialect::parse(a).ok_or_else(|| StoreError::Corrupt(format!("api {a:?}"))))
            .collect::<Result<_>>()?,
    })
}

pub(crate) fn apis_of(p: &ProviderProfile) -> Vec<String> {
    p.apis.iter().map(|a| a.as_str().to_string()).collect()
}

pub(crate) fn profile_json(p: &ProviderProfile) -> serde_json::Value {
    json!({"cap_field": p.cap_field.as_str(), "hidden_reasoning": p.hidden_reasoning,
        "apis": apis_of(p)})
}

impl Store {
    /// Sets a model's provider profile (audited, before and after).
    pub async fn set_model_profile(
        &self,
        actor: &str,
        id: &str,
        profile: &ProviderProfile,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let before = sqlx::query(&format!(
            "SELECT {PROFILE_COLUMNS} FROM models WHERE id = $1 FOR UPDATE"
        ))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("model {id}")))?;
        let before = profile_of(&before)?;
        sqlx::query(
            "UPDATE models SET cap_field = $2, hidden_reasoning = $3, apis = $4, updated_at = now()
             WHERE id = $1",
        )
        .bind(id)
        .bind(profile.cap_field.as_str())
        .bind(profile.hidden_reasoning)
        .bind(apis_of(profile))
        .execute(&mut *tx)
        .await?;
        append(
            &mut tx,
            NewAudit::new(actor, "model.profile", format!("model:{id}"))
                .before(profile_json(&before))
                .after(profile_json(profile)),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
