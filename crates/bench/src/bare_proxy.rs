//! The stack's floor: a pass-through proxy on the same libraries as
//! tollgate's data plane (axum and hyper's server on tokio, hyper's HTTP/1.1
//! client with kept-alive upstream connections) that enforces nothing: it
//! reads the request, sends it on, reads the answer and returns it. Run
//! beside nginx as a plain reverse proxy (`bench/peers/peers.sh`), it shows
//! how much of tollgate's added latency and CPU the stack itself costs
//! before any metering (bench/results/2026-12-04-the-stack-s-floor-the-same-pass.md).
//!
//!   bare-proxy --listen 127.0.0.1:18093 --upstream 127.0.0.1:18080 [--threads N]
//!
//! `--threads 0` (the default) serves on tokio's multi-threaded runtime, as
//! `tollgate serve` does; `--threads N` serves on N single-threaded
//! runtimes, each taking the connections an accepting thread hands it in
//! turn (nginx's shape, measured in bench/results/).

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use clap::Parser;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::OnceLock;
use tokio::net::TcpStream;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:18093")]
    listen: String,
    /// host:port of a plain-http upstream.
    #[arg(long, default_value = "127.0.0.1:18080")]
    upstream: String,
    /// Serving threads (0: tokio's multi-threaded runtime).
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

static UPSTREAM: OnceLock<String> = OnceLock::new();

type Sender = SendRequest<Full<Bytes>>;

thread_local! {
    /// Idle upstream connections opened by this thread.
    static IDLE: RefCell<Vec<Sender>> = const { RefCell::new(Vec::new()) };
}

async fn connect() -> anyhow::Result<Sender> {
    let io = TcpStream::connect(UPSTREAM.get().expect("set")).await?;
    io.set_nodelay(true)?;
    let (tx, conn) = http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(tx)
}

async fn forward(req: Request) -> Result<Response, (StatusCode, String)> {
    let bad = |e: &dyn std::fmt::Display| (StatusCode::BAD_GATEWAY, e.to_string());
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(|e| bad(&e))?.to_bytes();
    let mut out = http::Request::builder()
        .method(parts.method)
        .uri(parts.uri.path())
        .header(http::header::HOST, UPSTREAM.get().expect("set").as_str());
    for name in [http::header::CONTENT_TYPE, http::header::AUTHORIZATION] {
        if let Some(v) = parts.headers.get(&name) {
            out = out.header(name, v);
        }
    }
    let out = out.body(Full::new(body)).map_err(|e| bad(&e))?;
    let mut tx = loop {
        match IDLE.with(|i| i.borrow_mut().pop()) {
            Some(mut tx) => {
                if tx.ready().await.is_ok() {
                    break tx;
                }
            }
            None => break connect().await.map_err(|e| bad(&e))?,
        }
    };
    let resp = tx.send_request(out).await.map_err(|e| bad(&e))?;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.map_err(|e| bad(&e))?.to_bytes();
    IDLE.with(|i| i.borrow_mut().push(tx));
    Ok(Response::from_parts(parts, Body::from(body)))
}

fn app() -> Router {
    Router::new().route(
        "/v1/chat/completions",
        post(|req: Request| async move { forward(req).await.into_response() }),
    )
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    UPSTREAM.set(args.upstream).expect("once");
    let listener = std::net::TcpListener::bind(&args.listen)?;
    listener.set_nonblocking(true)?;
    if args.threads == 0 {
        let rt = tokio::runtime::Runtime::new()?;
        return rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(listener)?;
            let l = axum::serve::ListenerExt::tap_io(l, |t| {
                let _ = t.set_nodelay(true);
            });
            axum::serve(l, app()).await?;
            Ok(())
        });
    }
    let mut hands = Vec::new();
    let mut threads = Vec::new();
    for _ in 0..args.threads {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(std::net::TcpStream, SocketAddr)>();
        hands.push(tx);
        threads.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let l = Handed { rx };
                let _ = axum::serve(l, app()).await;
            });
        }));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let l = tokio::net::TcpListener::from_std(listener)?;
        let mut next = 0;
        loop {
            let (s, peer) = l.accept().await?;
            let _ = s.set_nodelay(true);
            let _ = hands[next % hands.len()].send((s.into_std()?, peer));
            next += 1;
        }
    })
}

/// Connections handed over by the accepting thread.
struct Handed {
    rx: tokio::sync::mpsc::UnboundedReceiver<(std::net::TcpStream, SocketAddr)>,
}

impl axum::serve::Listener for Handed {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            let Some((s, peer)) = self.rx.recv().await else {
                std::future::pending::<()>().await;
                unreachable!()
            };
            if let Ok(s) = TcpStream::from_std(s) {
                return (s, peer);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(SocketAddr::from(([0, 0, 0, 0], 0)))
    }
}
