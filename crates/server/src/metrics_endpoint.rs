//! `/metrics`: every tenant's tokens and costs, so never public by default.
//! On the main listener it answers only `Authorization: Bearer
//! <metrics.token>` (404 without a configured token, 401 with a wrong or
//! missing one); `metrics.listen` serves it on a listener of its own,
//! meant to be bound where only the scraper reaches.

use anyhow::Context;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

/// The process-wide Prometheus recorder (installed once, however many
/// servers a test process runs).
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let buckets = [
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0, 2.5, 5.0, 10.0, 30.0,
            ];
            PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)
                .expect("valid buckets")
                .install_recorder()
                .expect("one recorder per process")
        })
        .clone()
}

/// Constant-time equality (only the length shows).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn answer(token: Option<&str>, headers: &HeaderMap) -> Response {
    let Some(token) = token else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !same(presented.as_bytes(), token.as_bytes()) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
        )
            .into_response();
    }
    metrics_handle().render().into_response()
}

/// The main listener's `/metrics`.
pub fn on_main_listener(token: Option<String>) -> Router {
    let token: Arc<Option<String>> = Arc::new(token);
    Router::new().route(
        "/metrics",
        get(move |headers: HeaderMap| {
            let token = token.clone();
            async move { answer(token.as_deref(), &headers) }
        }),
    )
}

/// `/metrics` alone on `at`, unauthenticated; returns the bound address.
pub async fn serve_own_listener(at: &str) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(at)
        .await
        .with_context(|| format!("cannot listen on metrics.listen = {at}"))?;
    let addr = listener.local_addr()?;
    let app = Router::new().route(
        "/metrics",
        get(|| std::future::ready(metrics_handle().render())),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics listener stopped");
        }
    });
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_configured_token_reads_metrics() {
        let mut h = HeaderMap::new();
        assert_eq!(answer(None, &h).status(), StatusCode::NOT_FOUND);
        assert_eq!(answer(Some("t0k"), &h).status(), StatusCode::UNAUTHORIZED);
        h.insert(header::AUTHORIZATION, "Bearer t0x".parse().unwrap());
        assert_eq!(answer(Some("t0k"), &h).status(), StatusCode::UNAUTHORIZED);
        h.insert(header::AUTHORIZATION, "Bearer t0k".parse().unwrap());
        assert_eq!(answer(Some("t0k"), &h).status(), StatusCode::OK);
        assert!(!same(b"ab", b"abc") && same(b"abc", b"abc"));
    }
}
