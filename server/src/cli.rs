//! The `tollgate` binary (what `cargo run -p tollgate-server` runs): flags and
//! environment into [`Settings`], logging, `--check` and `--print-schema`, then the
//! [`Gateway`] until Ctrl-C or SIGTERM.
//!
//! ```sh
//! tollgate                                   # demo upstream, config/gateway.toml
//! tollgate --upstream http://127.0.0.1:8000 --listen 0.0.0.0:8080
//! TOLLGATE_LISTEN=0.0.0.0:8080 tollgate      # every flag also reads TOLLGATE_<FLAG>
//! tollgate --check                           # validate the config and print the rules
//! tollgate --print-config                    # every setting in force, and where from
//! tollgate --print-schema > tollgate.schema.json
//! tollgate suggest --admin http://127.0.0.1:9090 --refuse 1 > limits.diff
//! ```
//!
//! SIGHUP re-reads the config (saving it does too); SIGTERM or Ctrl-C drains and exits.

use std::io::Write as _;
use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _};
use tollgate::Limits;

use crate::logging::{LogFormat, Logging};
use crate::telemetry::{TelemetryFile, TelemetrySettings, TelemetryTable};
use crate::{FileSettings, Gateway, GatewayTable, Settings, describe_rules, shutdown_signal};

/// tollgate's rate-limit service: a rate-limiting reverse proxy with an admin listener,
/// and optionally the Redis protocol and Envoy's rate limit service.
#[derive(Debug, clap::Parser)]
#[command(name = "tollgate", version)]
struct Flags {
    #[command(flatten)]
    settings: Settings,
    /// Validate the config, print the rule table (or the errors) and exit 0 or 1.
    #[arg(long)]
    check: bool,
    /// Print the config file's JSON Schema (for editors: `#:schema ./tollgate.schema.json`
    /// on a config's first line) and exit.
    #[arg(long)]
    print_schema: bool,
    /// Print each setting's value in force and where it came from (flag, env, file,
    /// default), secrets redacted, and exit.
    #[arg(long)]
    print_config: bool,
    /// Where traces and metrics go over OTLP (`http://host:4317` for gRPC, a URL ending in
    /// `/v1/traces` for HTTP/protobuf); wins over `[telemetry] otlp_endpoint`, which wins
    /// over `OTEL_EXPORTER_OTLP_ENDPOINT` [default: none, telemetry off].
    #[arg(long, value_name = "URL", env = "TOLLGATE_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// The `service.name` telemetry carries; wins over `[telemetry] service_name` and
    /// `OTEL_SERVICE_NAME` [default: tollgate].
    #[arg(long, value_name = "NAME", env = "TOLLGATE_SERVICE_NAME")]
    service_name: Option<String>,
    /// The share of new traces kept, 0 to 1; wins over `[telemetry] sample_ratio` and
    /// `OTEL_TRACES_SAMPLER_ARG` [default: 1].
    #[arg(long, value_name = "RATIO", env = "TOLLGATE_SAMPLE_RATIO")]
    sample_ratio: Option<f64>,
    #[command(subcommand)]
    verb: Option<Verb>,
}

/// What else the binary does besides serving.
#[derive(Debug, clap::Subcommand)]
enum Verb {
    /// Ask a running admin listener for the limits its clients' peaks suggest, and print
    /// them as a unified diff of the config files (apply with `patch -p0`).
    Suggest(crate::suggest::SuggestArgs),
    /// Issue an API key: print a new random key (on stderr, once) and the line for a key
    /// table (on stdout) — its SHA-256 digest, the owner's id and plan. With `--stdin`, the
    /// line for a key read from standard input instead.
    ApiKey(ApiKeyArgs),
}

/// `tollgate api-key ID [--plan PLAN] [--stdin]`.
#[derive(Debug, clap::Args)]
struct ApiKeyArgs {
    /// Whose key it is: the identity its requests are counted under.
    id: String,
    /// The plan the key's requests are on.
    #[arg(long)]
    plan: Option<String>,
    /// Read the key from standard input (its first line) rather than make one.
    #[arg(long)]
    stdin: bool,
}

