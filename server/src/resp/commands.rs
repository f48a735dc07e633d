//! Running one command of the [table](super::table): what common clients send on connect
//! (`PING`, `HELLO`, `AUTH`, `CLIENT`, `SELECT`, `COMMAND`, `INFO`, `CONFIG GET`, `QUIT`,
//! `RESET`), smyte's `RL.*` and tollgate's `TG.*`. Errors are Redis's words; an unknown
//! command is an error and the connection stays usable.

use bytes::BytesMut;

use super::protocol::Reply;
use super::rules;
use super::smyte::{self, INVALID_INTEGER};
use super::state::{Session, Shared};
use super::table::{self, COMMANDS, Handler, Spec};
use crate::constant_time_eq;
use tollgate::CallerBucket;
use tollgate::store::Store;

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
    let found = table::find(name);
    session.timed = session.timed.wrapping_add(1);
    let started = session
        .timed
        .is_multiple_of(TIME_EVERY)
        .then(std::time::Instant::now);
    let before = out.len();
    let mut reply = Reply::new(out, session.resp3);
    let rest = &args[1..];
    let may_run = session.authenticated || found.is_some_and(|(_, spec)| spec.before_auth());
    match found {
        _ if !may_run => reply.error("NOAUTH Authentication required."),
        None => unknown(raw_name, rest, &mut reply),
        Some((_, spec)) if !spec.arity.accepts(rest.len()) => wrong_arity(spec.name, &mut reply),
        Some((_, spec)) if crate::telemetry::started() => {
            let span = crate::telemetry::resp_span(spec.name);
            let running = run(shared, session, spec.handler, rest, &mut reply);
            tracing::Instrument::instrument(running, span.clone()).await;
            let outcome = if out.get(before) == Some(&b'-') {
                "error"
            } else {
                "answered"
            };
            span.record("ratelimit.outcome", outcome);
        }
        Some((_, spec)) => run(shared, session, spec.handler, rest, &mut reply).await,
    }
    let index = found.map_or(COMMANDS.len(), |(index, _)| index);
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

/// Runs a command whose arguments fit its arity.
async fn run<St: Store>(
    shared: &Shared<St>,
    session: &mut Session,
    handler: Handler,
    args: &[&[u8]],
    reply: &mut Reply<'_>,
) {
    match handler {
        Handler::Smyte(command) => take(shared, command, args, reply).await,
        Handler::Check => rules::check(&shared.limits, args, true, reply).await,
        Handler::Peek => rules::check(&shared.limits, args, false, reply).await,
        Handler::Explain => rules::explain(&shared.limits, args, reply),
        Handler::Charge => rules::adjust(&shared.limits, args, true, reply).await,
        Handler::Refund => rules::adjust(&shared.limits, args, false, reply).await,
        Handler::Ping => match args.first() {
            None => reply.simple("PONG"),
            Some(message) => reply.bulk(message),
        },
        Handler::Echo => reply.bulk(args[0]),
        Handler::Hello => hello(shared, session, args, reply),
        Handler::Auth => auth(shared, session, args, reply),
        Handler::Client => client(session, args, reply),
        Handler::Select if args[0] == b"0" => reply.simple("OK"),
        Handler::Select => reply.error("ERR DB index is out of range"),
        Handler::Command => command(args, reply),
        Handler::Config if args[0].eq_ignore_ascii_case(b"get") => config_get(&args[1..], reply),
        Handler::Config => wrong_arity("config", reply),
        Handler::Info => reply.bulk(info().as_bytes()),
        Handler::Quit => {
            session.closing = true;
            reply.simple("OK");
        }
        Handler::Reset => {
            session.resp3 = false;
            session.name = None;
            session.authenticated = shared.options.password.is_none();
            reply.simple("RESET");
        }
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

/// `COMMAND`, `COMMAND COUNT`, `COMMAND INFO name…`, `COMMAND DOCS`: enough for redis-cli.
fn command(args: &[&[u8]], reply: &mut Reply<'_>) {
    // Name, arity (negative: at least), flags, first key, last key, step.
    let entry = |reply: &mut Reply<'_>, spec: &Spec| {
        reply.array(6);
        reply.bulk(spec.name.as_bytes());
        reply.integer(spec.arity.redis());
        reply.array(1);
        reply.simple(spec.flag);
        for position in [1, 1, 1] {
            reply.integer(if spec.keyed() { position } else { 0 });
        }
    };
    let sub = args
        .first()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase());
    match sub.as_deref() {
        None => {
            reply.array(COMMANDS.len());
            for spec in &COMMANDS {
                entry(reply, spec);
            }
        }
        Some("count") => reply.integer(COMMANDS.len() as i64),
        Some("docs") => {
            reply.map(COMMANDS.len());
            for spec in &COMMANDS {
                reply.bulk(spec.name.as_bytes());
                reply.map(1);
                reply.bulk(b"summary");
                reply.bulk(spec.help.as_bytes());
            }
        }
        Some("info") => {
            let names = &args[1..];
            reply.array(names.len());
            for name in names {
                match COMMANDS
                    .iter()
                    .find(|spec| spec.name.as_bytes().eq_ignore_ascii_case(name))
                {
                    Some(spec) => entry(reply, spec),
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
    let limiter: Vec<String> = COMMANDS
        .iter()
        .filter(|spec| spec.keyed())
        .map(|spec| spec.name.to_ascii_uppercase())
        .collect();
    format!(
        "# Server\r\nredis_version:7.2.0\r\ntollgate_version:{}\r\nredis_mode:standalone\r\n\
         # Tollgate\r\ncommands:{}\r\n",
        env!("CARGO_PKG_VERSION"),
        limiter.join(",")
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
