//! The service's log on stderr: text for people or JSON lines for a log pipeline
//! (`--log-format`), filtered by `--log-level` or `RUST_LOG`.
//!
//! Text is coloured only when stderr is a terminal and `NO_COLOR` is unset or empty: a file,
//! `kubectl logs`, journald or Loki get plain lines. JSON is one object a line —
//! `timestamp`, `level`, `target`, `message`, and the event's fields beside them — as
//! envoyproxy/ratelimit's `LOG_FORMAT=json` gives. Both formats print fields as their types
//! show them, so secrets (which show as `<redacted>`) stay redacted in both.
//!
//! The format and the filter are set before the config is read (from flags and the
//! environment) and may be changed once it has been (from its `[gateway]` table), so a
//! [`Logging`] keeps a handle on each.
//!
//! ```
//! use tollgate_server::logging::{LogFormat, parse_log_level};
//!
//! assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
//! assert!(parse_log_level("tollgate=debug,info").is_ok());
//! assert!(parse_log_level("loud").is_err());
//! ```

use std::io::IsTerminal as _;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry, reload};

use crate::telemetry::{Exporting, Resolved, TelemetryError};

/// How log lines are written.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// For people: one line an event, coloured on a terminal.
    #[default]
    Text,
    /// For log pipelines: one JSON object a line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<LogFormat, String> {
        match text {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "log format \"{other}\" must be \"text\" or \"json\""
            )),
        }
    }
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// The filter a log level setting gives: a level (`warn`) or `RUST_LOG`-style directives
/// (`tollgate=debug,info`). Its error says what was wrong.
pub fn parse_log_level(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("log level is empty".into());
    }
    let known = ["error", "warn", "info", "debug", "trace", "off"];
    // EnvFilter takes a bare word as a target name; a misspelt level would then silence
    // everything, so a bare word must be a level.
    let bare_word = text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if bare_word && !known.contains(&text.to_ascii_lowercase().as_str()) {
        return Err(format!(
            "log level \"{text}\" must be one of {} or RUST_LOG-style directives",
            known.join(", ")
        ));
    }
    EnvFilter::try_new(text)
        .map(|_| text.to_owned())
        .map_err(|error| format!("log level \"{text}\": {error}"))
}

type Formatter = Box<dyn Layer<Registry> + Send + Sync>;

/// The installed log: its format and filter, each changeable later.
///
/// Each layer has a filter of its own: the log's formatter the log level, OpenTelemetry's
/// layer the telemetry targets once a collector is named. So telemetry's spans are never
/// formatted (the log has nothing to print for them), and while telemetry is off its
/// filter enables nothing and their callsites are never visited.
pub struct Logging {
    format: LogFormat,
    filter: reload::Handle<EnvFilter, Registry>,
    formatter: reload::Handle<Formatter, Registry>,
    telemetry_filter: reload::Handle<Targets, Registry>,
    /// Where telemetry's spans go once it starts.
    exporting: Exporting,
}

impl std::fmt::Debug for Logging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Logging")
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

impl Logging {
    /// Installs the process's log in `format`, filtered by `level` (checked with
    /// [`parse_log_level`]; anything else logs `info`). Once per process: a second call
    /// leaves the first log in place (and its handles, then, change nothing).
    pub fn install(format: LogFormat, level: &str) -> Logging {
        let (filter, filter_handle) = reload::Layer::new(filter_of(level));
        let (formatter, formatter_handle) = reload::Layer::new(formatter(format));
        // OpenTelemetry's layer is in place from the start, feeding a tracer whose exporter
        // is added once the config names a collector: tracing-opentelemetry finds its
        // context through the subscriber, which a layer swapped in later would hide. Until
        // then its filter lets nothing through.
        let (exporting, tracer) = Exporting::new();
        let (telemetry_filter, telemetry_handle) = reload::Layer::new(Targets::new());
        let opentelemetry = tracing_opentelemetry::layer::<Registry>()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false);
        // A Vec rather than `and_then`: it weighs the two filters' level hints as per-layer
        // filters need (with `and_then`, telemetry's "nothing" silenced the log too).
        let layers = vec![
            formatter.with_filter(filter).boxed(),
            opentelemetry.with_filter(telemetry_filter).boxed(),
        ];
        let _ = tracing_subscriber::registry().with(layers).try_init();
        Logging {
            format,
            filter: filter_handle,
            formatter: formatter_handle,
            telemetry_filter: telemetry_handle,
            exporting,
        }
    }

    /// The format in use.
    pub fn format(&self) -> LogFormat {
        self.format
    }

    /// Writes from now on in `format`, filtered by `level`.
    pub fn change(&mut self, format: LogFormat, level: &str) {
        if format != self.format && self.formatter.reload(formatter(format)).is_ok() {
            self.format = format;
        }
        let _ = self.filter.reload(filter_of(level));
    }

    /// Sends the telemetry spans (targets `tollgate_server::otel` and `tollgate::decision`, at
    /// DEBUG whatever the log level) to `resolved`'s collector from now on. Log lines stay
    /// as they were: the log's filter is the log level alone. Must run inside a tokio
    /// runtime (the exporter's task is spawned on it).
    pub fn export_to(&mut self, resolved: &Resolved) -> Result<(), TelemetryError> {
        self.exporting.start(resolved)?;
        let targets = crate::telemetry::TARGETS
            .iter()
            .fold(Targets::new(), |targets, target| {
                targets.with_target(*target, tracing::Level::DEBUG)
            });
        let _ = self.telemetry_filter.reload(targets);
        Ok(())
    }

    /// Exports the spans still queued (bounded by the export timeout) and stops exporting.
    pub fn flush_telemetry(&self) {
        self.exporting.shutdown();
    }
}

fn filter_of(level: &str) -> EnvFilter {
    EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"))
}

/// Whether text lines are coloured: stderr is a terminal and `NO_COLOR` is not set to
/// something (<https://no-color.org>).
fn colour() -> bool {
    std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
}

fn formatter(format: LogFormat) -> Formatter {
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Text => Box::new(layer.with_ansi(colour())),
        LogFormat::Json => Box::new(
            layer
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(false),
        ),
    }
}

/// One line shaped like a JSON log event, written by hand: for what must reach the
/// operator whatever the filter says.
pub fn json_line(level: &str, target: &str, message: &str) -> String {
    use tracing_subscriber::fmt::time::FormatTime as _;
    let mut timestamp = String::new();
    let _ = tracing_subscriber::fmt::time::SystemTime.format_time(
        &mut tracing_subscriber::fmt::format::Writer::new(&mut timestamp),
    );
    serde_json::json!({
        "timestamp": timestamp,
        "level": level,
        "message": message,
        "target": target,
    })
    .to_string()
}
