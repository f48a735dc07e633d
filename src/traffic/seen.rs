//! [`Seen`]: what happened to a request, as the rule's counters record it.

/// What happened to a request, as the traffic charts count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Seen {
    /// Passed (including requests held first, which are also [`Seen::Delayed`]; not those
    /// a shadow rule objected to, which are [`Seen::ShadowRefused`]), as the
    /// `tollgate_requests_total` metric counts them.
    Admitted,
    /// Refused by the rule's rate or its concurrency cap.
    Refused,
    /// A shadow rule would have refused it; it passed.
    ShadowRefused,
    /// Held until its turn (`on_limit = "delay"`), then passed.
    Delayed,
}

impl Seen {
    /// Every kind, in the order `Counts` lists them.
    #[cfg(feature = "insight")]
    pub const ALL: [Seen; 4] = [
        Seen::Admitted,
        Seen::Refused,
        Seen::ShadowRefused,
        Seen::Delayed,
    ];

    #[cfg(feature = "insight")]
    pub(super) fn index(self) -> usize {
        match self {
            Seen::Admitted => 0,
            Seen::Refused => 1,
            Seen::ShadowRefused => 2,
            Seen::Delayed => 3,
        }
    }
}