/// Runs the service as the command line asks; what `main` returns.
pub fn main() -> ExitCode {
    let command = Flags::command();
    if let Err(message) = environment::check(&command) {
        eprintln!("tollgate: {message}");
        return ExitCode::from(2);
    }
    let matches = command.get_matches();
    let flags = match Flags::from_arg_matches(&matches) {
        Ok(flags) => flags,
        Err(error) => error.exit(),
    };
    let levels = Levels::of(&flags.settings, &matches);
    let logging = Logging::install(
        flags.settings.log_format.unwrap_or_default(),
        &levels.level(None),
    );
    if flags.print_schema {
        let text = serde_json::to_string_pretty(&crate::json_schema()).unwrap_or_default();
        return match writeln!(std::io::stdout().lock(), "{text}") {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("tollgate: cannot write the schema: {error}");
                ExitCode::FAILURE
            }
        };
    }
    if flags.check {
        return check(&flags.settings);
    }
    if flags.print_config {
        return print_config(&flags.settings, &matches);
    }
    match &flags.verb {
        Some(Verb::Suggest(args)) => return suggest(args),
        Some(Verb::ApiKey(args)) => return api_key(args),
        None => {}
    }
    match runtime(tokio::runtime::Builder::new_multi_thread()) {
        Ok(runtime) => {
            let telemetry = TelemetrySettings {
                otlp_endpoint: flags.otlp_endpoint,
                service_name: flags.service_name,
                sample_ratio: flags.sample_ratio,
            };
            runtime.block_on(serve(flags.settings, telemetry, logging, levels))
        }
        Err(failed) => failed,
    }
}

/// Where the log's filter comes from, weighed: `--log-level`, then `RUST_LOG`, then
/// `TOLLGATE_LOG_LEVEL`, then the file's `[gateway] log_level`, then `info`.
struct Levels {
    flag: Option<String>,
    rust_log: Option<String>,
    env: Option<String>,
}

impl Levels {
    fn of(settings: &Settings, matches: &clap::ArgMatches) -> Levels {
        let given = settings.log_level.clone();
        let source = matches.value_source("log_level");
        Levels {
            flag: given
                .clone()
                .filter(|_| source == Some(clap::parser::ValueSource::CommandLine)),
            rust_log: std::env::var("RUST_LOG")
                .ok()
                .filter(|value| !value.trim().is_empty()),
            env: given.filter(|_| source == Some(clap::parser::ValueSource::EnvVariable)),
        }
    }

    /// The filter in force, `file` being the config file's `log_level`.
    fn level(&self, file: Option<&str>) -> String {
        self.flag
            .clone()
            .or_else(|| self.rust_log.clone())
            .or_else(|| self.env.clone())
            .or_else(|| file.map(str::to_owned))
            .unwrap_or_else(|| "info".to_owned())
    }
}

/// A runtime from `builder` with I/O and timers, or (said on stderr) the failure to exit with.
fn runtime(mut builder: tokio::runtime::Builder) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|error| {
        eprintln!("tollgate: cannot start the runtime: {error}");
        ExitCode::FAILURE
    })
}

