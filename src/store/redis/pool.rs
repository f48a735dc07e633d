//! The connections to Redis and the decision script on them: a few multiplexed
//! connections used in turn, made on first use, with the script loaded once up front.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::script::SCRIPT;
use crate::config::RedisSettings;

/// A store's connections and its decision script.
pub(super) struct Pool {
    client: redis::Client,
    connections: tokio::sync::OnceCell<Vec<ConnectionManager>>,
    turn: AtomicUsize,
    script: redis::Script,
}

impl Pool {
    /// A pool for `client`; nothing connects until the first call.
    pub(super) fn new(client: redis::Client) -> Pool {
        Pool {
            client,
            connections: tokio::sync::OnceCell::new(),
            turn: AtomicUsize::new(0),
            script: redis::Script::new(SCRIPT),
        }
    }

    /// One of the multiplexed connections, in turn; made (lazily, with the timeouts and
    /// count `settings` give at that moment) on first use.
    pub(super) async fn connection(
        &self,
        settings: &RedisSettings,
    ) -> redis::RedisResult<ConnectionManager> {
        let all = self
            .connections
            .get_or_try_init(|| async {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(settings.timeout.max(Duration::from_millis(250))))
                    .set_response_timeout(Some(settings.timeout))
                    .set_number_of_retries(2)
                    .set_min_delay(Duration::from_millis(20))
                    .set_max_delay(Duration::from_millis(500));
                let all = (0..settings.connections.max(1))
                    .map(|_| {
                        ConnectionManager::new_lazy_with_config(self.client.clone(), config.clone())
                    })
                    .collect::<redis::RedisResult<Vec<ConnectionManager>>>()?;
                // Loaded once up front, so decisions are one EVALSHA each; after a server
                // restart or SCRIPT FLUSH, NOSCRIPT makes the first decision load it again.
                if let Some(first) = all.first() {
                    self.script.load_async(&mut first.clone()).await?;
                }
                Ok::<_, redis::RedisError>(all)
            })
            .await?;
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        all.get(turn % all.len().max(1))
            .cloned()
            .ok_or_else(|| redis::RedisError::from((redis::ErrorKind::Client, "no connection")))
    }

    /// One `EVALSHA` of the decision script on `key` (`EVAL` again after `NOSCRIPT`).
    pub(super) async fn decide(
        &self,
        settings: &RedisSettings,
        key: &str,
        args: &[String],
    ) -> redis::RedisResult<Vec<i64>> {
        let mut connection = self.connection(settings).await?;
        let mut invocation = self.script.prepare_invoke();
        invocation.key(key);
        for arg in args {
            invocation.arg(arg.as_str());
        }
        invocation.invoke_async(&mut connection).await
    }

    /// The script's SHA1, for `EVALSHA` in a pipeline.
    pub(super) fn script_hash(&self) -> &str {
        self.script.get_hash()
    }
}
