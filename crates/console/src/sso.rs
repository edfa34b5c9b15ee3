//! Single sign-on with OpenID Connect, through the `openidconnect` crate
//! (no hand-rolled token checks): discovery of the provider, the
//! authorization code flow with PKCE (S256), `state` and `nonce`, and the
//! ID token's signature (the provider's JWKS), issuer, audience, expiry and
//! nonce checked by the crate. The discovery document and its keys are
//! kept for ten minutes, and read again at once when an ID token's
//! signature does not verify against them (the provider rotated its keys).
//!
//! The role and tenant come from the token's claims through the operator's
//! mapping (`domain::sso::map_role`); the person is found or created by the
//! store (`Store::sso_sign_in`), audited.

use domain::roles::Role;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken,
    EndpointMaybeSet, EndpointNotSet, EndpointSet, IssuerUrl, Nonce, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, Scope, TokenResponse,
};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The operator's settings (config `auth.oidc`).
#[derive(Clone, Debug)]
pub struct SsoSettings {
    pub issuer_url: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    pub redirect_url: String,
    /// Besides `openid`.
    pub scopes: Vec<String>,
    pub groups_claim: String,
    pub role_claim: Option<String>,
    pub tenant_claim: Option<String>,
    /// Group → grant (`domain::sso::RoleGrant`).
    pub groups: Vec<(String, String)>,
}

type Oidc = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// How long a discovery document (and its keys) is trusted.
const FRESH_FOR: Duration = Duration::from_secs(600);
/// How long a sign-in may take at the provider.
pub const PENDING_SECS: i64 = 600;

pub struct Sso {
    settings: SsoSettings,
    http: openidconnect::reqwest::Client,
    provider: tokio::sync::RwLock<Option<(CoreProviderMetadata, Instant)>>,
}

/// What the browser keeps between the start and the callback, sealed in
/// a cookie (encrypted and authenticated: `domain::secret`).
#[derive(Serialize, Deserialize)]
pub struct Pending {
    pub state: String,
    nonce: String,
    verifier: String,
    /// Unix seconds after which the callback is refused.
    pub expires: i64,
}

impl Pending {
    /// The callback's `state` is the one this sign-in was started with: the
    /// callback belongs to a flow this server began for this browser (only
    /// such a callback is a sign-in attempt worth an audit row).
    pub fn started(&self, state: &str) -> bool {
        same(state, &self.state)
    }
}

