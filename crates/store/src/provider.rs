//! Models' provider profiles (cap field, hidden reasoning, native dialects),
//! stored as three columns of `models`.

use crate::audit::{append, NewAudit};
use crate::{Result, Store, StoreError};
use domain::provider::{CapField, Dialect, ProviderProfile};
use serde_json::json;

/// The profile's columns, for SELECT lists.
pub(crate) const PROFILE_COLUMNS: &str = "cap_field, hidden_reasoning, apis";

/// The profile's columns as stored; [`ProfileCols::profile`] parses them.
#[derive(sqlx::FromRow)]
pub(crate) struct ProfileCols {
    cap_field: String,
    hidden_reasoning: bool,
    apis: Vec<String>,
}

impl ProfileCols {
    pub(crate) fn profile(self) -> Result<ProviderProfile> {
        let cap = self.cap_field;
        Ok(ProviderProfile {
            cap_field: CapField::parse(&cap)
                .ok_or_else(|| StoreError::Corrupt(format!("cap_field {cap:?}")))?,
            hidden_reasoning: self.hidden_reasoning,
            apis: self
                .apis
                .iter()
                .map(|a| Dialect::parse(a).ok_or_else(|| StoreError::Corrupt(format!("api {a:?}"))))
                .collect::<Result<_>>()?,
        })
    }
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
        let before = sqlx::query_as::<_, ProfileCols>(&format!(
            "SELECT {PROFILE_COLUMNS} FROM models WHERE id = $1 FOR UPDATE"
        ))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("model {id}")))?;
        let before = before.profile()?;
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
