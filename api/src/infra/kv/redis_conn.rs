//! The Redis side: one multiplexed connection per process, re-made after a failure.
use deadpool_redis::Pool;
use redis::aio::MultiplexedConnection;
use std::{sync::Mutex, time::Duration};

use super::unavailable;

use crate::error::ApiError;

pub struct RedisKv {
    pub(super) pool: Pool,
    /// The connection every call shares. A multiplexed connection pipelines concurrent
    /// commands over one socket, so it needs no pool of its own; taking a pooled object per
    /// call would cost deadpool's recycle check (an UNWATCH + PING round trip) on every call,
    /// doubling each call's round trips. The pool still creates and health-checks it: after
    /// a connection error or a timeout the shared one is dropped and the next call takes a
    /// fresh, checked one from the pool.
    pub(super) shared: Mutex<Option<MultiplexedConnection>>,
    pub(super) timeout: Duration,
    pub(super) prefix: String,
}

impl RedisKv {
    pub(super) async fn connection(&self) -> Result<MultiplexedConnection, ApiError> {
        if let Some(c) = self.shared.lock().expect("redis connection slot").clone() {
            return Ok(c);
        }
        // Boxed: the pool's checkout is a state machine of several kilobytes, which every
        // call's future (and every future awaiting one, up to the request's) would
        // otherwise carry and copy, though only the first call after a failure needs it.
        Box::pin(self.fresh_connection()).await
    }

    pub(super) async fn fresh_connection(&self) -> Result<MultiplexedConnection, ApiError> {
        let pooled = self.pool.get().await.map_err(unavailable)?;
        let conn = deadpool_redis::Connection::take(pooled);
        let mut slot = self.shared.lock().expect("redis connection slot");
        // Calls that found the slot empty at once all fetched one; the first stored wins.
        Ok(slot.get_or_insert(conn).clone())
    }

    pub(super) fn forget_connection(&self) {
        self.shared.lock().expect("redis connection slot").take();
    }
}
