//! A Redis call given a deadline: its answer, or why there was none — the one place a
//! Redis error and a timeout become the reason a decision, a listing or a claim reports.

use std::future::Future;
use std::time::Duration;

use crate::store::StoreError;

/// `call`'s answer if it comes within `wait`; otherwise the Redis error, or the timeout,
/// as text (what spans record and logs show).
pub(super) async fn within<T>(
    wait: Duration,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(wait, call).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!("no answer within {wait:?}")),
    }
}

/// The same, failing as the store does: [`StoreError::Unavailable`].
pub(super) async fn unavailable_within<T>(
    wait: Duration,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, StoreError> {
    within(wait, call)
        .await
        .map_err(|reason| StoreError::Unavailable { reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn an_error_and_a_timeout_each_say_what_happened() {
        let refused = within(Duration::from_millis(50), async {
            Err::<(), _>(redis::RedisError::from((
                redis::ErrorKind::Io,
                "connection refused",
            )))
        })
        .await;
        assert!(refused.unwrap_err().contains("connection refused"));
        let silent = unavailable_within(
            Duration::from_millis(50),
            std::future::pending::<redis::RedisResult<()>>(),
        )
        .await;
        assert!(
            silent
                .unwrap_err()
                .to_string()
                .ends_with("no answer within 50ms")
        );
        assert_eq!(
            within(Duration::from_millis(50), async { Ok(7) }).await,
            Ok(7)
        );
    }
}
