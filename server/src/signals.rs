//! The gateway's signals: SIGHUP forces a config re-read; Ctrl-C or SIGTERM asks for a
//! graceful shutdown.

use std::future::Future;

use tollgate::Limits;
use tollgate::store::Store;

/// Re-reads `limits`' config on every SIGHUP until `shutdown` completes (a no-op where
/// there are no signals).
pub(super) async fn reload_on_sighup<St: Store>(
    limits: Limits<St>,
    shutdown: impl Future<Output = ()> + Send,
) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP; reload by saving the config instead");
            return;
        };
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                received = hangups.recv() => {
                    if received.is_none() {
                        return;
                    }
                    tracing::info!("SIGHUP: re-reading the config");
                    // `reload` logs what it did or why it refused.
                    let _ = limits.reload();
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = limits;
        shutdown.await;
    }
}

/// Completes on Ctrl-C or SIGTERM.
///
/// ```no_run
/// # #[tokio::main] async fn main() {
/// tollgate_server::shutdown_signal().await;
/// eprintln!("shutting down");
/// # }
/// ```
pub async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
