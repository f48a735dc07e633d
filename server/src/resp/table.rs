//! Every command the front end knows, in one table: its name, the arguments it takes, what
//! `COMMAND` says of it, what runs it and a line of help. The metrics, `COMMAND`, `COMMAND
//! DOCS`, `INFO` and the dispatch all read this table; a command is added here and nowhere
//! else (and to the `match` on [`Handler`], which the compiler keeps complete).

use super::smyte;

/// What runs a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Handler {
    /// One of smyte's `RL.*`.
    Smyte(smyte::Command),
    /// `TG.CHECK`.
    Check,
    /// `TG.PEEK`.
    Peek,
    /// `TG.EXPLAIN`.
    Explain,
    /// `TG.CHARGE`.
    Charge,
    /// `TG.REFUND`.
    Refund,
    Ping,
    Echo,
    Hello,
    Auth,
    Client,
    Select,
    Command,
    Config,
    Info,
    Quit,
    Reset,
}

/// How many arguments a command takes after its name: from `min` to `max`, in steps of
/// `step` (`TG.CHECK key [COST n]`: 1 or 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Arity {
    min: usize,
    max: usize,
    step: usize,
}

impl Arity {
    const fn exactly(n: usize) -> Arity {
        Arity {
            min: n,
            max: n,
            step: 1,
        }
    }

    const fn between(min: usize, max: usize) -> Arity {
        Arity { min, max, step: 1 }
    }

    const fn at_least(min: usize) -> Arity {
        Arity::between(min, usize::MAX)
    }

    /// Whether `n` arguments (after the name) fit.
    pub(super) fn accepts(self, n: usize) -> bool {
        (self.min..=self.max).contains(&n) && (n - self.min).is_multiple_of(self.step)
    }

    /// As `COMMAND` gives it: the count with the name, negative for "at least".
    pub(super) fn redis(self) -> i64 {
        let with_name = i64::try_from(self.min + 1).unwrap_or(i64::MAX);
        if self.min == self.max {
            with_name
        } else {
            -with_name
        }
    }
}

/// One command.
#[derive(Clone, Copy, Debug)]
pub(super) struct Spec {
    /// Lower-case, as matched.
    pub(super) name: &'static str,
    pub(super) arity: Arity,
    /// The flag `COMMAND` lists.
    pub(super) flag: &'static str,
    pub(super) handler: Handler,
    /// One line, for `COMMAND DOCS`.
    pub(super) help: &'static str,
}

impl Spec {
    /// Whether it takes a key first (the limiter's own commands): `COMMAND` says where.
    pub(super) fn keyed(&self) -> bool {
        self.name.starts_with("rl.") || self.name.starts_with("tg.")
    }

    /// Whether it may run before `AUTH`.
    pub(super) fn before_auth(&self) -> bool {
        matches!(
            self.handler,
            Handler::Auth | Handler::Hello | Handler::Quit | Handler::Reset
        )
    }
}

const fn spec(
    name: &'static str,
    arity: Arity,
    flag: &'static str,
    handler: Handler,
    help: &'static str,
) -> Spec {
    Spec {
        name,
        arity,
        flag,
        handler,
        help,
    }
}

