//! The `tollgate` binary (and `cargo run --example gateway`, the same program): flags and
//! environment into [`Settings`], logging, `--check` and `--print-schema`, then the
//! [`Gateway`] until Ctrl-C or SIGTERM.
//!
//! ```sh
//! tollgate                                   # demo upstream, config/gateway.toml
//! tollgate --upstream http://127.0.0.1:8000 --listen 0.0.0.0:8080
//! TOLLGATE_LISTEN=0.0.0.0:8080 tollgate      # every flag also reads TOLLGATE_<FLAG>
//! tollgate --check                           # validate the config and print the rules
//! tollgate --print-schema > tollgate.schema.json
//! ```
//!
//! SIGHUP re-reads the config (saving it does too); SIGTERM or Ctrl-C drains and exits.

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use tollgate::Limits;

use crate::{Gateway, GatewayTable, Settings, describe_rules, shutdown_signal};

/// tollgate's rate-limit service: a rate-limiting reverse proxy with an admin listener,
/// and optionally the Redis protocol and Envoy's rate limit service.
#[derive(Debug, Parser)]
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
}

/// Runs the service as the command line asks; what `main` returns.
pub fn main() -> ExitCode {
    let flags = Flags::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
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
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("tollgate: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(flags.settings))
}

/// `--check`: like `nginx -t`.
fn check(settings: &Settings) -> ExitCode {
    let sources = settings.config_sources();
    let loaded = Limits::builder()
        .extension(GatewayTable::new(settings.clone()))
        .load(&sources);
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

async fn serve(settings: Settings) -> ExitCode {
    let gateway = match Gateway::start(settings).await {
        Ok(gateway) => gateway,
        Err(error) => {
            // An invalid config at start-up is fatal: file, line, column and what is wrong.
            eprintln!("tollgate: {error}");
            return ExitCode::FAILURE;
        }
    };
    let upstream = if gateway.is_demo() {
        " (built-in demo)"
    } else {
        ""
    };
    eprintln!(
        "tollgate: proxying http://{} -> {}{upstream}\ntollgate: admin page http://{}/",
        gateway.listen_addr(),
        gateway.upstream(),
        gateway.admin_addr()
    );
    if let Some(resp) = gateway.resp_addr() {
        eprintln!(
            "tollgate: Redis protocol on {resp} (redis-cli -p {})",
            resp.port()
        );
    }
    if let Some(grpc) = gateway.grpc_addr() {
        eprintln!("tollgate: Envoy rate limit service (gRPC) on {grpc}");
    }
    gateway.run_until(shutdown_signal()).await;
    ExitCode::SUCCESS
}
