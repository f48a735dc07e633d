//! The answer to "may this request pass?".
//!
//! ```
//! use tollgate::Decision;
//!
//! let decision = Decision::unlimited();
//! assert!(decision.allowed());
//! assert_eq!(decision.retry_after_secs(), 0);
//! ```

use std::sync::Arc;
use std::time::Duration;

/// What a bucket said about one request, from one reading of the clock.
///
/// With several quotas, the figures describe the most restrictive one: on a denial the
/// quota that keeps the client waiting longest, otherwise the one with the fewest tokens
/// left. Durations are exact; the `*_secs` methods round up as HTTP headers need.
///
/// A token bucket's decision keeps its raw nanosecond figures and derives the rest on
/// demand, so a decision the caller only asks `allowed()` of costs no divisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    allowed: bool,
    quota: u32,
    /// The described quota's limit (burst, or count per window) and its window.
    limit: u64,
    window: u64,
    left: Left,
    /// On a denial, time until a request of the same cost would be admitted.
    retry: u64,
    /// On an admission under `on_limit = "delay"`, how long to hold the request first.
    delay: u64,
    /// Time until every quota of the rule is full.
    reset: u64,
    rule: Option<Arc<str>>,
    /// The deciding rule only measures (`shadow = true`).
    shadow: bool,
    /// When a request met several limits (a rule and its `also` limits): which spoke, and
    /// which the headers list.
    stack: Option<Arc<StackNote>>,
}

/// What a decision over several limits at once keeps for its response: the limit whose
/// decision this is (the refusing one that keeps the client waiting longest, or the one
/// closest to refusing among those shown), and every limit the headers list with the quota
/// that decided it — each by its index in the rule set that decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StackNote {
    pub(crate) speaker: usize,
    /// Whether the speaker is shown in the headers (`headers = false` limits are not).
    pub(crate) speaker_shown: bool,
    pub(crate) shown: Vec<(usize, usize)>,
}

/// What is left, in the form the algorithm knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Left {
    /// A token bucket: emission interval and time until full ("debt").
    Bucket { interval: u64, debt: u64 },
    /// A counter: whole units left, and time until one more is.
    Counted { remaining: u64, next: u64 },
    /// A discrete-refill bucket (smyte's `RL.*`): tokens left, time until the next refill,
    /// tokens held when the request arrived, and when the current session started (ns).
    Refill {
        remaining: u64,
        next: u64,
        available: u64,
        session: u64,
    },
}

impl Decision {
    /// The decision for a request no rule limits.
    pub const fn unlimited() -> Decision {
        Decision {
            allowed: true,
            quota: 0,
            limit: u64::MAX,
            window: 0,
            left: Left::Counted {
                remaining: u64::MAX,
                next: 0,
            },
            retry: 0,
            delay: 0,
            reset: 0,
            rule: None,
            shadow: false,
            stack: None,
        }
    }

    /// A token bucket's decision.
    pub(crate) const fn bucket(
        allowed: bool,
        quota: u32,
        burst: u64,
        interval: u64,
        debt: u64,
        retry: u64,
    ) -> Decision {
        Decision {
            allowed,
            quota,
            limit: burst,
            window: burst.saturating_mul(interval),
            left: Left::Bucket { interval, debt },
            retry,
            delay: 0,
            reset: debt,
            rule: None,
            shadow: false,
            stack: None,
        }
    }

    /// A counter's decision (the window algorithms).
    #[allow(clippy::too_many_arguments)]
    pub(crate) const fn counted(
        allowed: bool,
        quota: u32,
        limit: u64,
        window: u64,
        remaining: u64,
        next: u64,
        retry: u64,
        reset: u64,
    ) -> Decision {
        Decision {
            allowed,
            quota,
            limit,
            window,
            left: Left::Counted { remaining, next },
            retry,
            delay: 0,
            reset,
            rule: None,
            shadow: false,
            stack: None,
        }
    }

    /// A counter's decision made a discrete-refill bucket's (smyte's `RL.*` commands): it
    /// also knows what the bucket held before the request and when its session started.
    pub(crate) const fn with_refill(mut self, available: u64, session: u64) -> Decision {
        if let Left::Counted { remaining, next } = self.left {
            self.left = Left::Refill {
                remaining,
                next,
                available,
                session,
            };
        }
        self
    }

    pub(crate) fn with_delay(mut self, delay: u64) -> Decision {
        self.delay = delay;
        self
    }

    /// This admission turned into a refusal for as long as it would have been held (when
    /// nothing can hold it: no timer to wait on).
    pub(crate) fn refused_instead_of_held(mut self) -> Decision {
        self.allowed = false;
        self.retry = self.delay;
        self.delay = 0;
        self
    }

    pub(crate) fn with_reset(mut self, reset: u64) -> Decision {
        self.reset = reset;
        self
    }

    pub(crate) fn with_rule(mut self, rule: Arc<str>) -> Decision {
        self.rule = Some(rule);
        self
    }

    pub(crate) fn with_shadow(mut self, shadow: bool) -> Decision {
        self.shadow = shadow;
        self
    }

    pub(crate) fn with_stack(mut self, note: StackNote) -> Decision {
        self.stack = Some(Arc::new(note));
        self
    }

    /// For a decision over several limits: which spoke and which the headers list.
    pub(crate) fn stack(&self) -> Option<&StackNote> {
        self.stack.as_deref()
    }

    /// Whether the request may pass (and, for a consuming check, has taken its tokens).
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// Whole tokens left: after this request if it was admitted and consumed; as the
    /// bucket stands for a denial or a peek. `u64::MAX` when nothing limits the request.
    pub fn remaining(&self) -> u64 {
        match self.left {
            Left::Bucket { interval: 0, .. } => u64::MAX,
            Left::Bucket { interval, debt } => self.window.saturating_sub(debt) / interval,
            Left::Counted { remaining, .. } | Left::Refill { remaining, .. } => remaining,
        }
    }

