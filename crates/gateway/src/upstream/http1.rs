//! Plain-http upstreams (a self-hosted vLLM, an in-house proxy): HTTP/1.1
//! keep-alive connections kept per deployment, without hyper's pooled
//! client. That client keys its pool by scheme and authority, hashed byte
//! by byte with SipHash at every checkout and return, starts a task per
//! request to return the connection once its answer is read, and derives
//! the Host header and the origin-form URI again for every request
//! (bench/results/2026-12-03-plain-http-upstreams-without-the-pooled-client.md). Here a
//! deployment's idle connections are a short list behind its own lock, and
//! a connection goes back to it when the answer's body has been read to its
//! end. https upstreams keep hyper's client (TLS, HTTP/2 by ALPN).

use bytes::Bytes;
use http::header::HOST;
use http::uri::{Authority, Uri};
use http::{HeaderValue, Request};
use http_body_util::Full;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::client::legacy::connect::HttpConnector;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tower::ServiceExt;

type Sender = SendRequest<Full<Bytes>>;
/// What [`Idle::take`] gives: a connection if one is idle, the generation
/// of connections to the authority, and the Host header of requests to it.
type Taken = (Option<Sender>, u64, HeaderValue);
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Idle connections are closed after this (as browsers and reqwest do).
pub const IDLE_FOR: Duration = Duration::from_secs(90);
/// At most this many idle connections per deployment; more are closed.
const MAX_IDLE: usize = 1024;

/// One deployment's idle connections, the most recently used last.
#[derive(Default)]
pub struct Idle {
    inner: Mutex<Conns>,
}

impl std::fmt::Debug for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idle").field("conns", &self.len()).finish()
    }
}

#[derive(Default)]
struct Conns {
    /// Where these connections go, and the Host header of requests there
    /// (made once, when the place is set, not for every request): a
    /// deployment whose URL changed drops its connections to the old place.
    to: Option<(Authority, HeaderValue)>,
    /// Counts changes of `to`: a connection opened before the last change
    /// is not kept.
    generation: u64,
    idle: VecDeque<(Sender, Instant)>,
}

impl Conns {
    /// Closes the connections idle for longer than `IDLE_FOR` (the oldest
    /// are at the front).
    fn close_expired(&mut self, now: Instant) {
        while self
            .idle
            .front()
            .is_some_and(|(_, since)| now.duration_since(*since) > IDLE_FOR)
        {
            self.idle.pop_front();
        }
    }
}

impl Idle {
    fn lock(&self) -> std::sync::MutexGuard<'_, Conns> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Idle connections held now.
    pub fn len(&self) -> usize {
        self.lock().idle.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most recently used connection to `to` that is still open and
    /// was idle for at most `IDLE_FOR` (older ones are closed), the
    /// generation a connection to `to` belongs to, and the Host header of
    /// requests to `to`.
    fn take(&self, to: &Authority) -> Result<Taken, http::header::InvalidHeaderValue> {
        let now = Instant::now();
        let mut c = self.lock();
        let host = match &c.to {
            Some((a, h)) if a == to => h.clone(),
            _ => {
                let h = host_header(to)?;
                c.idle.clear();
                c.to = Some((to.clone(), h.clone()));
                c.generation += 1;
                return Ok((None, c.generation, h));
            }
        };
        c.close_expired(now);
        while let Some((tx, _)) = c.idle.pop_back() {
            if !tx.is_closed() {
                return Ok((Some(tx), c.generation, host));
            }
        }
        Ok((None, c.generation, host))
    }

    /// Keeps `tx`, a connection of `generation` whose last answer was read
    /// whole, and closes those idle for longer than `IDLE_FOR`.
    fn put(&self, tx: Sender, generation: u64) {
        if tx.is_closed() {
            return;
        }
        let now = Instant::now();
        let mut c = self.lock();
        if c.generation != generation {
            return;
        }
        c.close_expired(now);
        if c.idle.len() < MAX_IDLE {
            c.idle.push_back((tx, now));
        }
    }
}

/// An upstream answer's body. A pooled connection goes back to its
/// deployment's idle list when the body has been read to its end; a body
/// dropped before its end closes the connection (hyper does).
pub struct Body {
    inner: Incoming,
    back: Option<Return>,
}

struct Return {
    tx: Sender,
    idle: Arc<Idle>,
    generation: u64,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("pooled", &self.back.is_some())
            .finish_non_exhaustive()
    }
}

impl Body {
    /// A body whose connection is not ours to return (hyper's client).
    pub fn unpooled(inner: Incoming) -> Body {
        Body { inner, back: None }
    }
}

