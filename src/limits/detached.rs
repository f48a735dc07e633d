//! [`drive_detached`]: a store's decision driven with no request waiting on it (a
//! settlement from a response's body, a candidate limit's would-be decision).

use crate::decision::Decision;
use crate::store::StoreError;

/// Drives a store's `future` without a request waiting on it: at once if it is ready (the
/// memory store always is), else on the runtime; then hands its answer to `done` (an
/// [`StoreError::Unavailable`] when there is no runtime to wait on).
pub(crate) fn drive_detached<F>(
    future: F,
    done: impl FnOnce(Result<Decision, StoreError>) + Send + 'static,
) where
    F: std::future::Future<Output = Result<Decision, StoreError>> + Send + Unpin + 'static,
{
    let mut future = future;
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    if let std::task::Poll::Ready(result) = std::pin::Pin::new(&mut future).poll(&mut context) {
        done(result);
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move { done(future.await) });
        }
        Err(_) => done(Err(StoreError::Unavailable {
            reason: "no runtime to wait for the store on".to_owned(),
        })),
    }
}