    /// For a caller-defined bucket (smyte's `RL.*` semantics,
    /// [`Limits::take_from`](crate::Limits::take_from)): the tokens it held when the request
    /// arrived, before any were taken — what `RL.REDUCE` replies. `None` for rule buckets.
    pub fn available_before(&self) -> Option<u64> {
        match self.left {
            Left::Refill { available, .. } => Some(available),
            _ => None,
        }
    }

    /// For a caller-defined bucket taken from as a session
    /// ([`TakeOptions::session`](crate::TakeOptions::session), `RL.SESSIONIZE`): when the
    /// session this request belongs to started — this request's own time if it found the
    /// tokens it asked for, else the time of the last one that did. `None` otherwise.
    pub fn session_started_at(&self) -> Option<crate::clock::Timestamp> {
        match self.left {
            Left::Refill { session, .. } if session != u64::MAX => {
                Some(crate::clock::Timestamp::from_unix_nanos(session))
            }
            _ => None,
        }
    }

    /// The described quota's limit: a bucket's burst, or a window's count.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Time the described quota takes to refill a whole burst, or its window.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    /// On a denial, time until a request of the same cost would be admitted; zero otherwise.
    pub fn retry_after(&self) -> Duration {
        Duration::from_nanos(self.retry)
    }

    /// For a rule with `on_limit = "delay"`: how long an admitted request is held before it
    /// passes — its place in the schedule, already taken. Zero for everything else. The layer
    /// waits it out; callers of [`Limits::check`](crate::Limits::check) wait themselves.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let toml = "[limits]\nupload = { rate = \"5/s\", burst = 1, on_limit = \"delay\", max_delay = \"1s\" }\n";
    /// let clock = tollgate::clock::FakeClock::new();
    /// let limits = tollgate::Limits::builder().clock(clock).from_toml(toml)?;
    /// assert_eq!(limits.check("upload/me", 1).await?.delay().as_millis(), 0);
    /// let second = limits.check("upload/me", 1).await?;
    /// assert!(second.allowed());
    /// assert_eq!(second.delay().as_millis(), 200, "its turn comes one interval later");
    /// # Ok(()) }
    /// ```
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay)
    }

    /// Time until the bucket is full again (every quota of the rule).
    pub fn reset(&self) -> Duration {
        Duration::from_nanos(self.reset)
    }

    /// Time until [`remaining`](Self::remaining) grows by one; zero when the bucket is full.
    pub fn next_token(&self) -> Duration {
        Duration::from_nanos(self.next_token_nanos())
    }

    /// Index into the rule's quotas of the quota these figures describe.
    pub fn quota(&self) -> usize {
        self.quota as usize
    }

    /// The name of the rule that decided (`/` for the root), for decisions made through
    /// [`Limits`](crate::Limits)' key API; `None` when no rule limits the key.
    pub fn rule(&self) -> Option<&str> {
        self.rule.as_deref()
    }

    /// Whether the rule that decided only measures (`shadow = true`): the request passes
    /// whatever [`allowed`](Self::allowed) says, and `allowed` says what would have happened.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limits = tollgate::Limits::from_toml("[limits]\nbeta = { rate = \"1/h\", shadow = true }\n")?;
    /// limits.check("beta/me", 1).await?;
    /// let second = limits.check("beta/me", 1).await?;
    /// assert!(second.shadow() && !second.allowed(), "would have been refused");
    /// # Ok(()) }
    /// ```
    pub fn shadow(&self) -> bool {
        self.shadow
    }

    /// `Retry-After` in whole seconds: rounded up and never 0 on a denial; 0 when allowed.
    ///
    /// ```
    /// use tollgate::Limits;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limits = Limits::from_toml("[limits]\n\"/\" = \"1/h\"\n")?;
    /// assert_eq!(limits.check("me", 1).await?.retry_after_secs(), 0);
    /// let denied = limits.check("me", 1).await?;
    /// assert!(!denied.allowed());
    /// assert!((3599..=3600).contains(&denied.retry_after_secs()));
    /// # Ok(()) }
    /// ```
    pub fn retry_after_secs(&self) -> u64 {
        if self.allowed {
            0
        } else {
            ceil_secs_nanos(self.retry).max(1)
        }
    }

    /// The `t` of the `RateLimit` header: on a denial [`retry_after_secs`](Self::retry_after_secs),
    /// otherwise seconds until the next token, rounded up.
    pub fn next_token_secs(&self) -> u64 {
        if self.allowed {
            ceil_secs_nanos(self.next_token_nanos())
        } else {
            self.retry_after_secs()
        }
    }

    /// [`reset`](Self::reset) in whole seconds, rounded up.
    pub fn reset_secs(&self) -> u64 {
        ceil_secs_nanos(self.reset)
    }

    /// [`window`](Self::window) in whole seconds, rounded up, at least 1.
    pub fn window_secs(&self) -> u64 {
        ceil_secs_nanos(self.window).max(1)
    }

    fn next_token_nanos(&self) -> u64 {
        let (interval, debt) = match self.left {
            Left::Counted { next, .. } | Left::Refill { next, .. } => return next,
            Left::Bucket { interval, debt } => (interval, debt),
        };
        let capacity = self.window;
        if debt == 0 || interval == 0 {
            0
        } else if debt > capacity {
            // Deeper than empty (a reload lowered the burst): first climb back to zero.
            debt - capacity + interval
        } else {
            match debt % interval {
                0 => interval,
                partial => partial,
            }
        }
    }
}

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

fn ceil_secs_nanos(nanos: u64) -> u64 {
    nanos.div_ceil(1_000_000_000)
}
