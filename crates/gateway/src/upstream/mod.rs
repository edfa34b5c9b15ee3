//! Calls to the provider. The URL comes only from the model's configuration
//! and the key only from the gateway's own store: nothing the client sends
//! can redirect a request or pick its credentials.
//!
//! https upstreams go through hyper's pooled client directly, not reqwest:
//! reqwest's redirect layer re-parsed every request's URL and its extra
//! layers cost ~8 % of the gateway's CPU at 32 connections
//! (bench/results/2026-11-30-bench.md). Plain-http upstreams keep their own
//! connections per deployment (`http1`). Neither follows redirects.
//!
//! A request whose body is large (a long prompt, above the tokenize pool's
//! threshold) is sent on connections of its own, driven by a runtime of
//! its own whose threads run at the tokenize pool's lower CPU priority
//! (`gateway.tokenize_nice`): writing megabytes to the provider then takes
//! what the short requests leave of the cores, not the async workers'
//! turns (docs/fair.md, "Isolation under long prompts and stream bursts").
//! A short request never rides on a connection the low-priority runtime
//! drives: plain-http ones are never pooled, https ones only in that
//! runtime's own client.

mod deployment;
mod http1;

pub use deployment::{now_ms, Board, Deployment, Live};
pub use http1::{Body, BoxError, Idle};

use crate::GatewayConfig;
use bytes::Bytes;
use domain::provider::Dialect;
use domain::request::Endpoint;
use http::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::{Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::time::Duration;

type Client =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;
pub type Response = http::Response<Body>;

/// The way to the providers.
pub struct Upstream {
    tls: Client,
    tcp: HttpConnector,
    /// Large requests' way: their own runtime (lower priority) and client.
    bulk: Option<(tokio::runtime::Handle, Client)>,
}

impl Upstream {
    pub fn new(cfg: &GatewayConfig) -> Upstream {
        Upstream {
            tls: client(cfg),
            tcp: tcp_connector(cfg),
            bulk: bulk_runtime(cfg.tokenize_nice).map(|rt| (rt, client(cfg))),
        }
    }

    /// Sends `req` to its URL: plain http over `idle`'s connections (the
    /// deployment's own), https over the pooled client; a `large` one on
    /// the low-priority runtime, over a connection of its own.
    pub async fn send(
        &self,
        idle: &std::sync::Arc<Idle>,
        req: Request<Full<Bytes>>,
        large: bool,
    ) -> Result<Response, BoxError> {
        let plain = req.uri().scheme() == Some(&http::uri::Scheme::HTTP);
        match &self.bulk {
            Some((rt, tls)) if large => {
                let (tcp, tls) = (self.tcp.clone(), tls.clone());
                let task = AbortOnDrop(rt.spawn(async move {
                    if plain {
                        http1::send_unpooled(req, &tcp).await
                    } else {
                        // A client of its own: its pooled connections are
                        // all driven by this runtime.
                        Ok(tls.request(req).await?.map(Body::unpooled))
                    }
                }));
                task.await
            }
            _ if plain => http1::send(idle, req, &self.tcp).await,
            _ => Ok(self.tls.request(req).await?.map(Body::unpooled)),
        }
    }
}

/// The large requests' runtime: one thread at `nice` below the workers
/// (Linux; `None` when the priority is not lowered or the runtime cannot
/// start — large requests then go the usual way). One per process, made by
/// the first gateway that asks (a test binary starts many), never dropped
/// (a runtime cannot be dropped from async code).
fn bulk_runtime(nice: i32) -> Option<tokio::runtime::Handle> {
    static BULK: std::sync::OnceLock<Option<tokio::runtime::Runtime>> = std::sync::OnceLock::new();
    if nice <= 0 {
        return None;
    }
    let rt = BULK.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tollgate-bulk")
            .enable_all()
            .on_thread_start(move || crate::sched::lower_priority(nice))
            .build()
            .ok()
    });
    rt.as_ref().map(|rt| rt.handle().clone())
}

/// A spawned send, aborted when its caller stops waiting (a timeout).
struct AbortOnDrop(tokio::task::JoinHandle<Result<Response, BoxError>>);

impl std::future::Future for AbortOnDrop {
    type Output = Result<Response, BoxError>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.unwrap_or_else(|e| Err(e.into())))
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// TCP connections: names resolved, each address tried within the
/// connect timeout, TCP_NODELAY.
fn tcp_connector(cfg: &GatewayConfig) -> HttpConnector {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(cfg.upstream_connect_timeout));
    http.set_nodelay(true);
    http
}

fn client(cfg: &GatewayConfig) -> Client {
    let mut http = tcp_connector(cfg);
    // The TLS layer below decides http or https from the URL's scheme.
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .expect("ring supports the default TLS versions")
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1024)
        .pool_idle_timeout(http1::IDLE_FOR)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(https)
}

