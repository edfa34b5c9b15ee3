//! What a catalog notification says changed, and the narrow reads a replica
//! makes to apply it (payloads are written by the triggers of
//! `migrations/0011_scale.sql`).

use crate::catalog::{key_row, KeyCols, KeyRow, KEY_COLS, KEY_SECRETS};
use crate::{Result, Store};

/// One notification on the config channel.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CatalogChange {
    /// The key with this keyed hash was created, changed or revoked.
    Key([u8; 32]),
    /// A tenant, one of its apps, grants or borrows.
    Tenant(String),
    /// A model or a pool guarantee.
    Models,
    /// Anything else, including a payload this version does not know (a
    /// table a later migration added): everything but the keys reloads.
    Config,
}

impl CatalogChange {
    pub fn parse(payload: &str) -> CatalogChange {
        if let Some(hex) = payload.strip_prefix("key:") {
            if let Some(h) = decode_hash(hex) {
                return CatalogChange::Key(h);
            }
        } else if let Some(id) = payload.strip_prefix("tenant:") {
            return CatalogChange::Tenant(id.to_string());
        } else if payload == "models" {
            return CatalogChange::Models;
        }
        CatalogChange::Config
    }
}

fn decode_hash(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A key's row with whether it was revoked.
#[derive(sqlx::FromRow)]
struct Found {
    #[sqlx(flatten)]
    key: KeyCols,
    revoked: bool,
}

impl Store {
    /// The key with this keyed hash (its current secret, or its previous
    /// one after a rotation: see [`KeyRow::rotated_until`]), usable or not,
    /// and whether it was revoked (indexed point queries: the gateway's miss
    /// lookup; it tells usable from revoked, expired or rotated itself).
    pub async fn key_by_hash(&self, hash: &[u8; 32]) -> Result<Option<(KeyRow, bool)>> {
        let row = sqlx::query_as::<_, Found>(&format!(
            "SELECT {KEY_COLS}, revoked_at IS NOT NULL AS revoked FROM {KEY_SECRETS} WHERE key_hash = $1 LIMIT 1"
        ))
        .bind(hash.as_slice())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Ok((key_row(r.key)?, r.revoked))).transpose()
    }

    /// Every key among these keyed hashes as Postgres has it now (its
    /// current secret, or its previous one: see [`KeyRow::rotated_until`]),
    /// usable or not, each with whether it was revoked; a hash missing from
    /// the answer is no secret of any key (any more). Backed by the unique
    /// indexes on `key_hash` and `previous_key_hash`.
    pub async fn keys_by_hash(&self, hashes: &[[u8; 32]]) -> Result<Vec<(KeyRow, bool)>> {
        let hashes: Vec<&[u8]> = hashes.iter().map(|h| h.as_slice()).collect();
        sqlx::query_as::<_, Found>(&format!(
            "SELECT {KEY_COLS}, revoked_at IS NOT NULL AS revoked
             FROM {KEY_SECRETS} WHERE key_hash = ANY($1)"
        ))
        .bind(hashes)
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(|r| Ok((key_row(r.key)?, r.revoked)))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse_to_what_changed() {
        let hex = "ab".repeat(32);
        assert_eq!(
            CatalogChange::parse(&format!("key:{hex}")),
            CatalogChange::Key([0xab; 32])
        );
        assert_eq!(
            CatalogChange::parse("tenant:acme"),
            CatalogChange::Tenant("acme".into())
        );
        assert_eq!(CatalogChange::parse("models"), CatalogChange::Models);
        // The statement-level payload of older triggers is a table name.
        assert_eq!(CatalogChange::parse("borrow_pool"), CatalogChange::Config);
        // A malformed hash is not silently some other key.
        assert_eq!(CatalogChange::parse("key:abc"), CatalogChange::Config);
        assert_eq!(
            CatalogChange::parse(&format!("key:{}", "zz".repeat(32))),
            CatalogChange::Config
        );
    }
}
