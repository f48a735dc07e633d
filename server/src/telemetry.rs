//! OpenTelemetry traces over OTLP: `[telemetry]` (or the standard `OTEL_*` variables) names
//! a collector, and every proxied request becomes a trace — a server span for the request,
//! the library's `tollgate.decision` span under it (rule, limit, outcome, remaining, store)
//! and a client span for the upstream call — continuing the client's W3C `traceparent` and
//! passing it on to the upstream.
//!
//! Off unless an endpoint is given, and then nothing on the request path waits for the
//! collector: spans go to a bounded queue (`OTEL_BSP_MAX_QUEUE_SIZE`, 2,048 by default)
//! that a task of its own exports in batches (`queue`); a full queue drops spans, counted
//! in `tollgate_telemetry_spans_total{outcome="dropped"}`.
//!
//! The spans are `tracing` spans at DEBUG under the targets `tollgate_server::otel` and
//! `tollgate::decision`, which OpenTelemetry's `tracing` layer — in the log's subscriber
//! from the start, with a filter of its own (see `logging`) — lets through only while
//! telemetry is on, its exporter filled in here once a collector is named; the log's own
//! formatter never sees them. Off, the proxy's spans cost a flag read and the decision's
//! a callsite check.
//!
//! ```
//! use tollgate_server::telemetry::{Protocol, TelemetrySettings};
//!
//! let mut file = TelemetrySettings::default();
//! file.otlp_endpoint = Some("http://collector:4318/v1/traces".into());
//! let resolved = file.resolve(|_| None).unwrap().expect("an endpoint: telemetry is on");
//! assert_eq!(resolved.protocol, Protocol::HttpProtobuf, "a /v1/traces path is HTTP");
//! assert_eq!(resolved.service_name, "tollgate");
//! assert!(TelemetrySettings::default().resolve(|_| None).unwrap().is_none(), "off by default");
//! ```

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry_sdk::trace::SpanProcessor;

use serde::Deserialize;
use tollgate::config::{Diagnostic, Document, Extension, RuleSet};

/// The `[telemetry]` table.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TelemetrySettings {
    /// Where traces go: `http://host:4317` (OTLP over gRPC; `https://` for TLS), or a URL
    /// whose path ends in `/v1/traces` (OTLP over HTTP/protobuf, `http://` or `https://`)
    /// [default:
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, then `OTEL_EXPORTER_OTLP_ENDPOINT`; neither:
    /// telemetry off].
    pub otlp_endpoint: Option<String>,
    /// The `service.name` spans carry [default: `OTEL_SERVICE_NAME`, then `tollgate`].
    pub service_name: Option<String>,
    /// The share of traces kept, 0 to 1, for requests whose client did not decide: a
    /// sampled parent is always followed [default: `OTEL_TRACES_SAMPLER` and its
    /// `_ARG`, then 1].
    pub sample_ratio: Option<f64>,
}

/// How spans reach the collector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP over gRPC (port 4317 by convention).
    Grpc,
    /// OTLP over HTTP with protobuf bodies (port 4318, path `/v1/traces`).
    HttpProtobuf,
}

/// What telemetry does, with the file and the environment weighed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Resolved {
    /// The collector's URL (for HTTP, with its `/v1/traces` path).
    pub endpoint: String,
    /// gRPC or HTTP/protobuf.
    pub protocol: Protocol,
    /// `service.name`.
    pub service_name: String,
    /// The share of root traces kept (a parent's choice is always followed).
    pub sample_ratio: f64,
    /// Spans waiting for export at most (`OTEL_BSP_MAX_QUEUE_SIZE`, 2,048).
    pub queue_capacity: usize,
    /// Spans in one export at most (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, 512).
    pub batch_size: usize,
    /// How long a span waits for its batch (`OTEL_BSP_SCHEDULE_DELAY`, 5 s).
    pub schedule_delay: Duration,
    /// How long one export may take (`OTEL_BSP_EXPORT_TIMEOUT`, 10 s).
    pub export_timeout: Duration,
    /// Where metrics go, and how often (`None`: `OTEL_METRICS_EXPORTER=none`).
    pub metrics: Option<MetricsTarget>,
    /// What an `https://` collector's certificate must chain to
    /// (`OTEL_EXPORTER_OTLP_CERTIFICATE`; `None`: the system's roots).
    pub ca_file: Option<std::path::PathBuf>,
}