/// The commands, in the order `COMMAND` lists them and metrics are kept.
pub(super) const COMMANDS: [Spec; 22] = [
    spec(
        "rl.reduce",
        Arity::between(3, 10),
        "write",
        Handler::Smyte(smyte::Command::REDUCE),
        "RL.REDUCE key max refilltime [REFILL n] [TAKE n] [AT ts] [STRICT]: take tokens; answers what was left",
    ),
    spec(
        "rl.get",
        Arity::between(3, 8),
        "readonly",
        Handler::Smyte(smyte::Command::GET),
        "RL.GET key max refilltime [REFILL n] [AT ts]: what the bucket holds, taking nothing",
    ),
    spec(
        "rl.sessionize",
        Arity::between(3, 10),
        "write",
        Handler::Smyte(smyte::Command::SESSIONIZE),
        "RL.SESSIONIZE key max refilltime [...]: take as a session; answers [left, session start]",
    ),
    spec(
        "rl.preduce",
        Arity::between(3, 10),
        "write",
        Handler::Smyte(smyte::Command::REDUCE.in_millis()),
        "RL.PREDUCE: RL.REDUCE with times in milliseconds",
    ),
    spec(
        "rl.pget",
        Arity::between(3, 8),
        "readonly",
        Handler::Smyte(smyte::Command::GET.in_millis()),
        "RL.PGET: RL.GET with times in milliseconds",
    ),
    spec(
        "rl.psessionize",
        Arity::between(3, 10),
        "write",
        Handler::Smyte(smyte::Command::SESSIONIZE.in_millis()),
        "RL.PSESSIONIZE: RL.SESSIONIZE with times in milliseconds",
    ),
    spec(
        "tg.check",
        Arity {
            min: 1,
            max: 5,
            step: 2,
        },
        "write",
        Handler::Check,
        "TG.CHECK key [COST n] [PLAN p]: decide the key by the live rules (as if on plan p); [1|0, remaining, retry-after ms, reset ms, rule]",
    ),
    spec(
        "tg.peek",
        Arity {
            min: 1,
            max: 3,
            step: 2,
        },
        "readonly",
        Handler::Peek,
        "TG.PEEK key [PLAN p]: TG.CHECK taking nothing",
    ),
    spec(
        "tg.explain",
        Arity {
            min: 1,
            max: 3,
            step: 2,
        },
        "readonly",
        Handler::Explain,
        "TG.EXPLAIN key [PLAN p]: which rule, plan and bucket the key uses, and why",
    ),
    spec(
        "tg.charge",
        Arity::exactly(2),
        "write",
        Handler::Charge,
        "TG.CHARGE key n: take n tokens even past empty (a cost learned afterwards); answers as TG.CHECK",
    ),
    spec(
        "tg.refund",
        Arity::exactly(2),
        "write",
        Handler::Refund,
        "TG.REFUND key n: give n tokens back, never past full; answers as TG.PEEK after it",
    ),
    spec(
        "ping",
        Arity::between(0, 1),
        "fast",
        Handler::Ping,
        "PING [message]",
    ),
    spec(
        "echo",
        Arity::exactly(1),
        "fast",
        Handler::Echo,
        "ECHO message",
    ),
    spec(
        "hello",
        Arity::at_least(0),
        "fast",
        Handler::Hello,
        "HELLO [protover [AUTH username password] [SETNAME name]]",
    ),
    spec(
        "auth",
        Arity::between(1, 2),
        "fast",
        Handler::Auth,
        "AUTH [username] password",
    ),
    spec(
        "client",
        Arity::at_least(1),
        "admin",
        Handler::Client,
        "CLIENT SETNAME | GETNAME | ID | SETINFO | INFO",
    ),
    spec(
        "select",
        Arity::exactly(1),
        "fast",
        Handler::Select,
        "SELECT 0: the only database",
    ),
    spec(
        "command",
        Arity::at_least(0),
        "loading",
        Handler::Command,
        "COMMAND [COUNT | INFO name... | DOCS]",
    ),
    spec(
        "config",
        Arity::at_least(2),
        "admin",
        Handler::Config,
        "CONFIG GET pattern...: what clients ask on connect",
    ),
    spec(
        "info",
        Arity::between(0, 1),
        "loading",
        Handler::Info,
        "INFO [section]",
    ),
    spec("quit", Arity::at_least(0), "fast", Handler::Quit, "QUIT"),
    spec("reset", Arity::exactly(0), "fast", Handler::Reset, "RESET"),
];

/// The command `name` (lower-case) names, and its place in [`COMMANDS`].
pub(super) fn find(name: &str) -> Option<(usize, &'static Spec)> {
    COMMANDS
        .iter()
        .enumerate()
        .find(|(_, spec)| spec.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arities_read_as_redis_writes_them() {
        let arity = |name: &str| find(name).unwrap().1.arity;
        assert_eq!(arity("rl.reduce").redis(), -4);
        assert_eq!(arity("tg.peek").redis(), -2);
        assert_eq!(arity("reset").redis(), 1);
        assert_eq!(arity("ping").redis(), -1);
        let check = arity("tg.check");
        assert!(check.accepts(1) && !check.accepts(2) && check.accepts(3) && !check.accepts(4));
        assert!(check.accepts(5) && !check.accepts(6), "COST and PLAN");
        assert!(arity("rl.get").accepts(8) && !arity("rl.get").accepts(9));
    }

    #[test]
    fn names_are_unique_and_lower_case() {
        for (i, spec) in COMMANDS.iter().enumerate() {
            assert_eq!(spec.name, spec.name.to_ascii_lowercase());
            assert_eq!(find(spec.name).map(|(at, _)| at), Some(i), "{}", spec.name);
        }
    }
}
