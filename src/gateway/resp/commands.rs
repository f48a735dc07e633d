//! Running one command: what common clients send on connect (`PING`, `HELLO`, `AUTH`,
//! `CLIENT`, `SELECT`, `COMMAND`, `INFO`, `CONFIG GET`, `QUIT`, `RESET`), smyte's `RL.*` and
//! tollgate's `TG.*`. Errors are Redis's words; an unknown command is an error and the
//! connection stays usable.

use bytes::BytesMut;

use super::protocol::Reply;
use super::rules;
use super::smyte::{self, INVALID_INTEGER};
use super::state::{COUNTED, Session, Shared};
use crate::CallerBucket;
use crate::gateway::constant_time_eq;
use crate::store::Store;

/// One latency sample in this many commands per connection.
const TIME_EVERY: u32 = 16;

/// Runs the command `args` (name first) and writes its reply to `out`.
pub(super) async fn execute<St: Store>(
    shared: &Shared<St>,
    session: &mut Session,
    args: &[&[u8]],
    out: &mut BytesMut,
) {
    let Some(&raw_name) = args.first() else {
        return;
    };
    let mut lower = [0u8; 16];
    let name = match lower.get_mut(..raw_name.len()) {
        Some(buffer) => {
            buffer.copy_from_slice(raw_name);
            buffer.make_ascii_lowercase();
            std::str::from_utf8(buffer).unwrap_or("")
        }
        None => "",
    };
    let index = COUNTED
        .iter()
        .position(|&c| c == name)
        .unwrap_or(COUNTED.len() - 1);
    session.timed = session.timed.wrapping_add(1);
    let started = session
        .timed
        .is_multiple_of(TIME_EVERY)
        .then(std::time::Instant::now);
    let before = out.len();
    let mut reply = Reply::new(out, session.resp3);
    let rest = &args[1..];
    if !session.authenticated && !matches!(name, "auth" | "hello" | "quit" | "reset") {
        reply.error("NOAUTH Authentication required.");
    } else {
        run(shared, session, name, raw_name, rest, &mut reply).await;
    }
    if let Some(metrics) = shared.metrics(index) {
        metrics.calls.increment(1);
        if out.get(before) == Some(&b'-') {
            metrics.errors.increment(1);
        }
        if let Some(started) = started {
            metrics.seconds.record(started.elapsed().as_secs_f64());
        }
    }
}

async fn run<St: Store>(
    shared: &Shared<St>,
    session: &mut Session,
    name: &str,
    raw_name: &[u8],
    args: &[&[u8]],
    reply: &mut Reply<'_>,
) {
    if let Some(command) = smyte::Command::named(name) {
        if !command.arity().contains(&args.len()) {
            return wrong_arity(name, reply);
        }
        return take(shared, command, args, reply).await;
    }
    match (name, args.len()) {
        ("ping", 0) => reply.simple("PONG"),
        ("ping", 1) | ("echo", 1) => reply.bulk(args[0]),
        ("tg.check", 1 | 3) => rules::check(&shared.limits, args, true, reply).await,
        ("tg.peek", 1) => rules::check(&shared.limits, args, false, reply).await,
        ("tg.explain", 1) => rules::explain(&shared.limits, args, reply),
        ("hello", _) => hello(shared, session, args, reply),
        ("auth", 1 | 2) => auth(shared, session, args, reply),
        ("client", 1..) => client(session, args, reply),
        ("select", 1) if args[0] == b"0" => reply.simple("OK"),
        ("select", 1) => reply.error("ERR DB index is out of range"),
        ("command", _) => command(args, reply),
        ("config", 2..) if args[0].eq_ignore_ascii_case(b"get") => config_get(&args[1..], reply),
        ("info", 0 | 1) => reply.bulk(info().as_bytes()),
        ("quit", _) => {
            session.closing = true;
            reply.simple("OK");
        }
        ("reset", 0) => {
            session.resp3 = false;
            session.name = None;
            session.authenticated = shared.options.password.is_none();
            reply.simple("RESET");
        }
        (
            "ping" | "echo" | "tg.check" | "tg.peek" | "tg.explain" | "auth" | "client" | "select"
            | "config" | "info" | "reset",
            _,
        ) => wrong_arity(name, reply),
        _ => unknown(raw_name, args, reply),
    }
}