/// Where and how often the metrics go over OTLP.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct MetricsTarget {
    /// The collector's URL for metrics: `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, or the
    /// traces' endpoint (its `/v1/traces` made `/v1/metrics` over HTTP).
    pub endpoint: String,
    /// gRPC or HTTP/protobuf.
    pub protocol: Protocol,
    /// How often they go (`OTEL_METRIC_EXPORT_INTERVAL`, 60 s).
    pub interval: Duration,
}

/// A `[telemetry]` setting, or an `OTEL_*` variable, that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The endpoint is not an `http://` or `https://` URL.
    #[error("telemetry endpoint \"{0}\" must be an http:// or https:// URL")]
    Endpoint(String),
    /// The CA file for an `https://` collector cannot be used.
    #[error("OTEL_EXPORTER_OTLP_CERTIFICATE {0}: {1}")]
    Certificate(String, String),
    /// The sample ratio is not a number from 0 to 1.
    #[error("telemetry sample ratio {0} must be a number from 0 to 1")]
    Ratio(String),
    /// An `OTEL_*` variable that should be a number is not.
    #[error("{0}={1} must be a whole number")]
    Variable(String, String),
    /// The exporter could not be built.
    #[error("cannot start the OTLP exporter: {0}")]
    Exporter(String),
}

impl TelemetrySettings {
    /// These settings, the gaps filled from `lower`'s (flags and `TOLLGATE_*` over the file).
    pub fn over(&self, lower: &TelemetrySettings) -> TelemetrySettings {
        TelemetrySettings {
            otlp_endpoint: self
                .otlp_endpoint
                .clone()
                .or_else(|| lower.otlp_endpoint.clone()),
            service_name: self
                .service_name
                .clone()
                .or_else(|| lower.service_name.clone()),
            sample_ratio: self.sample_ratio.or(lower.sample_ratio),
        }
    }

    /// The settings, the gaps filled from the environment (`env` looks a variable up): `None`
    /// when no endpoint is given anywhere (telemetry off).
    pub fn resolve(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Resolved>, TelemetryError> {
        let env = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        let http_wanted = env("OTEL_EXPORTER_OTLP_PROTOCOL")
            .is_some_and(|protocol| protocol.trim().starts_with("http"));
        let endpoint = match (
            &self.otlp_endpoint,
            env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        ) {
            (Some(endpoint), _) => endpoint.trim().to_owned(),
            (None, Some(endpoint)) => endpoint.trim().to_owned(),
            (None, None) => match env("OTEL_EXPORTER_OTLP_ENDPOINT") {
                // The general endpoint is a base: HTTP adds the signal's path to it.
                Some(base) if http_wanted => {
                    format!("{}/v1/traces", base.trim().trim_end_matches('/'))
                }
                Some(base) => base.trim().to_owned(),
                None => return Ok(None),
            },
        };
        let uri: http::Uri = endpoint
            .parse()
            .map_err(|_| TelemetryError::Endpoint(endpoint.clone()))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(TelemetryError::Endpoint(endpoint));
        }
        let protocol = if uri.path().ends_with("/v1/traces") || http_wanted {
            Protocol::HttpProtobuf
        } else {
            Protocol::Grpc
        };
        let sample_ratio = match self.sample_ratio {
            Some(ratio) => ratio,
            None => ratio_from_env(env("OTEL_TRACES_SAMPLER"), env("OTEL_TRACES_SAMPLER_ARG"))?,
        };
        if !(0.0..=1.0).contains(&sample_ratio) {
            return Err(TelemetryError::Ratio(sample_ratio.to_string()));
        }
        let service_name = self
            .service_name
            .clone()
            .or_else(|| env("OTEL_SERVICE_NAME"))
            .unwrap_or_else(|| "tollgate".to_owned());
        let number = |name: &str, default: u64| -> Result<u64, TelemetryError> {
            env(name).map_or(Ok(default), |value| {
                value
                    .trim()
                    .parse()
                    .map_err(|_| TelemetryError::Variable(name.to_owned(), value.clone()))
            })
        };
        let metrics = match env("OTEL_METRICS_EXPORTER") {
            Some(exporter) if exporter.trim() == "none" => None,
            _ => {
                let (endpoint, protocol) = match env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") {
                    Some(endpoint) => {
                        let endpoint = endpoint.trim().to_owned();
                        let uri: http::Uri = endpoint
                            .parse()
                            .map_err(|_| TelemetryError::Endpoint(endpoint.clone()))?;
                        if !matches!(uri.scheme_str(), Some("http" | "https"))
                            || uri.host().is_none()
                        {
                            return Err(TelemetryError::Endpoint(endpoint));
                        }
                        let protocol = if uri.path().ends_with("/v1/metrics") || http_wanted {
                            Protocol::HttpProtobuf
                        } else {
                            Protocol::Grpc
                        };
                        (endpoint, protocol)
                    }
                    None => match protocol {
                        Protocol::Grpc => (endpoint.clone(), Protocol::Grpc),
                        Protocol::HttpProtobuf => (
                            match endpoint.strip_suffix("/v1/traces") {
                                Some(base) => format!("{base}/v1/metrics"),
                                None => endpoint.clone(),
                            },
                            Protocol::HttpProtobuf,
                        ),
                    },
                };
                Some(MetricsTarget {
                    endpoint,
                    protocol,
                    interval: Duration::from_millis(
                        number("OTEL_METRIC_EXPORT_INTERVAL", 60_000)?.max(1),
                    ),
                })
            }
        };
        let count = |name: &str, default: u64| {
            number(name, default).map(|n| usize::try_from(n.max(1)).unwrap_or(usize::MAX))
        };
        Ok(Some(Resolved {
            endpoint,
            protocol,
            service_name,
            sample_ratio,
            queue_capacity: count("OTEL_BSP_MAX_QUEUE_SIZE", 2048)?,
            batch_size: count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)?,
            schedule_delay: Duration::from_millis(number("OTEL_BSP_SCHEDULE_DELAY", 5000)?.max(1)),
            export_timeout: Duration::from_millis(
                number("OTEL_BSP_EXPORT_TIMEOUT", 10_000)?.max(1),
            ),
            metrics,
            ca_file: env("OTEL_EXPORTER_OTLP_CERTIFICATE").map(|path| path.trim().into()),
        }))
    }
}

