//! The Redis side: one multiplexed connection per process, re-made after a failure. A
//! standalone server is reached through deadpool's pool; a Redis Cluster through the
//! cluster client, whose one connection routes each command to the node owning its key's
//! slot and follows slot moves and failovers.
use deadpool_redis::Pool;
use redis::{
    Cmd, Pipeline, RedisFuture, Value,
    aio::{ConnectionLike, MultiplexedConnection},
    cluster::ClusterClient,
    cluster_async::ClusterConnection,
};
use std::{sync::Mutex, time::Duration};

use super::unavailable;

use crate::error::ApiError;

/// Where connections come from.
pub(super) enum Connector {
    Standalone(Pool),
    Cluster(Box<ClusterClient>),
}

/// The shared connection: to one server, or to a whole cluster.
#[derive(Clone)]
pub enum Conn {
    Standalone(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Standalone(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Standalone(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Standalone(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

pub struct RedisKv {
    pub(super) connector: Connector,
    /// The connection every call shares. A multiplexed connection pipelines concurrent
    /// commands over one socket, so it needs no pool of its own; taking a pooled object per
    /// call would cost deadpool's recycle check (an UNWATCH + PING round trip) on every call,
    /// doubling each call's round trips. The pool still creates and health-checks it: after
    /// a connection error or a timeout the shared one is dropped and the next call takes a
    /// fresh, checked one from the pool (or, on a cluster, a fresh cluster connection).
    pub(super) shared: Mutex<Option<Conn>>,
    pub(super) timeout: Duration,
    pub(super) prefix: String,
}

impl RedisKv {
    pub(super) async fn connection(&self) -> Result<Conn, ApiError> {
        if let Some(c) = self.shared.lock().expect("redis connection slot").clone() {
            return Ok(c);
        }
        // Boxed: the pool's checkout is a state machine of several kilobytes, which every
        // call's future (and every future awaiting one, up to the request's) would
        // otherwise carry and copy, though only the first call after a failure needs it.
        Box::pin(self.fresh_connection()).await
    }

    pub(super) async fn fresh_connection(&self) -> Result<Conn, ApiError> {
        let conn = match &self.connector {
            Connector::Standalone(pool) => {
                let pooled = pool.get().await.map_err(unavailable)?;
                Conn::Standalone(deadpool_redis::Connection::take(pooled))
            }
            Connector::Cluster(client) => {
                Conn::Cluster(client.get_async_connection().await.map_err(unavailable)?)
            }
        };
        let mut slot = self.shared.lock().expect("redis connection slot");
        // Calls that found the slot empty at once all fetched one; the first stored wins.
        Ok(slot.get_or_insert(conn).clone())
    }

    /// Drops the shared connection after a failure, so the next call makes a fresh one. A
    /// cluster connection is kept: it reconnects to its nodes and re-reads the slot map
    /// itself, and making a new one would mean reaching every node again while one is down.
    pub(super) fn forget_connection(&self) {
        if matches!(self.connector, Connector::Cluster(_)) {
            return;
        }
        self.shared.lock().expect("redis connection slot").take();
    }
}
