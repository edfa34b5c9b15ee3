//! Calls to the provider. The URL comes only from the model's configuration
//! and the key only from the gateway's own store: nothing the client sends
//! can redirect a request or pick its credentials.

use crate::catalog::ModelEntry;
use crate::GatewayConfig;
use domain::request::Endpoint;

pub fn client(cfg: &GatewayConfig) -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(cfg.upstream_connect_timeout)
        .pool_max_idle_per_host(1024)
        .tcp_nodelay(true)
        // Never follow redirects: a provider redirect must not move the call.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("http client")
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

/// Each endpoint's full URL under a model's base URL (see `ModelEntry`).
pub fn endpoint_urls(base_url: &str) -> [Option<reqwest::Url>; 3] {
    let base = base_url.trim_end_matches('/');
    ENDPOINTS.map(|e| reqwest::Url::parse(&format!("{base}/{}", e.path())).ok())
}

pub fn request(
    http: &reqwest::Client,
    model: &ModelEntry,
    endpoint: Endpoint,
    body: Vec<u8>,
    timeout: Option<std::time::Duration>,
) -> reqwest::RequestBuilder {
    let mut rb = match &model.endpoint_urls[endpoint_index(endpoint)] {
        Some(url) => http.post(url.clone()),
        // Unparsable: reqwest reports the error when the request is sent.
        None => http.post(format!("{}/{}", model.base_url, endpoint.path())),
    };
    rb = rb
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(k) = &model.api_key {
        rb = rb.bearer_auth(k.expose());
    }
    if let Some(t) = timeout {
        rb = rb.timeout(t);
    }
    rb
}