const ENDPOINTS: [Endpoint; 3] = [
    Endpoint::ChatCompletions,
    Endpoint::Completions,
    Endpoint::Embeddings,
];

fn endpoint_index(e: Endpoint) -> usize {
    match e {
        Endpoint::ChatCompletions => 0,
        Endpoint::Completions => 1,
        Endpoint::Embeddings => 2,
    }
}

/// Each endpoint's URL under one base URL.
pub type EndpointUrls = [Option<Uri>; ENDPOINTS.len()];

/// Each endpoint's full URL under a deployment's base URL (see
/// `Deployment`); `None` where the base URL is not an absolute http(s) URL.
pub fn endpoint_urls(base_url: &str) -> EndpointUrls {
    let base = base_url.trim_end_matches('/');
    ENDPOINTS.map(|e| {
        let uri: Uri = format!("{base}/{}", e.path()).parse().ok()?;
        matches!(uri.scheme_str(), Some("http" | "https"))
            .then_some(uri)
            .filter(|u| u.host().is_some())
    })
}

/// The request to the provider, or why it cannot be made.
pub fn request(
    deployment: &Deployment,
    endpoint: Endpoint,
    body: Vec<u8>,
) -> Result<Request<Full<Bytes>>, &'static str> {
    let uri = deployment.endpoint_urls[endpoint_index(endpoint)]
        .clone()
        .ok_or("the model's upstream URL is not a valid http(s) URL")?;
    let mut rb = Request::post(uri)
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .header(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
    if let Some(k) = &deployment.api_key {
        let v = secret_header(format!("Bearer {}", k.expose()))
            .ok_or("the model's upstream API key is not a valid header value")?;
        rb = rb.header(AUTHORIZATION, v);
    }
    rb.body(Full::new(Bytes::from(body)))
        .map_err(|_| "the upstream request could not be built")
}

/// The active health probe of a deployment: `GET {base}/models`.
pub fn probe(d: &Deployment) -> Option<Request<Full<Bytes>>> {
    let uri: Uri = format!("{}/models", d.base_url).parse().ok()?;
    let mut rb = Request::get(uri).header(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
    if let Some(k) = &d.api_key {
        rb = rb.header(
            AUTHORIZATION,
            secret_header(format!("Bearer {}", k.expose()))?,
        );
    }
    rb.body(Full::new(Bytes::new())).ok()
}

/// The request to a provider's native endpoint of `dialect` (`responses`
/// or `messages` under the model's base URL). Anthropic's API reads its
/// key from `x-api-key` and wants `anthropic-version`; both are sent.
pub fn native_request(
    deployment: &Deployment,
    dialect: Dialect,
    body: Vec<u8>,
) -> Result<Request<Full<Bytes>>, &'static str> {
    let uri: Uri = format!("{}/{}", deployment.base_url, dialect.as_str())
        .parse()
        .ok()
        .filter(|u: &Uri| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some())
        .ok_or("the deployment's upstream URL is not a valid http(s) URL")?;
    let mut rb = Request::post(uri)
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .header(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
    if let Some(k) = &deployment.api_key {
        let invalid = "the deployment's upstream API key is not a valid header value";
        let v = secret_header(format!("Bearer {}", k.expose())).ok_or(invalid)?;
        rb = rb.header(AUTHORIZATION, v);
        if dialect == Dialect::Messages {
            let v = secret_header(k.expose().to_string()).ok_or(invalid)?;
            rb = rb.header("x-api-key", v);
        }
    }
    if dialect == Dialect::Messages {
        rb = rb.header("anthropic-version", HeaderValue::from_static("2023-06-01"));
    }
    rb.body(Full::new(Bytes::from(body)))
        .map_err(|_| "the upstream request could not be built")
}

/// A header carrying the provider's key, marked sensitive (never shown in
/// debug output, not indexed by HPACK); None if it is not a valid value.
fn secret_header(v: String) -> Option<HeaderValue> {
    let mut v = HeaderValue::try_from(v).ok()?;
    v.set_sensitive(true);
    Some(v)
}

const USER_AGENT_VALUE: &str = concat!("tollgate/", env!("CARGO_PKG_VERSION"));

/// A refusal's body, at most `limit` bytes (a provider's error text is
/// short; anything longer is cut, never buffered whole).
pub async fn error_text(resp: Response, limit: usize, within: Duration) -> String {
    let body = Limited::new(resp.into_body(), limit);
    match tokio::time::timeout(within, body.collect()).await {
        Ok(Ok(b)) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        _ => String::new(),
    }
}

/// An upstream error's text, its sources included, never the URL (hyper's
/// errors do not carry one).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        text.push_str(": ");
        text.push_str(&s.to_string());
        src = s.source();
    }
    text
}
