//! The answer to "may this request pass?".
//!
//! ```
//! use std::time::Duration;
//! use tollgate::Decision;
//!
//! let decision = Decision::unlimited();
//! assert!(decision.allowed);
//! assert_eq!(decision.retry_after_secs(), 0);
//! ```

use std::time::Duration;

/// What a bucket said about one request, from one reading of the clock.
///
/// With several quotas, the numbers describe the most restrictive one: on a denial the
/// quota that keeps the client waiting longest, otherwise the one with the fewest tokens
/// left. Durations are exact; the `*_secs` methods round up as HTTP headers need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request may pass (and, for a consuming check, has taken its tokens).
    pub allowed: bool,
    /// Whole tokens left: after this request if it was admitted and consumed; as the
    /// bucket stands for a denial or a peek.
    pub remaining: u64,
    /// The described quota's burst: tokens the bucket holds when full.
    pub limit: u64,
    /// Time the described quota takes to refill a whole burst.
    pub window: Duration,
    /// On a denial, time until a request of the same cost would be admitted; zero otherwise.
    pub retry_after: Duration,
    /// Time until the bucket is full again (every quota of the rule).
    pub reset: Duration,
    /// Time until `remaining` grows by one; zero when the bucket is full.
    pub next_token: Duration,
    /// Index into the rule's quotas of the quota these numbers describe.
    pub quota: usize,
}

impl Decision {
    /// The decision for a request no rule limits.
    pub const fn unlimited() -> Decision {
        Decision {
            allowed: true,
            remaining: u64::MAX,
            limit: u64::MAX,
            window: Duration::ZERO,
            retry_after: Duration::ZERO,
            reset: Duration::ZERO,
            next_token: Duration::ZERO,
            quota: 0,
        }
    }

    /// `Retry-After` in whole seconds: rounded up and never 0 on a denial; 0 when allowed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Decision;
    ///
    /// let mut denied = Decision::unlimited();
    /// denied.allowed = false;
    /// denied.retry_after = Duration::from_millis(1);
    /// assert_eq!(denied.retry_after_secs(), 1);
    /// denied.retry_after = Duration::from_millis(2001);
    /// assert_eq!(denied.retry_after_secs(), 3);
    /// ```
    pub fn retry_after_secs(&self) -> u64 {
        if self.allowed {
            0
        } else {
            ceil_secs(self.retry_after).max(1)
        }
    }

    /// The `t` of the `RateLimit` header: on a denial [`retry_after_secs`](Self::retry_after_secs),
    /// otherwise seconds until the next token, rounded up.
    pub fn next_token_secs(&self) -> u64 {
        if self.allowed {
            ceil_secs(self.next_token)
        } else {
            self.retry_after_secs()
        }
    }

    /// [`reset`](Self::reset) in whole seconds, rounded up.
    pub fn reset_secs(&self) -> u64 {
        ceil_secs(self.reset)
    }

    /// [`window`](Self::window) in whole seconds, rounded up, at least 1.
    pub fn window_secs(&self) -> u64 {
        ceil_secs(self.window).max(1)
    }
}

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}