/// `RL.REDUCE` and company: parse as smyte does, take, answer.
async fn take<St: Store>(
    shared: &Shared<St>,
    command: smyte::Command,
    args: &[&[u8]],
    reply: &mut Reply<'_>,
) {
    let request = match smyte::parse(command, args, shared.limits.now()) {
        Ok(request) => request,
        Err(error) => return reply.error(error),
    };
    let key = String::from_utf8_lossy(args[0]);
    let Some(bucket) = CallerBucket::new(&key, request.max, request.refill, request.every) else {
        return reply.error(INVALID_INTEGER);
    };
    let decision = match shared
        .limits
        .take_from(&bucket, request.take, request.options)
        .await
    {
        Ok(decision) => decision,
        Err(error) => return reply.error(&format!("ERR {error}")),
    };
    let available = i64::try_from(decision.available_before().unwrap_or(0)).unwrap_or(i64::MAX);
    if command.session {
        let started = decision
            .session_started_at()
            .map_or(0, |t| t.as_unix_nanos() / 1_000_000);
        reply.array(2);
        reply.integer(available);
        reply.integer(i64::try_from(started).unwrap_or(i64::MAX));
    } else {
        reply.integer(available);
    }
}

/// `HELLO [protover [AUTH username password] [SETNAME name]]`
fn hello<St>(shared: &Shared<St>, session: &mut Session, args: &[&[u8]], reply: &mut Reply<'_>) {
    let protocol = match args.first() {
        None => i64::from(if session.resp3 { 3 } else { 2 }),
        Some(version) => match smyte::integer(Some(version)) {
            Ok(version @ (2 | 3)) => version,
            Ok(_) => return reply.error("NOPROTO unsupported protocol version"),
            Err(_) => return reply.error("ERR Protocol version is not an integer or out of range"),
        },
    };
    let mut rest = args.get(1..).unwrap_or_default();
    let mut name = None;
    while let Some(option) = rest.first() {
        if option.eq_ignore_ascii_case(b"auth") && rest.len() >= 3 {
            if !login(shared, rest[1], rest[2]) {
                return reply
                    .error("WRONGPASS invalid username-password pair or user is disabled.");
            }
            session.authenticated = true;
            rest = &rest[3..];
        } else if option.eq_ignore_ascii_case(b"setname") && rest.len() >= 2 {
            name = Some(String::from_utf8_lossy(rest[1]).into_owned());
            rest = &rest[2..];
        } else {
            return reply.error(&format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(option)
            ));
        }
    }
    if !session.authenticated {
        return reply.error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
    }
    if name.is_some() {
        session.name = name;
    }
    session.resp3 = protocol == 3;
    let mut reply = Reply::new(reply.out(), session.resp3);
    reply.map(7);
    reply.bulk(b"server");
    reply.bulk(b"tollgate");
    reply.bulk(b"version");
    reply.bulk(env!("CARGO_PKG_VERSION").as_bytes());
    reply.bulk(b"proto");
    reply.integer(protocol);
    reply.bulk(b"id");
    reply.integer(i64::try_from(session.id).unwrap_or(i64::MAX));
    reply.bulk(b"mode");
    reply.bulk(b"standalone");
    reply.bulk(b"role");
    reply.bulk(b"master");
    reply.bulk(b"modules");
    reply.array(0);
}

/// `AUTH [username] password`
fn auth<St>(shared: &Shared<St>, session: &mut Session, args: &[&[u8]], reply: &mut Reply<'_>) {
    if shared.options.password.is_none() {
        return reply.error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
    }
    let (user, password) = match args {
        [password] => (&b"default"[..], *password),
        [user, password] => (*user, *password),
        _ => return wrong_arity("auth", reply),
    };
    if login(shared, user, password) {
        session.authenticated = true;
        reply.simple("OK");
    } else {
        reply.error("WRONGPASS invalid username-password pair or user is disabled.");
    }
}

fn login<St>(shared: &Shared<St>, user: &[u8], password: &[u8]) -> bool {
    let expected = shared.options.password.as_deref().unwrap_or_default();
    // Both compared whatever the first gives, so the time says nothing about either.
    let user_ok = constant_time_eq(user, b"default");
    let password_ok = constant_time_eq(password, expected.as_bytes());
    user_ok && password_ok
}

/// `CLIENT SETNAME | GETNAME | ID | SETINFO | INFO`
fn client(session: &mut Session, args: &[&[u8]], reply: &mut Reply<'_>) {
    let sub = String::from_utf8_lossy(args[0]).to_ascii_lowercase();
    match (sub.as_str(), args.len()) {
        ("setname", 2) => {
            session.name = Some(String::from_utf8_lossy(args[1]).into_owned());
            reply.simple("OK");
        }
        ("getname", 1) => match &session.name {
            Some(name) => reply.bulk(name.as_bytes()),
            None => reply.null(),
        },
        ("id", 1) => reply.integer(i64::try_from(session.id).unwrap_or(i64::MAX)),
        ("setinfo", 3) => reply.simple("OK"),
        ("info", 1) => reply.bulk(
            format!(
                "id={} name={} resp={}\n",
                session.id,
                session.name.as_deref().unwrap_or(""),
                if session.resp3 { 3 } else { 2 }
            )
            .as_bytes(),
        ),
        ("setname" | "getname" | "id" | "setinfo" | "info", _) => wrong_arity("client", reply),
        _ => reply.error(&format!(
            "ERR unknown subcommand '{}'. Try CLIENT HELP.",
            clip(args[0])
        )),
    }
}

