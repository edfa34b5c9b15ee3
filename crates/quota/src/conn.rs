//! One Redis, or a Redis Cluster, behind one connection type. The scripts
//! need nothing else: every key a script touches carries its tenant's hash
//! tag, so each call lands on one node.

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;

#[derive(Clone)]
pub(crate) enum Link {
    Single(ConnectionManager),
    Cluster(Arc<ClusterLink>),
}

pub(crate) struct ClusterLink {
    client: ClusterClient,
    conn: OnceCell<ClusterConnection>,
}

#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// How long Redis may take. A Redis that is down refuses or resets the
/// connection, which fails at once whatever these are; `connect` bounds
/// dialling one that does not answer the handshake; `answer` bounds a call
/// on an established connection — a slow but answering Redis (a loaded
/// host, a long script ahead in its queue) gets this longer bound before
/// the request fails closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub answer: Duration,
}

impl Timeouts {
    /// One bound for both (tests, tools).
    pub fn both(t: Duration) -> Self {
        Self {
            connect: t,
            answer: t,
        }
    }
}

impl Link {
    /// Lazy: nothing is dialled until the first command.
    pub fn single(url: &str, t: Timeouts) -> RedisResult<Self> {
        let client = redis::Client::open(url)?;
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(t.connect))
            .set_response_timeout(Some(t.answer))
            // No retry with backoff inside a call: a refused reconnect must fail
            // the call at once (down is not slow); the next call dials again.
            .set_number_of_retries(0)
            .set_max_delay(Duration::from_millis(200));
        Ok(Link::Single(ConnectionManager::new_lazy_with_config(
            client, cfg,
        )?))
    }

    /// Lazy too: the cluster connection is made on first use, and again on
    /// the next use after a failed attempt.
    pub fn cluster(nodes: &[String], t: Timeouts) -> RedisResult<Self> {
        let client = ClusterClient::builder(nodes.to_vec())
            .connection_timeout(t.connect)
            .response_timeout(t.answer)
            .retries(1)
            .build()?;
        Ok(Link::Cluster(Arc::new(ClusterLink {
            client,
            conn: OnceCell::new(),
        })))
    }

    pub async fn get(&self) -> RedisResult<Conn> {
        match self {
            Link::Single(m) => Ok(Conn::Single(m.clone())),
            Link::Cluster(c) => {
                let conn = c
                    .conn
                    .get_or_try_init(|| c.client.get_async_connection())
                    .await?;
                Ok(Conn::Cluster(conn.clone()))
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}
