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

/// Asks a node which masters serve the slots (`CLUSTER SLOTS`), then pings each of them on
/// this client's own connection to it: a master the client is not connected to fails the
/// check, as every call routed to that master would fail. Every slot must be served.
pub(super) async fn ping_every_master(
    cluster: redis::cluster_async::ClusterConnection,
) -> redis::RedisResult<()> {
    use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
    let slots = cluster
        .clone()
        .route_command(
            redis::cmd("CLUSTER").arg("SLOTS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await?;
    let (masters, covered) = masters_of(&slots).ok_or_else(|| {
        redis::RedisError::from((redis::ErrorKind::Parse, "unexpected CLUSTER SLOTS answer"))
    })?;
    if covered < 16_384 {
        return Err(redis::RedisError::from((
            redis::ErrorKind::ClusterConnectionNotFound,
            "slots without a master",
            format!("{} of 16384 slots served", covered),
        )));
    }
    let pings = masters.into_iter().map(|(host, port)| {
        let mut c = cluster.clone();
        async move {
            c.route_command(
                redis::cmd("PING"),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port }),
            )
            .await
        }
    });
    futures::future::try_join_all(pings).await.map(drop)
}

/// The masters' addresses in a `CLUSTER SLOTS` answer, and how many slots they serve.
fn masters_of(slots: &redis::Value) -> Option<(std::collections::BTreeSet<(String, u16)>, i64)> {
    use redis::Value;
    let int = |v: &Value| match v {
        Value::Int(i) => Some(*i),
        _ => None,
    };
    let Value::Array(ranges) = slots else {
        return None;
    };
    let mut masters = std::collections::BTreeSet::new();
    let mut covered = 0;
    for range in ranges {
        let Value::Array(fields) = range else {
            return None;
        };
        let (start, end) = (int(fields.first()?)?, int(fields.get(1)?)?);
        let Value::Array(master) = fields.get(2)? else {
            return None;
        };
        let host = match master.first()? {
            Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
            Value::SimpleString(s) => s.clone(),
            _ => return None,
        };
        let port = u16::try_from(int(master.get(1)?)?).ok()?;
        covered += end - start + 1;
        masters.insert((host, port));
    }
    Some((masters, covered))
}

#[cfg(test)]
mod tests {
    use redis::Value;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn the_masters_of_a_slot_map_and_the_slots_they_cover() {
        let slots = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.4", 7003),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                node("10.0.0.2", 7001),
            ]),
            Value::Array(vec![
                Value::Int(10923),
                Value::Int(16383),
                node("10.0.0.3", 7002),
            ]),
        ]);
        let (masters, covered) = super::masters_of(&slots).unwrap();
        assert_eq!(covered, 16_384);
        let masters: Vec<_> = masters.into_iter().collect();
        assert_eq!(
            masters,
            [
                ("10.0.0.1".to_string(), 7000),
                ("10.0.0.2".into(), 7001),
                ("10.0.0.3".into(), 7002)
            ],
            "replicas are not masters"
        );
        // Slots assigned to no master are missing from the map: not covered.
        let partial = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(99),
            node("10.0.0.1", 7000),
        ])]);
        assert_eq!(super::masters_of(&partial).unwrap().1, 100);
        assert!(super::masters_of(&Value::Nil).is_none());
    }
}
