//! What the Redis-protocol front end shares between connections (the limits, the options,
//! the metric handles) and what each connection remembers (its protocol, its login).

use std::sync::atomic::{AtomicU64, Ordering};

use super::options::RespOptions;
use super::protocol::Bounds;
use super::table::COMMANDS;
use tollgate::Limits;

/// Shared by every connection of one listener.
pub(super) struct Shared<St> {
    pub(super) limits: Limits<St>,
    pub(super) options: RespOptions,
    pub(super) bounds: Bounds,
    pub(super) metrics: Vec<CommandMetrics>,
    next_id: AtomicU64,
}

/// Handles to one command's metrics, made once so that counting is an atomic add.
pub(super) struct CommandMetrics {
    pub(super) calls: metrics::Counter,
    pub(super) errors: metrics::Counter,
    pub(super) seconds: metrics::Histogram,
}

impl<St> Shared<St> {
    pub(super) fn new(limits: Limits<St>, options: RespOptions) -> Shared<St> {
        // One set per command of the table, and one for all unknown commands.
        let names = COMMANDS.iter().map(|spec| spec.name).chain(["unknown"]);
        let metrics = names
            .map(|command| CommandMetrics {
                calls: metrics::counter!("tollgate_resp_commands_total", "command" => command),
                errors: metrics::counter!("tollgate_resp_errors_total", "command" => command),
                seconds: metrics::histogram!("tollgate_resp_command_seconds", "command" => command),
            })
            .collect();
        Shared {
            bounds: options.bounds(),
            limits,
            options,
            metrics,
            next_id: AtomicU64::new(1),
        }
    }

    /// The metrics of the command at `index` in [`COMMANDS`] (past the end: unknown ones).
    pub(super) fn metrics(&self, index: usize) -> Option<&CommandMetrics> {
        self.metrics.get(index).or(self.metrics.last())
    }

    /// A new connection's state.
    pub(super) fn session(&self) -> Session {
        Session {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            resp3: false,
            authenticated: self.options.password.is_none(),
            name: None,
            closing: false,
            timed: 0,
        }
    }
}

/// One connection's state.
pub(super) struct Session {
    /// Its number, for `CLIENT ID` and `HELLO`.
    pub(super) id: u64,
    /// Speaking RESP3 (after `HELLO 3`).
    pub(super) resp3: bool,
    /// Logged in, or no password is required.
    pub(super) authenticated: bool,
    /// `CLIENT SETNAME`.
    pub(super) name: Option<String>,
    /// `QUIT`, or a request to close: answer, then close.
    pub(super) closing: bool,
    /// Commands since the last one timed (latency is sampled: timing costs two clock reads).
    pub(super) timed: u32,
}
