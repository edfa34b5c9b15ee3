//! A request's tags and end user, read at the edge (headers and body) by
//! the one rule in `domain::attribution`, refused in the client's dialect
//! when malformed, and carried to the usage event.

use crate::errors::ApiError;
use crate::key_index::KeyEntry;
use axum::http::{HeaderMap, HeaderName};
use domain::attribution::{self, Attribution, Policy, TagError};
use serde_json::Value;

// Names made once: a lookup by `&str` parses the name on every request.
pub static TAGS_HEADER: HeaderName = HeaderName::from_static("x-tollgate-tags");
pub static END_USER_HEADER: HeaderName = HeaderName::from_static("x-tollgate-end-user");
/// Codex's session, sent on every request of a session.
pub static SESSION_HEADERS: [HeaderName; 2] = [
    HeaderName::from_static("session_id"),
    HeaderName::from_static("session-id"),
];

/// A key without a policy of its own: the app's applies alone.
static NO_POLICY: Policy = Policy {
    default_tags: std::collections::BTreeMap::new(),
    required_tags: Vec::new(),
    end_user_limits: None,
};

/// The request's attribution, or the 400 naming the bad tag. `body` is the
/// client's body as sent (before any dialect translation).
pub fn read(headers: &HeaderMap, body: &Value, key: &KeyEntry) -> Result<Attribution, ApiError> {
    let text = |name: &HeaderName| -> Result<Option<&str>, TagError> {
        match headers.get(name) {
            None => Ok(None),
            Some(v) => v.to_str().map(Some).map_err(|_| {
                if *name == END_USER_HEADER {
                    TagError::BadEndUser
                } else {
                    TagError::Malformed {
                        tag: "(not visible ASCII)".into(),
                    }
                }
            }),
        }
    };
    let resolved = text(&TAGS_HEADER).and_then(|tags| {
        let user = text(&END_USER_HEADER)?;
        let own = key.attribution.as_deref().unwrap_or(&NO_POLICY);
        attribution::resolve(&key.app.attribution, own, tags, user, body)
    });
    let mut a = resolved.map_err(|e| refusal(&e))?;
    if a.session.is_none() {
        a.session = SESSION_HEADERS
            .iter()
            .find_map(|h| headers.get(h)?.to_str().ok())
            .and_then(attribution::attribute);
    }
    Ok(a)
}

/// The end user's scope of a hold: when the request names an end user and
/// its app limits end users.
pub fn end_user_scope<'a>(
    key: &'a KeyEntry,
    end_user: Option<&'a str>,
) -> Option<quota::EndUserScope<'a>> {
    let limits = key.app.attribution.end_user_limits.as_ref()?;
    Some(quota::EndUserScope {
        id: end_user?,
        limits,
    })
}

fn refusal(e: &TagError) -> ApiError {
    ApiError::new(e.reason(), e.message()).param(e.param())
}

#[cfg(test)]
mod bench {
    use super::*;
    use domain::attribution::EndUserLimits;
    use serde_json::json;
    use std::time::Instant;

    /// The CPU tags and an end user add to a request: the headers and the
    /// body's metadata read and validated and merged over the app's
    /// defaults, the end user's hold arguments and Redis key names built
    /// (its digest included), and the tags written as the ledger stores
    /// them. A timing, not a check:
    /// `cargo test -p tollgate-gateway --release --lib attribution_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "a timing, run by hand"]
    fn attribution_cost() {
        let mut headers = HeaderMap::new();
        headers.insert(
            TAGS_HEADER.clone(),
            "project=apollo,env=prod,team=search".parse().unwrap(),
        );
        headers.insert(END_USER_HEADER.clone(), "customer-4242".parse().unwrap());
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"feature": "summary"}});
        let app = Policy {
            default_tags: [("cc".to_string(), "CC-1".to_string())].into(),
            required_tags: vec!["project".into()],
            end_user_limits: Some(EndUserLimits {
                rpm: Some(60),
                monthly_tokens: Some(1_000_000),
                ..Default::default()
            }),
        };
        let keys = quota::KeySpace::new("tg");
        let per_request = || {
            let tags = headers.get(&TAGS_HEADER).and_then(|v| v.to_str().ok());
            let user = headers.get(&END_USER_HEADER).and_then(|v| v.to_str().ok());
            let a = attribution::resolve(&app, &NO_POLICY, tags, user, &body).unwrap();
            let limits = app.end_user_limits.as_ref().unwrap();
            let u = a.end_user.as_deref().unwrap();
            let digest = attribution::end_user_digest(u);
            let args = limits.hold_args();
            let k = (
                keys.end_user_month("t", "a", &digest, "2026-12"),
                keys.end_user_rates("t", "a", &digest),
                keys.end_users_seen("t", "a"),
            );
            let stored = attribution::tags_json(&a.tags);
            std::hint::black_box((a, args, k, stored));
        };
        for _ in 0..10_000 {
            per_request();
        }
        let n = 200_000u32;
        let t0 = Instant::now();
        for _ in 0..n {
            per_request();
        }
        let ns = t0.elapsed().as_nanos() as f64 / f64::from(n);
        println!("attribution per request (4 tags, an end user with limits): {ns:.0} ns");
    }
}