/// `tollgate api-key`: a key table's line on stdout, and a new key (if one was made) on
/// stderr, so `>> keys.toml` keeps the key out of the file.
fn api_key(args: &ApiKeyArgs) -> ExitCode {
    match api_key_line(args, std::io::stdin().lock()) {
        Ok((line, made)) => {
            if let Some(key) = made {
                eprintln!("tollgate: the new key (shown once; hand it to its owner): {key}");
            }
            match writeln!(std::io::stdout().lock(), "{line}") {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("tollgate: cannot write the line: {error}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(message) => {
            eprintln!("tollgate: {message}");
            ExitCode::from(2)
        }
    }
}

/// The key table line for `args`' key (read from `input` with `--stdin`, else made: 32
/// random bytes as `tg_` and 64 hex digits), and the key if it was made here.
fn api_key_line(
    args: &ApiKeyArgs,
    mut input: impl std::io::BufRead,
) -> Result<(String, Option<String>), String> {
    if args.id.is_empty() || args.id.len() > tollgate::key::MAX_HEADER_IDENTITY {
        return Err(format!(
            "the id must be 1 to {} bytes",
            tollgate::key::MAX_HEADER_IDENTITY
        ));
    }
    if let Some(plan) = &args.plan
        && (plan.is_empty()
            || !plan
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
    {
        return Err(format!(
            "plan name {plan:?} must be letters, digits, '-', '_' or '.'"
        ));
    }
    let (key, made) = if args.stdin {
        let mut line = String::new();
        input
            .read_line(&mut line)
            .map_err(|error| format!("cannot read the key from standard input: {error}"))?;
        let key = line.trim_end_matches(['\r', '\n']).to_owned();
        if key.is_empty() {
            return Err("no key on standard input".to_owned());
        }
        (key, false)
    } else {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|error| format!("cannot make a random key: {error}"))?;
        let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        (format!("tg_{hex}"), true)
    };
    let digest = tollgate::key::ApiKeys::digest_hex(key.as_bytes());
    let mut fields = format!("id = {}", toml_string(&args.id));
    if let Some(plan) = &args.plan {
        fields.push_str(&format!(", plan = {}", toml_string(plan)));
    }
    Ok((
        format!("\"{digest}\" = {{ {fields} }}"),
        made.then_some(key),
    ))
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    toml_edit::Value::from(text).to_string()
}

/// `tollgate suggest`: the diff on stdout, or why there is none on stderr.
fn suggest(args: &crate::suggest::SuggestArgs) -> ExitCode {
    let runtime = match runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(runtime) => runtime,
        Err(failed) => return failed,
    };
    match runtime.block_on(crate::suggest::run(args)) {
        Ok(diff) => match write!(std::io::stdout().lock(), "{diff}") {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("tollgate: cannot write the diff: {error}");
                ExitCode::FAILURE
            }
        },
        Err(error) => {
            eprintln!("tollgate: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The config files loaded as the service reads them (its own tables known), to be
/// checked or printed, not served.
fn load_checked(
    settings: &Settings,
    sources: &[std::path::PathBuf],
) -> Result<Limits, tollgate::config::ConfigError> {
    Limits::builder()
        .extension(GatewayTable::new(settings.clone()))
        .extension(TelemetryTable)
        .extension(crate::rlqs_table::RlqsTable)
        .load(sources)
}

/// `--check`: like `nginx -t`.
fn check(settings: &Settings) -> ExitCode {
    let sources = settings.config_sources();
    let loaded = load_checked(settings, &sources);
    match loaded {
        Ok(limits) => {
            eprint!("{}", describe_rules(&limits.rules()));
            eprintln!(
                "config ok: {} rule(s) from {sources:?}",
                limits.rules().rules().len()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

/// `--print-config`: every setting in force, and which place gave it.
fn print_config(settings: &Settings, matches: &clap::ArgMatches) -> ExitCode {
    let sources = settings.config_sources();
    let loaded = load_checked(settings, &sources);
    let limits = match loaded {
        Ok(limits) => limits,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let rules = limits.rules();
    let file = rules
        .extension::<FileSettings>()
        .map(|file| file.0.clone())
        .unwrap_or_default();
    let resolved = settings.over(&file);
    let given_by_file: std::collections::BTreeMap<&str, bool> = file
        .rows()
        .into_iter()
        .map(|(name, _, given)| (name, given))
        .collect();
    let flags: Vec<String> = Flags::command()
        .get_arguments()
        .map(|arg| arg.get_id().to_string())
        .collect();
    let mut out = String::new();
    for (name, value, _) in resolved.rows() {
        let given = flags
            .iter()
            .any(|flag| flag == name)
            .then(|| matches.value_source(name))
            .flatten();
        let source = match given {
            Some(clap::parser::ValueSource::CommandLine) => "flag".to_owned(),
            Some(clap::parser::ValueSource::EnvVariable) => {
                format!("env {}", environment::variable(name))
            }
            _ if given_by_file.get(name) == Some(&true) => "file".to_owned(),
            _ => "default".to_owned(),
        };
        out.push_str(&format!("{name} = {value}  # {source}\n"));
    }
    match write!(std::io::stdout().lock(), "{out}") {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tollgate: cannot write the settings: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Serves until a signal; `telemetry` holds what flags and `TOLLGATE_*` said of telemetry.
async fn serve(
    settings: Settings,
    telemetry: TelemetrySettings,
    mut logging: Logging,
    levels: Levels,
) -> ExitCode {
    let format = settings.log_format;
    let gateway = match Gateway::start_with_telemetry(settings, telemetry.clone()).await {
        Ok(gateway) => gateway,
        Err(error) => {
            // An invalid config at start-up is fatal: file, line, column and what is wrong.
            say(&logging, &format!("tollgate: {error}"));
            return ExitCode::FAILURE;
        }
    };
    // The config's [gateway] table is read now: its log settings fill what flags and the
    // environment left open.
    let file = gateway
        .limits()
        .rules()
        .extension::<FileSettings>()
        .map(|file| file.0.clone())
        .unwrap_or_default();
    logging.change(
        format.or(file.log_format).unwrap_or_default(),
        &levels.level(file.log_level.as_deref()),
    );
    // Flags, then [telemetry], then OTEL_*: traces to a collector, from now on.
    let telemetry = telemetry.over(
        &gateway
            .limits()
            .rules()
            .extension::<TelemetryFile>()
            .map(|file| file.0.clone())
            .unwrap_or_default(),
    );
    match telemetry.resolve(|name| std::env::var(name).ok()) {
        Ok(None) => {}
        Ok(Some(resolved)) => {
            if let Err(error) = logging.export_to(&resolved) {
                say(&logging, &format!("tollgate: {error}"));
                return ExitCode::FAILURE;
            }
            say(
                &logging,
                &format!(
                    "tollgate: traces to {} (OTLP over {}), {}% of new traces kept{}",
                    resolved.endpoint,
                    over(resolved.protocol),
                    resolved.sample_ratio * 100.0,
                    resolved
                        .metrics
                        .as_ref()
                        .map_or(String::new(), |metrics| format!(
                            "; metrics to {} (OTLP over {}) every {} s",
                            metrics.endpoint,
                            over(metrics.protocol),
                            metrics.interval.as_secs_f64()
                        )),
                ),
            );
        }
        Err(error) => {
            say(&logging, &format!("tollgate: {error}"));
            return ExitCode::FAILURE;
        }
    }
    let upstream = if gateway.is_demo() {
        " (built-in demo)"
    } else {
        ""
    };
    say(
        &logging,
        &format!(
            "tollgate: proxying http://{} -> {}{upstream}",
            gateway.listen_addr(),
            gateway.upstream()
        ),
    );
    say(
        &logging,
        &format!("tollgate: admin page http://{}/", gateway.admin_addr()),
    );
    if let Some(resp) = gateway.resp_addr() {
        say(
            &logging,
            &format!(
                "tollgate: Redis protocol on {resp} (redis-cli -p {})",
                resp.port()
            ),
        );
    }
    if let Some(grpc) = gateway.grpc_addr() {
        say(
            &logging,
            &format!("tollgate: Envoy rate limit service (gRPC) on {grpc}"),
        );
    }
    if let Some(rlqs) = gateway.rlqs_addr() {
        say(
            &logging,
            &format!("tollgate: Envoy rate limit quota service (RLQS, gRPC) on {rlqs}"),
        );
    }
    gateway.run_until(shutdown_signal()).await;
    // The last spans, flushed (bounded by the export timeout) off the runtime's workers.
    let _ = tokio::task::spawn_blocking(move || logging.flush_telemetry()).await;
    ExitCode::SUCCESS
}

/// How a protocol is named in the start-up line.
fn over(protocol: crate::telemetry::Protocol) -> &'static str {
    match protocol {
        crate::telemetry::Protocol::Grpc => "gRPC",
        crate::telemetry::Protocol::HttpProtobuf => "HTTP",
    }
}

/// A line for the operator (the addresses people and scripts read, a fatal error), whatever
/// the log level: as it is on a text log, as a JSON object shaped like the log's events on
/// a JSON one, so every line stays one object.
fn say(logging: &Logging, line: &str) {
    match logging.format() {
        LogFormat::Text => eprintln!("{line}"),
        LogFormat::Json => eprintln!("{}", crate::logging::json_line("INFO", "tollgate", line)),
    }
}

/// The environment's part of the settings: `TOLLGATE_<FLAG>` variables checked before
/// anything starts.
mod environment {
    /// The variable that gives the setting `name` (`upstream_timeout` →
    /// `TOLLGATE_UPSTREAM_TIMEOUT`).
    pub(super) fn variable(name: &str) -> String {
        format!("TOLLGATE_{}", name.to_ascii_uppercase())
    }

    /// Refuses the environment when a `TOLLGATE_*` variable looks like a misspelt setting,
    /// or a setting's variable holds a value its flag would not take; says which variable.
    pub(super) fn check(command: &clap::Command) -> Result<(), String> {
        let known: Vec<String> = command
            .get_arguments()
            .filter_map(|arg| arg.get_env())
            .map(|env| env.to_string_lossy().into_owned())
            .collect();
        for (name, _) in std::env::vars_os() {
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with("TOLLGATE_") || known.iter().any(|k| k == name) {
                continue;
            }
            if let Some(near) = known
                .iter()
                .find(|known| strsim::levenshtein(known, name) <= 2)
            {
                return Err(format!(
                    "the environment variable {name} is not a setting; did you mean {near}?"
                ));
            }
        }
        // What the environment alone gives, parsed as the flags would be.
        if let Err(error) = command.clone().try_get_matches_from(["tollgate"]) {
            let argument = error
                .get(clap::error::ContextKind::InvalidArg)
                .map(|arg| arg.to_string());
            let culprit = command.get_arguments().find(|arg| {
                let flag = argument
                    .as_deref()
                    .and_then(|text| text.split_whitespace().next());
                arg.get_long()
                    .is_some_and(|long| flag == Some(format!("--{long}").as_str()))
            });
            if let Some(env) = culprit.and_then(|arg| arg.get_env()) {
                let value = std::env::var(env).unwrap_or_default();
                let reason = error
                    .render()
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .trim_start_matches("error: ")
                    .to_owned();
                return Err(format!(
                    "the environment variable {} has a bad value \"{value}\": {reason}",
                    env.to_string_lossy()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(id: &str, plan: Option<&str>, stdin: bool) -> ApiKeyArgs {
        ApiKeyArgs {
            id: id.to_owned(),
            plan: plan.map(str::to_owned),
            stdin,
        }
    }

    #[test]
    fn the_line_names_the_keys_digest_and_never_the_key() {
        let (line, made) =
            api_key_line(&args("team \"a\"", Some("pro"), true), &b"tg_secret\n"[..]).unwrap();
        assert_eq!(made, None);
        let digest = tollgate::key::ApiKeys::digest_hex(b"tg_secret");
        assert_eq!(
            line,
            format!("\"{digest}\" = {{ id = 'team \"a\"', plan = \"pro\" }}")
        );
        assert!(!line.contains("tg_secret"));

        let (line, made) = api_key_line(&args("ada", None, false), &b""[..]).unwrap();
        let key = made.unwrap();
        assert!(key.starts_with("tg_") && key.len() == 67, "{key}");
        assert!(line.contains(&tollgate::key::ApiKeys::digest_hex(key.as_bytes())));
        assert!(!line.contains(&key));
    }

    #[test]
    fn bad_ids_plans_and_empty_input_are_refused() {
        assert!(api_key_line(&args("", None, false), &b""[..]).is_err());
        assert!(api_key_line(&args("ada", Some("no spaces"), false), &b""[..]).is_err());
        assert!(api_key_line(&args("ada", None, true), &b"\n"[..]).is_err());
    }
}