/// The ratio the standard sampler variables ask for: `always_on`/`parentbased_always_on`
/// 1, `always_off`/`parentbased_always_off` 0, `traceidratio`/`parentbased_traceidratio`
/// their argument (default 1).
fn ratio_from_env(
    sampler: Option<String>,
    argument: Option<String>,
) -> Result<f64, TelemetryError> {
    let Some(sampler) = sampler else {
        return Ok(1.0);
    };
    match sampler.trim().trim_start_matches("parentbased_") {
        "always_on" => Ok(1.0),
        "always_off" => Ok(0.0),
        "traceidratio" => argument.map_or(Ok(1.0), |argument| {
            argument
                .trim()
                .parse()
                .map_err(|_| TelemetryError::Ratio(argument.clone()))
        }),
        other => Err(TelemetryError::Ratio(format!(
            "(OTEL_TRACES_SAMPLER={other}: always_on, always_off or traceidratio, parentbased_ or not)"
        ))),
    }
}

/// The `[telemetry]` table, read with the rules: what the config files say, later files
/// overriding earlier ones setting by setting. Read at start-up only.
#[derive(Clone, Copy, Debug, Default)]
pub struct TelemetryTable;

/// What the config files' `[telemetry]` tables come to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TelemetryFile(pub TelemetrySettings);

impl Extension for TelemetryTable {
    fn table(&self) -> &str {
        "telemetry"
    }

    fn compile(
        &self,
        documents: &[Document<'_>],
        _rules: &RuleSet,
    ) -> Result<Box<dyn Any + Send + Sync>, Vec<Diagnostic>> {
        let mut file = TelemetrySettings::default();
        let mut diagnostics = Vec::new();
        for document in documents {
            match document.table::<TelemetrySettings>("telemetry") {
                Ok(Some(table)) => {
                    file = TelemetrySettings {
                        otlp_endpoint: table.otlp_endpoint.or(file.otlp_endpoint),
                        service_name: table.service_name.or(file.service_name),
                        sample_ratio: table.sample_ratio.or(file.sample_ratio),
                    };
                    // Blamed on the table that made the settings unusable.
                    if let Err(error) = file.resolve(|_| None) {
                        let line = document
                            .text()
                            .lines()
                            .position(|line| line.trim_start().starts_with("[telemetry]"))
                            .map_or(1, |index| index + 1);
                        diagnostics.push(Diagnostic {
                            file: document.name().to_path_buf(),
                            line,
                            column: 1,
                            message: format!("[telemetry]: {error}"),
                        });
                    }
                }
                Ok(None) => {}
                Err(diagnostic) => diagnostics.push(diagnostic),
            }
        }
        if diagnostics.is_empty() {
            Ok(Box::new(TelemetryFile(file)))
        } else {
            Err(diagnostics)
        }
    }
}

/// Where spans go: a tracer provider made when the log is set up (so OpenTelemetry's
/// `tracing` layer can be in the subscriber from the start), whose exporter and sampling
/// ratio are filled in once [`Exporting::start`] is told where the collector is. Until
/// then nothing is sampled and nothing exported.
#[derive(Debug)]
pub struct Exporting {
    provider: opentelemetry_sdk::trace::SdkTracerProvider,
    batches: Arc<OnceLock<Box<dyn SpanProcessor>>>,
    ratio: Arc<AtomicU64>,
    metrics: OnceLock<metric_push::MetricPush>,
}

impl Exporting {
    /// The provider, not exporting yet, and the tracer the `tracing` layer feeds.
    pub fn new() -> (Exporting, opentelemetry_sdk::trace::SdkTracer) {
        use opentelemetry::trace::TracerProvider as _;
        use opentelemetry_sdk::trace::Sampler;

        let batches = Arc::new(OnceLock::new());
        let ratio = Arc::new(AtomicU64::new(0f64.to_bits()));
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_span_processor(Slot(Arc::clone(&batches)))
            .with_sampler(Sampler::ParentBased(Box::new(SharedRatio(Arc::clone(
                &ratio,
            )))))
            .build();
        let tracer = provider.tracer("tollgate");
        (
            Exporting {
                provider,
                batches,
                ratio,
                metrics: OnceLock::new(),
            },
            tracer,
        )
    }