impl HttpBody for Body {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            if let Some(r) = this.back.take() {
                r.idle.put(r.tx, r.generation);
            }
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Sends `req` (an absolute `http://` URI) over one of `idle`'s
/// connections, or a new one made by `tcp`. A request a reused connection
/// could not start (the upstream closed it meanwhile) goes again on the
/// next connection; one that may have reached the upstream never does.
pub async fn send(
    idle: &Arc<Idle>,
    mut req: Request<Full<Bytes>>,
    tcp: &HttpConnector,
) -> Result<http::Response<Body>, BoxError> {
    let (url, to) = origin_form(&mut req)?;
    loop {
        let (pooled, generation, host) = idle.take(&to)?;
        req.headers_mut().insert(HOST, host);
        let (mut tx, reused) = match pooled {
            Some(tx) => (tx, true),
            None => (connect(tcp, &url).await?, false),
        };
        // A new connection takes its first request before its driver has
        // run; a reused one may still be finishing its last answer.
        if reused && tx.ready().await.is_err() {
            continue;
        }
        match tx.try_send_request(req).await {
            Ok(resp) => {
                let back = Return {
                    tx,
                    idle: idle.clone(),
                    generation,
                };
                return Ok(resp.map(|inner| Body {
                    inner,
                    back: Some(back),
                }));
            }
            Err(mut e) => match e.take_message() {
                Some(unsent) if reused => req = unsent,
                _ => return Err(e.into_error().into()),
            },
        }
    }
}

/// Sends `req` (an absolute `http://` URI) over a new connection of its
/// own, closed after its answer (never pooled). Its driver runs on the
/// caller's runtime.
pub async fn send_unpooled(
    mut req: Request<Full<Bytes>>,
    tcp: &HttpConnector,
) -> Result<http::Response<Body>, BoxError> {
    let (url, to) = origin_form(&mut req)?;
    req.headers_mut().insert(HOST, host_header(&to)?);
    let mut tx = connect(tcp, &url).await?;
    let resp = tx.send_request(req).await?;
    Ok(resp.map(|inner| Body { inner, back: None }))
}

/// `req`'s absolute URI and its authority, the request left with the path
/// alone (HTTP/1.1's origin form).
fn origin_form(req: &mut Request<Full<Bytes>>) -> Result<(Uri, Authority), BoxError> {
    let url = req.uri().clone();
    let to = url
        .authority()
        .cloned()
        .ok_or("the upstream URL has no host")?;
    let path = url
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    *req.uri_mut() = Uri::from(path);
    Ok((url, to))
}

/// The Host header of a request to `to`: its host and any port other than
/// http's 80 — never the URL's user information.
fn host_header(to: &Authority) -> Result<HeaderValue, http::header::InvalidHeaderValue> {
    match to.port_u16() {
        Some(port) if port != 80 => HeaderValue::from_str(&format!("{}:{port}", to.host())),
        _ => HeaderValue::from_str(to.host()),
    }
}

/// A new connection to `url`'s host, its driver running on the runtime.
/// `tcp` (hyper's connector, as the https client's) resolves the name and
/// tries each address within the connect timeout, with TCP_NODELAY.
async fn connect(tcp: &HttpConnector, url: &Uri) -> Result<Sender, BoxError> {
    let io = tcp.clone().oneshot(url.clone()).await?;
    let (tx, conn) = http1::handshake(io).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "upstream connection ended");
        }
    });
    Ok(tx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// How the test upstream treats a connection after each answer.
    #[derive(Clone, Copy)]
    enum After {
        /// Keep it open for more requests.
        KeepAlive,
        /// Close it at once, without saying so (no `Connection: close`).
        Close,
        /// Close it a little later, as an upstream whose keep-alive timer
        /// fired does: the connection is idle on our side by then.
        CloseLater,
        /// Answer the first request; read the second and close the
        /// connection without answering (an upstream that crashed on it).
        DropSecond,
    }

    /// An HTTP/1.1 upstream on a raw socket: reads one request head (and a
    /// `Content-Length` body), answers `{"n":<connection>}`, then `after`.
    /// Counts the connections it accepted and the requests it read.
    async fn upstream(
        after: After,
        answer_len: usize,
    ) -> (Authority, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let (count, seen) = (accepted.clone(), requests.clone());
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut on_this = 0;
                    loop {
                        let mut chunk = [0u8; 4096];
                        let Ok(read) = s.read(&mut chunk).await else {
                            return;
                        };
                        if read == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..read]);
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                        assert!(
                            head.starts_with("post /v1/chat/completions http/1.1"),
                            "{head}"
                        );
                        assert!(head.contains(&format!("\r\nhost: {addr}\r\n")), "{head}");
                        assert!(!head.contains("secret"), "{head}");
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        while buf.len() < end + 4 + len {
                            let read = s.read(&mut chunk).await.unwrap();
                            buf.extend_from_slice(&chunk[..read]);
                        }
                        buf.drain(..end + 4 + len);
                        seen.fetch_add(1, Ordering::SeqCst);
                        on_this += 1;
                        if matches!(after, After::DropSecond) && on_this == 2 {
                            return;
                        }
                        let mut body = format!("{{\"n\":{n}}}");
                        body.push_str(&" ".repeat(answer_len.saturating_sub(body.len())));
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if s.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                        match after {
                            After::KeepAlive | After::DropSecond => {}
                            After::Close => return,
                            After::CloseLater => {
                                tokio::time::sleep(Duration::from_millis(30)).await;
                                return;
                            }
                        }
                    }
                });
            }
        });
        (format!("{addr}").parse().unwrap(), accepted, requests)
    }

    fn request(to: &Authority) -> Request<Full<Bytes>> {
        request_to(&format!("http://{to}/v1/chat/completions"))
    }

    fn request_to(url: &str) -> Request<Full<Bytes>> {
        Request::post(url)
            .body(Full::new(Bytes::from_static(b"{\"model\":\"m\"}")))
            .unwrap()
    }

    async fn read(r: http::Response<Body>) -> String {
        let b = r.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8_lossy(&b).trim().to_string()
    }

    fn tcp() -> HttpConnector {
        let mut c = HttpConnector::new();
        c.set_connect_timeout(Some(Duration::from_secs(5)));
        c
    }

    #[tokio::test]
    async fn answers_read_whole_reuse_one_connection() {
        let (to, accepted, _) = upstream(After::KeepAlive, 0).await;
        let idle = Arc::new(Idle::default());
        for _ in 0..20 {
            let r = send(&idle, request(&to), &tcp()).await.unwrap();
            assert_eq!(read(r).await, "{\"n\":1}");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        assert_eq!(idle.len(), 1);
    }

    #[tokio::test]
    async fn concurrent_requests_open_at_most_one_connection_each() {
        let (to, accepted, _) = upstream(After::KeepAlive, 0).await;
        let idle = Arc::new(Idle::default());
        for _ in 0..5 {
            let mut all = Vec::new();
            for _ in 0..8 {
                let (idle, to) = (idle.clone(), to.clone());
                all.push(tokio::spawn(async move {
                    read(send(&idle, request(&to), &tcp()).await.unwrap()).await
                }));
            }
            for a in all {
                assert!(a.await.unwrap().starts_with("{\"n\":"));
            }
        }
        let n = accepted.load(Ordering::SeqCst);
        assert!((1..=8).contains(&n), "{n} connections for 8 at a time");
        assert_eq!(idle.len(), n);
    }

    /// The upstream closes each connection after its answer, without saying
    /// so: every next request finds its idle connection dead and goes on a
    /// new one, and none fails.
    #[tokio::test]
    async fn a_connection_the_upstream_closed_is_not_an_error() {
        let (to, accepted, _) = upstream(After::Close, 0).await;
        let idle = Arc::new(Idle::default());
        for i in 1..=10 {
            let r = send(&idle, request(&to), &tcp()).await.unwrap();
            assert_eq!(read(r).await, format!("{{\"n\":{i}}}"));
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 10);
    }

    /// The upstream closes idle connections behind our back: each next
    /// request finds its idle connection closed and goes on a new one.
    #[tokio::test]
    async fn an_idle_connection_the_upstream_closed_later_is_not_an_error() {
        let (to, accepted, _) = upstream(After::CloseLater, 0).await;
        let idle = Arc::new(Idle::default());
        for i in 1..=5 {
            let r = send(&idle, request(&to), &tcp()).await.unwrap();
            assert_eq!(read(r).await, format!("{{\"n\":{i}}}"));
            assert_eq!(idle.len(), 1, "kept while the upstream keeps it");
            tokio::time::sleep(Duration::from_millis(80)).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 5);
    }

    /// An answer dropped before its end leaves its connection unusable: it
    /// is not returned, and the next request opens another.
    #[tokio::test]
    async fn an_answer_dropped_unread_does_not_return_its_connection() {
        let (to, accepted, _) = upstream(After::KeepAlive, 256 * 1024).await;
        let idle = Arc::new(Idle::default());
        let r = send(&idle, request(&to), &tcp()).await.unwrap();
        drop(r);
        assert_eq!(idle.len(), 0);
        let r = send(&idle, request(&to), &tcp()).await.unwrap();
        assert!(read(r).await.starts_with("{\"n\":2}"));
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(idle.len(), 1);
    }

    /// A deployment whose URL changed does not send to the old place.
    #[tokio::test]
    async fn a_new_authority_drops_the_old_connections() {
        let (a, accepted_a, _) = upstream(After::KeepAlive, 0).await;
        let (b, accepted_b, _) = upstream(After::KeepAlive, 0).await;
        let idle = Arc::new(Idle::default());
        // An answer from `a` still being read when the URL changes.
        let late = send(&idle, request(&a), &tcp()).await.unwrap();
        read(send(&idle, request(&b), &tcp()).await.unwrap()).await;
        read(late).await;
        assert_eq!(idle.len(), 1, "only b's connection is kept");
        read(send(&idle, request(&b), &tcp()).await.unwrap()).await;
        assert_eq!(accepted_a.load(Ordering::SeqCst), 1);
        assert_eq!(accepted_b.load(Ordering::SeqCst), 1);
        read(send(&idle, request(&a), &tcp()).await.unwrap()).await;
        assert_eq!(
            accepted_a.load(Ordering::SeqCst),
            2,
            "b's connection is not used for a"
        );
    }

    #[tokio::test]
    async fn nothing_listening_is_a_connect_error() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to: Authority = l.local_addr().unwrap().to_string().parse().unwrap();
        drop(l);
        let e = send(&Arc::new(Idle::default()), request(&to), &tcp())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("tcp connect error"), "{e}");
    }

    /// The upstream reads a request and closes without answering: the
    /// request may have been acted on, so it is an error and it is never
    /// sent again — not on a new connection, although the one it went on
    /// was reused.
    #[tokio::test]
    async fn a_request_that_reached_the_upstream_is_never_sent_again() {
        let (to, accepted, requests) = upstream(After::DropSecond, 0).await;
        let idle = Arc::new(Idle::default());
        read(send(&idle, request(&to), &tcp()).await.unwrap()).await;
        assert_eq!(idle.len(), 1);
        let e = send(&idle, request(&to), &tcp()).await.unwrap_err();
        assert!(!e.to_string().is_empty());
        assert_eq!(requests.load(Ordering::SeqCst), 2, "sent once each");
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    /// The same on a runtime with several workers, where a connection's
    /// driver and the request run on different threads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_several_workers_one_connection_serves_requests_in_turn() {
        let (to, accepted, requests) = upstream(After::KeepAlive, 4096).await;
        let idle = Arc::new(Idle::default());
        for _ in 0..200 {
            let r = send(&idle, request(&to), &tcp()).await.unwrap();
            assert!(read(r).await.starts_with("{\"n\":1}"));
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        assert_eq!(requests.load(Ordering::SeqCst), 200);
        // Idle connections the upstream closed meanwhile are skipped.
        let (to, accepted, requests) = upstream(After::CloseLater, 0).await;
        for _ in 0..5 {
            let r = send(&idle, request(&to), &tcp()).await.unwrap();
            read(r).await;
            tokio::time::sleep(Duration::from_millis(80)).await;
        }
        assert_eq!(requests.load(Ordering::SeqCst), 5, "none sent twice");
        assert_eq!(accepted.load(Ordering::SeqCst), 5);
    }

    /// A connection idle for longer than `IDLE_FOR` is closed, not used.
    #[tokio::test]
    async fn a_connection_idle_too_long_is_not_used() {
        let (to, accepted, _) = upstream(After::KeepAlive, 0).await;
        let idle = Arc::new(Idle::default());
        read(send(&idle, request(&to), &tcp()).await.unwrap()).await;
        {
            let mut c = idle.lock();
            let since = &mut c.idle.back_mut().unwrap().1;
            *since = since
                .checked_sub(IDLE_FOR + Duration::from_secs(1))
                .expect("the clock has run for longer than IDLE_FOR");
        }
        read(send(&idle, request(&to), &tcp()).await.unwrap()).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(idle.len(), 1);
    }

    /// User information in the URL never reaches the upstream (the test
    /// upstream refuses a Host other than its address, or any "secret").
    #[tokio::test]
    async fn the_host_header_carries_no_user_information() {
        let (to, _, requests) = upstream(After::KeepAlive, 0).await;
        let url = format!("http://user:secret@{to}/v1/chat/completions");
        let r = send(&Arc::new(Idle::default()), request_to(&url), &tcp())
            .await
            .unwrap();
        assert_eq!(read(r).await, "{\"n\":1}");
        assert_eq!(requests.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_host_header_is_the_host_and_any_port_but_80() {
        let h = |a: &str| host_header(&a.parse().unwrap()).unwrap();
        assert_eq!(h("vllm.internal"), "vllm.internal");
        assert_eq!(h("vllm.internal:80"), "vllm.internal");
        assert_eq!(h("u:p@vllm.internal:8000"), "vllm.internal:8000");
        assert_eq!(h("[::1]:8000"), "[::1]:8000");
    }
}
