//! A rate-limiting reverse proxy with an admin listener: tollgate's gateway.
//!
//! ```sh
//! cargo run --release --example gateway            # demo upstream, config/gateway.toml
//! cargo run --release --example gateway -- --upstream http://127.0.0.1:8000 --listen 0.0.0.0:8080
//! cargo run --release --example gateway -- --check # validate the config and print the rules
//! cargo run --release --example gateway -- --print-schema > tollgate.schema.json
//! ```
//!
//! Flags win over the config's `[gateway]` table, which wins over the defaults. SIGHUP
//! re-reads the config (saving it does too); SIGTERM or Ctrl-C drains and exits.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tollgate::Limits;
use tollgate::gateway::{Gateway, GatewayOptions, describe_rules, shutdown_signal};

/// tollgate's rate-limiting reverse proxy.
#[derive(Debug, Parser)]
#[command(name = "gateway", version)]
struct Flags {
    /// Config file or http(s):// URL; repeat to layer them (later ones override earlier ones
    /// rule by rule).
    #[arg(
        long = "config",
        value_name = "PATH",
        default_value = "config/gateway.toml"
    )]
    config: Vec<PathBuf>,
    /// Where the proxy listens [default: [gateway] listen, else 127.0.0.1:8080].
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Where requests go, http://host:port[/prefix] [default: [gateway] upstream, else a
    /// built-in demo upstream].
    #[arg(long, value_name = "URL", value_parser = tollgate::config::parse_upstream)]
    upstream: Option<http::Uri>,
    /// Where the admin listener listens [default: [gateway] admin, else 127.0.0.1:9090].
    #[arg(long, value_name = "ADDR")]
    admin: Option<SocketAddr>,
    /// Also serve the Redis protocol (smyte's RL.* and tollgate's TG.* commands) on ADDR
    /// [default: [gateway] resp, else off; without ADDR: 127.0.0.1:9049].
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:9049")]
    resp: Option<SocketAddr>,
    /// Also serve Envoy's rate limit service (gRPC, envoy.service.ratelimit.v3) on ADDR
    /// [default: [gateway] grpc, else off; without ADDR: 127.0.0.1:8081].
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:8081")]
    grpc: Option<SocketAddr>,
    /// How long to wait for the upstream's response headers, e.g. 30s.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    upstream_timeout: Option<Duration>,
    /// How long SIGTERM waits for requests in flight, e.g. 10s.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, default_value = "10s")]
    shutdown_grace: Duration,
    /// How long a client has to send a request's headers before its connection is closed
    /// (slowloris defence), e.g. 10s.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, default_value = "10s")]
    header_read_timeout: Duration,
    /// Validate the config, print the rule table (or the errors) and exit 0 or 1.
    #[arg(long)]
    check: bool,
    /// Print the config file's JSON Schema (for editors: `#:schema ./tollgate.schema.json`
    /// on a config's first line) and exit.
    #[arg(long)]
    print_schema: bool,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    tollgate::config::parse_duration(text)
        .ok_or_else(|| format!("\"{text}\" is not a duration like \"30s\""))
}

#[tokio::main]
async fn main() -> ExitCode {
    let flags = Flags::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();

    if flags.print_schema {
        use std::io::Write as _;
        let schema = tollgate::config::json_schema();
        let text = serde_json::to_string_pretty(&schema).unwrap_or_default();
        return match writeln!(std::io::stdout().lock(), "{text}") {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("gateway: cannot write the schema: {error}");
                ExitCode::FAILURE
            }
        };
    }

    if flags.check {
        return match Limits::load(&flags.config) {
            Ok(limits) => {
                eprint!("{}", describe_rules(&limits.rules()));
                eprintln!(
                    "config ok: {} rule(s) from {:?}",
                    limits.rules().rules().len(),
                    flags.config
                );
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("{error}");
                ExitCode::FAILURE
            }
        };
    }

    let mut options = GatewayOptions::new(flags.config);
    options.listen = flags.listen;
    options.upstream = flags.upstream;
    options.admin = flags.admin;
    options.resp = flags.resp;
    options.grpc = flags.grpc;
    options.upstream_timeout = flags.upstream_timeout;
    options.shutdown_grace = flags.shutdown_grace;
    options.header_read_timeout = flags.header_read_timeout;
    let gateway = match Gateway::start(options).await {
        Ok(gateway) => gateway,
        Err(error) => {
            // An invalid config at start-up is fatal: file, line, column and what is wrong.
            eprintln!("gateway: {error}");
            return ExitCode::FAILURE;
        }
    };
    let upstream = if gateway.is_demo() {
        " (built-in demo)".to_owned()
    } else {
        String::new()
    };
    eprintln!(
        "gateway: proxying http://{} -> {}{upstream}\ngateway: admin page http://{}/",
        gateway.listen_addr(),
        gateway.upstream(),
        gateway.admin_addr()
    );
    if let Some(resp) = gateway.resp_addr() {
        eprintln!(
            "gateway: Redis protocol on {resp} (redis-cli -p {})",
            resp.port()
        );
    }
    if let Some(grpc) = gateway.grpc_addr() {
        eprintln!("gateway: Envoy rate limit service (gRPC) on {grpc}");
    }
    gateway.run_until(shutdown_signal()).await;
    ExitCode::SUCCESS
}