/// Who the provider signed in, and what the mapping gives them.
#[derive(Debug)]
pub struct SignedIn {
    pub issuer: String,
    pub subject: String,
    pub email: String,
    pub email_verified: bool,
    pub role: Role,
    pub tenant: Option<String>,
    /// The groups the token listed (for the audit of a refusal).
    pub groups: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SsoError {
    /// The provider cannot be reached or answers nonsense.
    #[error("identity provider: {0}")]
    Provider(String),
    /// The callback or the token does not check out (state, nonce,
    /// signature, audience, expiry).
    #[error("sign-in refused: {0}")]
    Refused(String),
    /// Signed in at the provider, but the mapping gives no role.
    #[error("no role for {email} (groups {groups:?})")]
    NoRole { email: String, groups: Vec<String> },
}

/// Constant-time equality (only the length shows).
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Sso {
    pub fn new(settings: SsoSettings) -> Result<Sso, SsoError> {
        let http = openidconnect::reqwest::ClientBuilder::new()
            // Following redirects would open the token call to SSRF.
            .redirect(openidconnect::reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| SsoError::Provider(e.to_string()))?;
        Ok(Sso {
            settings,
            http,
            provider: tokio::sync::RwLock::new(None),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.settings.issuer_url
    }

    /// The provider's discovery document and keys: the kept copy while
    /// fresh (unless `reread`), else read again.
    async fn metadata(&self, reread: bool) -> Result<CoreProviderMetadata, SsoError> {
        if !reread {
            if let Some((md, at)) = self.provider.read().await.as_ref() {
                if at.elapsed() < FRESH_FOR {
                    return Ok(md.clone());
                }
            }
        }
        let issuer = IssuerUrl::new(self.settings.issuer_url.clone())
            .map_err(|e| SsoError::Provider(e.to_string()))?;
        let md = CoreProviderMetadata::discover_async(issuer, &self.http)
            .await
            .map_err(|e| SsoError::Provider(format!("discovery: {e}")))?;
        *self.provider.write().await = Some((md.clone(), Instant::now()));
        Ok(md)
    }

    fn client(&self, md: CoreProviderMetadata) -> Result<Oidc, SsoError> {
        let redirect = RedirectUrl::new(self.settings.redirect_url.clone())
            .map_err(|e| SsoError::Provider(format!("redirect_url: {e}")))?;
        Ok(CoreClient::from_provider_metadata(
            md,
            ClientId::new(self.settings.client_id.clone()),
            self.settings.client_secret.clone().map(ClientSecret::new),
        )
        .set_redirect_uri(redirect))
    }

    /// Where to send the browser, and what it must bring back.
    pub async fn start(&self, now: i64) -> Result<(String, Pending), SsoError> {
        let client = self.client(self.metadata(false).await?)?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut req = client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for s in &self.settings.scopes {
            req = req.add_scope(Scope::new(s.clone()));
        }
        let (url, state, nonce) = req.set_pkce_challenge(challenge).url();
        Ok((
            url.to_string(),
            Pending {
                state: state.secret().clone(),
                nonce: nonce.secret().clone(),
                verifier: verifier.secret().clone(),
                expires: now + PENDING_SECS,
            },
        ))
    }

    /// The provider's answer (`code`, `state`) checked against what the
    /// browser brought back, the code exchanged (with the PKCE verifier)
    /// and the ID token verified; then the mapping.
    pub async fn finish(
        &self,
        pending: Pending,
        code: &str,
        state: &str,
        now: i64,
    ) -> Result<SignedIn, SsoError> {
        if now > pending.expires {
            return Err(SsoError::Refused("the sign-in took too long".into()));
        }
        if !same(state, &pending.state) {
            return Err(SsoError::Refused("state does not match".into()));
        }
        let client = self.client(self.metadata(false).await?)?;
        let tokens = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| SsoError::Provider(format!("token endpoint: {e}")))?
            .set_pkce_verifier(PkceCodeVerifier::new(pending.verifier))
            .request_async(&self.http)
            .await
            .map_err(|e| SsoError::Refused(format!("code exchange: {e}")))?;
        let id_token = tokens
            .id_token()
            .ok_or_else(|| SsoError::Refused("no ID token".into()))?;
        let nonce = Nonce::new(pending.nonce);
        let subject = match id_token.claims(&client.id_token_verifier(), &nonce) {
            Ok(c) => c.subject().as_str().to_string(),
            // Signed with a key we do not have (yet): the provider rotated
            // its keys. Read them again, once.
            Err(ClaimsVerificationError::SignatureVerification(_)) => {
                let fresh = self.client(self.metadata(true).await?)?;
                let verifier = fresh.id_token_verifier();
                let claims = id_token
                    .claims(&verifier, &nonce)
                    .map_err(|e| SsoError::Refused(format!("ID token: {e}")))?;
                claims.subject().as_str().to_string()
            }
            Err(e) => return Err(SsoError::Refused(format!("ID token: {e}"))),
        };
        // The signature over these bytes was verified just above: the
        // payload's other claims (groups, role, tenant) are read from it.
        let claims = payload(&id_token.to_string())
            .ok_or_else(|| SsoError::Refused("unreadable ID token".into()))?;
        self.map(subject, &claims)
    }

    fn map(&self, subject: String, claims: &serde_json::Value) -> Result<SignedIn, SsoError> {
        let s = &self.settings;
        let text = |name: &str| {
            claims
                .get(name)
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let email = text("email")
            .filter(|e| e.contains('@'))
            .ok_or_else(|| SsoError::Refused("the ID token carries no email".into()))?;
        let email_verified = claims
            .get("email_verified")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        let groups: Vec<String> = match claims.get(&s.groups_claim) {
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .filter_map(|g| g.as_str().map(str::to_string))
                .collect(),
            Some(serde_json::Value::String(g)) => vec![g.clone()],
            _ => Vec::new(),
        };
        let role_claim = s.role_claim.as_deref().and_then(text);
        let tenant_claim = s.tenant_claim.as_deref().and_then(text);
        let Some((role, tenant)) = domain::sso::map_role(
            &groups,
            role_claim.as_deref(),
            tenant_claim.as_deref(),
            &s.groups,
        ) else {
            return Err(SsoError::NoRole { email, groups });
        };
        Ok(SignedIn {
            issuer: s.issuer_url.clone(),
            subject,
            email,
            email_verified,
            role,
            tenant,
            groups,
        })
    }
}

/// The JSON payload of a compact JWS (its signature checked elsewhere).
fn payload(jwt: &str) -> Option<serde_json::Value> {
    use base64::Engine;
    let part = jwt.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sso() -> Sso {
        Sso::new(SsoSettings {
            issuer_url: "http://idp".into(),
            client_id: "c".into(),
            client_secret: None,
            redirect_url: "http://console/console/sso/callback".into(),
            scopes: vec![],
            groups_claim: "groups".into(),
            role_claim: None,
            tenant_claim: Some("dept".into()),
            groups: vec![
                ("sales-admins".into(), "tenant_admin:sales".into()),
                ("dept-admins".into(), "tenant_admin".into()),
            ],
        })
        .unwrap()
    }

    #[test]
    fn claims_map_through_the_groups() {
        let s = sso();
        let c = serde_json::json!({"email": "a@x.io", "groups": ["staff", "sales-admins"]});
        let who = s.map("sub-1".into(), &c).unwrap();
        assert_eq!(
            (who.role, who.tenant.as_deref()),
            (Role::TenantAdmin, Some("sales"))
        );
        assert!(!who.email_verified);
        let c = serde_json::json!({"email": "a@x.io", "groups": "dept-admins", "dept": "research"});
        assert_eq!(
            s.map("s".into(), &c).unwrap().tenant.as_deref(),
            Some("research")
        );
        let c = serde_json::json!({"email": "a@x.io", "groups": ["staff"]});
        assert!(matches!(
            s.map("s".into(), &c),
            Err(SsoError::NoRole { .. })
        ));
        let c = serde_json::json!({"groups": ["sales-admins"]});
        assert!(matches!(s.map("s".into(), &c), Err(SsoError::Refused(_))));
    }

    #[test]
    fn payloads_decode() {
        use base64::Engine;
        let p = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"x"}"#);
        assert_eq!(payload(&format!("h.{p}.s")).unwrap()["sub"], "x");
        assert!(payload("garbage").is_none());
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("ab", "abc"));
    }
}