/// What `COMMAND` lists: name, arity (negative: at least), flags, first key, last key, step.
const COMMANDS: [(&str, i64, &str); 19] = [
    ("rl.reduce", -4, "write"),
    ("rl.get", -4, "readonly"),
    ("rl.sessionize", -4, "write"),
    ("rl.preduce", -4, "write"),
    ("rl.pget", -4, "readonly"),
    ("rl.psessionize", -4, "write"),
    ("tg.check", -2, "write"),
    ("tg.peek", 2, "readonly"),
    ("tg.explain", 2, "readonly"),
    ("ping", -1, "fast"),
    ("echo", 2, "fast"),
    ("hello", -1, "fast"),
    ("auth", -2, "fast"),
    ("client", -2, "admin"),
    ("select", 2, "fast"),
    ("command", -1, "loading"),
    ("info", -1, "loading"),
    ("quit", -1, "fast"),
    ("reset", 1, "fast"),
];

/// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name…`, `COMMAND DOCS`: enough for redis-cli.
fn command(args: &[&[u8]], reply: &mut Reply<'_>) {
    let entry = |reply: &mut Reply<'_>, (name, arity, flag): (&str, i64, &str)| {
        let keyed = name.starts_with("rl.") || name.starts_with("tg.");
        reply.array(6);
        reply.bulk(name.as_bytes());
        reply.integer(arity);
        reply.array(1);
        reply.simple(flag);
        for position in [1, 1, 1] {
            reply.integer(if keyed { position } else { 0 });
        }
    };
    let sub = args
        .first()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase());
    match sub.as_deref() {
        None => {
            reply.array(COMMANDS.len());
            for command in COMMANDS {
                entry(reply, command);
            }
        }
        Some("count") => reply.integer(COMMANDS.len() as i64),
        Some("docs") => reply.map(0),
        Some("info") => {
            let names = &args[1..];
            reply.array(names.len());
            for name in names {
                match COMMANDS
                    .iter()
                    .find(|c| c.0.as_bytes().eq_ignore_ascii_case(name))
                {
                    Some(&command) => entry(reply, command),
                    None => reply.null(),
                }
            }
        }
        Some(other) => reply.error(&format!(
            "ERR unknown subcommand '{}'. Try COMMAND HELP.",
            clip(other.as_bytes())
        )),
    }
}

/// `CONFIG GET`: what benchmarks and clients ask on connect (persistence), as a server
/// that keeps nothing on disk would answer; nothing else is configurable this way.
fn config_get(patterns: &[&[u8]], reply: &mut Reply<'_>) {
    let known: [(&[u8], &[u8]); 2] = [(b"save", b""), (b"appendonly", b"no")];
    let found: Vec<_> = known
        .iter()
        .filter(|(name, _)| {
            patterns
                .iter()
                .any(|p| p.eq_ignore_ascii_case(name) || *p == b"*")
        })
        .collect();
    reply.map(found.len());
    for (name, value) in found {
        reply.bulk(name);
        reply.bulk(value);
    }
}

fn info() -> String {
    format!(
        "# Server\r\nredis_version:7.2.0\r\ntollgate_version:{}\r\nredis_mode:standalone\r\n\
         # Tollgate\r\ncommands:RL.REDUCE,RL.GET,RL.SESSIONIZE,RL.PREDUCE,RL.PGET,RL.PSESSIONIZE,TG.CHECK,TG.PEEK,TG.EXPLAIN\r\n",
        env!("CARGO_PKG_VERSION")
    )
}

fn wrong_arity(name: &str, reply: &mut Reply<'_>) {
    reply.error(&format!(
        "ERR wrong number of arguments for '{name}' command"
    ));
}

fn unknown(name: &[u8], args: &[&[u8]], reply: &mut Reply<'_>) {
    let mut message = format!(
        "ERR unknown command '{}', with args beginning with: ",
        clip(name)
    );
    for arg in args.iter().take(8) {
        message.push_str(&format!("'{}' ", clip(arg)));
    }
    reply.error(&message);
}

/// A client's bytes, shortened and made printable, for an error message.
fn clip(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(128)])
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}