    /// Starts exporting to `resolved`'s collector, in batches from a bounded queue on a
    /// task of its own, and sets the W3C trace-context propagator process-wide. Once only.
    pub fn start(&self, resolved: &Resolved) -> Result<(), TelemetryError> {
        use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
        use opentelemetry_sdk::trace::SpanExporter as _;

        let trust = Trust::read(resolved.ca_file.as_deref())
            .map_err(|refused| TelemetryError::Certificate(refused.path, refused.reason))?;
        let mut exporter = match resolved.protocol {
            Protocol::Grpc => {
                use opentelemetry_otlp::WithTonicConfig as _;
                let builder = opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(resolved.endpoint.clone())
                    .with_timeout(resolved.export_timeout);
                if resolved.endpoint.starts_with("https://") {
                    builder.with_tls_config(trust.tonic()).build()
                } else {
                    builder.build()
                }
            }
            Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(http_client::Client::new(
                    resolved.export_timeout,
                    trust.rustls(),
                ))
                .with_endpoint(resolved.endpoint.clone())
                .with_timeout(resolved.export_timeout)
                .build(),
        }
        .map_err(|error| TelemetryError::Exporter(error.to_string()))?;
        exporter.set_resource(
            &opentelemetry_sdk::Resource::builder()
                .with_service_name(resolved.service_name.clone())
                .build(),
        );
        let batches = queue::Queue::start(
            exporter,
            queue::Batching {
                capacity: resolved.queue_capacity,
                batch: resolved.batch_size,
                delay: resolved.schedule_delay,
                timeout: resolved.export_timeout,
            },
        );
        self.batches
            .set(Box::new(batches))
            .map_err(|_| TelemetryError::Exporter("telemetry has already started".into()))?;
        self.ratio
            .store(resolved.sample_ratio.to_bits(), Ordering::Relaxed);
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        if let Some(target) = &resolved.metrics {
            let push = metric_push::MetricPush::start(
                target,
                &resolved.service_name,
                resolved.export_timeout,
                &trust,
            )?;
            let _ = self.metrics.set(push);
        }
        crate::metrics::exemplars::trace_with(current_trace);
        STARTED.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Exports what is queued and the metrics once more (each bounded by the export
    /// timeout), and stops.
    pub fn shutdown(&self) {
        if let Some(metrics) = self.metrics.get() {
            metrics.shutdown();
        }
        if self.batches.get().is_some()
            && let Err(error) = self.provider.shutdown()
        {
            tracing::warn!(%error, "telemetry did not flush on shutdown");
        }
    }
}

/// The batch processor, once there is one.
#[derive(Debug)]
struct Slot(Arc<OnceLock<Box<dyn SpanProcessor>>>);

impl SpanProcessor for Slot {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        if let Some(inner) = self.0.get() {
            inner.on_start(span, cx);
        }
    }

    fn on_end(&self, span: opentelemetry_sdk::trace::SpanData) {
        if let Some(inner) = self.0.get() {
            inner.on_end(span);
        }
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.get().map_or(Ok(()), |inner| inner.force_flush())
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0
            .get()
            .map_or(Ok(()), |inner| inner.shutdown_with_timeout(timeout))
    }
}

/// Trace-id ratio sampling at a ratio set after the sampler was made.
#[derive(Clone, Debug)]
struct SharedRatio(Arc<AtomicU64>);

impl opentelemetry_sdk::trace::ShouldSample for SharedRatio {
    fn should_sample(
        &self,
        parent_context: Option<&opentelemetry::Context>,
        trace_id: opentelemetry::trace::TraceId,
        name: &str,
        span_kind: &opentelemetry::trace::SpanKind,
        attributes: &[opentelemetry::KeyValue],
        links: &[opentelemetry::trace::Link],
    ) -> opentelemetry_sdk::trace::SamplingResult {
        let ratio = f64::from_bits(self.0.load(Ordering::Relaxed));
        opentelemetry_sdk::trace::Sampler::TraceIdRatioBased(ratio).should_sample(
            parent_context,
            trace_id,
            name,
            span_kind,
            attributes,
            links,
        )
    }
}

/// The ids of the trace the current `tracing` span is part of, if it is sampled: the
/// decision histogram's exemplars.
fn current_trace() -> Option<crate::metrics::exemplars::TraceIds> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    let span = tracing::Span::current();
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    let span_context = context.span().span_context().clone();
    (span_context.is_valid() && span_context.is_sampled()).then(|| {
        crate::metrics::exemplars::TraceIds {
            trace_id: span_context.trace_id().to_bytes(),
            span_id: span_context.span_id().to_bytes(),
        }
    })
}

/// Whether a collector has been named: until then the proxy makes no span.
static STARTED: AtomicBool = AtomicBool::new(false);

/// Whether telemetry is exporting (the proxy's spans are made only then).
pub(crate) fn started() -> bool {
    STARTED.load(Ordering::Relaxed)
}

/// Counts every outcome of `tollgate_telemetry_spans_total` at 0, so the series exist
/// (and a rate over them is defined) before the first span, telemetry on or off.
pub(crate) fn register_metrics() {
    for outcome in queue::OUTCOMES {
        metrics::counter!("tollgate_telemetry_spans_total", "outcome" => outcome).increment(0);
    }
    for outcome in metric_push::OUTCOMES {
        metrics::counter!("tollgate_telemetry_metric_exports_total", "outcome" => outcome)
            .increment(0);
    }
}

/// The `tracing` targets whose spans are exported (at DEBUG) while telemetry is on.
pub(crate) const TARGETS: [&str; 2] = ["tollgate_server::otel", "tollgate::decision"];

mod http_client;
mod metric_push;
mod queue;
mod trust;

use trust::Trust;
mod spans;

pub use spans::{RequestSpan, RequestSpanLayer, Spanned};
pub(crate) use spans::{grpc_span, inject, record_status, resp_span, upstream_span};

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn the_file_wins_then_the_standard_variables_then_the_defaults() {
        let file = TelemetrySettings {
            otlp_endpoint: Some("http://file:4317".into()),
            sample_ratio: Some(0.5),
            ..TelemetrySettings::default()
        };
        let set = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317"),
            ("OTEL_SERVICE_NAME", "edge"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
        ]);
        let resolved = file.resolve(&set).unwrap().unwrap();
        assert_eq!(
            (resolved.endpoint.as_str(), resolved.protocol),
            ("http://file:4317", Protocol::Grpc)
        );
        assert_eq!(resolved.service_name, "edge");
        assert_eq!(resolved.sample_ratio, 0.5);
        let from_env = TelemetrySettings::default().resolve(&set).unwrap().unwrap();
        assert_eq!(from_env.endpoint, "http://env:4317");
        assert_eq!(from_env.sample_ratio, 0.01);
        let http = TelemetrySettings::default()
            .resolve(env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318/"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (http.endpoint.as_str(), http.protocol),
            ("https://collector:4318/v1/traces", Protocol::HttpProtobuf)
        );
    }

    #[test]
    fn bad_settings_are_refused_with_what_is_wrong() {
        let with = |endpoint: &str, ratio: Option<f64>| TelemetrySettings {
            otlp_endpoint: Some(endpoint.into()),
            sample_ratio: ratio,
            ..TelemetrySettings::default()
        };
        let error =
            |settings: TelemetrySettings| settings.resolve(|_| None).unwrap_err().to_string();
        assert!(error(with("collector:4317", None)).contains("http://"));
        assert!(error(with("http://collector:4317", Some(1.5))).contains("0 to 1"));
        let sampler = TelemetrySettings::default()
            .resolve(env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                ("OTEL_TRACES_SAMPLER", "jaeger_remote"),
            ]))
            .unwrap_err()
            .to_string();
        assert!(sampler.contains("jaeger_remote"), "{sampler}");
    }
}
