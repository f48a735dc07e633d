//! Prometheus metrics: one process-wide recorder, rendered by the admin listener.
//!
//! The library counts through the `metrics` facade; this installs the recorder those counts
//! go to. It must be installed before rules are compiled, since each rule keeps handles to
//! its counters ([`install`] is idempotent, and the gateway calls it first).
//!
//! The admin listener renders it as Prometheus text, or as OpenMetrics with exemplars on
//! the decision-latency histogram (`openmetrics`); telemetry sends it over OTLP. Both read
//! the Prometheus rendering back (`exposition`), so every form shows the same catalogue.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Decision latency buckets, in seconds: the decision takes hundreds of nanoseconds.
pub(crate) const DECISION_BUCKETS: [f64; 9] =
    [1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 1e-4, 1e-3];

/// How long `on_limit = "delay"` held requests, in seconds: milliseconds to a minute.
const DELAY_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// When the process's counters began (the recorder's installation): the start of every
/// cumulative series the OTLP export sends.
static INSTALLED_AT: OnceLock<std::time::SystemTime> = OnceLock::new();

/// When [`install`] first ran (now, if it has not).
pub(crate) fn installed_at() -> std::time::SystemTime {
    *INSTALLED_AT.get_or_init(std::time::SystemTime::now)
}

/// Installs the process-wide Prometheus recorder (once) and returns its handle.
///
/// If another recorder was installed first, tollgate's metrics go to that one and this
/// handle renders an empty page; a warning says so.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let _ = installed_at();
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("tollgate_decision_seconds".into()),
                    &DECISION_BUCKETS,
                )
                .and_then(|builder| {
                    builder.set_buckets_for_metric(
                        Matcher::Full("tollgate_resp_command_seconds".into()),
                        &DECISION_BUCKETS,
                    )
                })
                .and_then(|builder| {
                    builder.set_buckets_for_metric(
                        Matcher::Full("tollgate_delay_seconds".into()),
                        &DELAY_BUCKETS,
                    )
                })
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(Exemplary(recorder)).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
            }
            describe();
            handle
        })
        .clone()
}

/// The Prometheus recorder, the decision histogram's handles keeping exemplars.
struct Exemplary(metrics_exporter_prometheus::PrometheusRecorder);

impl metrics::Recorder for Exemplary {
    fn describe_counter(
        &self,
        key: metrics::KeyName,
        unit: Option<metrics::Unit>,
        description: metrics::SharedString,
    ) {
        self.0.describe_counter(key, unit, description);
    }

    fn describe_gauge(
        &self,
        key: metrics::KeyName,
        unit: Option<metrics::Unit>,
        description: metrics::SharedString,
    ) {
        self.0.describe_gauge(key, unit, description);
    }

    fn describe_histogram(
        &self,
        key: metrics::KeyName,
        unit: Option<metrics::Unit>,
        description: metrics::SharedString,
    ) {
        self.0.describe_histogram(key, unit, description);
    }

    fn register_counter(
        &self,
        key: &metrics::Key,
        metadata: &metrics::Metadata<'_>,
    ) -> metrics::Counter {
        self.0.register_counter(key, metadata)
    }

    fn register_gauge(
        &self,
        key: &metrics::Key,
        metadata: &metrics::Metadata<'_>,
    ) -> metrics::Gauge {
        self.0.register_gauge(key, metadata)
    }

    fn register_histogram(
        &self,
        key: &metrics::Key,
        metadata: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        let histogram = self.0.register_histogram(key, metadata);
        if key.name() == "tollgate_decision_seconds" {
            exemplars::WithExemplars::wrap(histogram)
        } else {
            histogram
        }
    }
}

/// What kind of metric one is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (`_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution (`_bucket`, `_sum`, `_count` in Prometheus's text).
    Histogram,
}

/// One metric the service exports: its name, kind, labels and meaning.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// As Prometheus shows it.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// Its labels.
    pub labels: &'static [&'static str],
    /// What it means (its `# HELP`).
    pub help: &'static str,
}

const fn metric(
    name: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    help: &'static str,
) -> Metric {
    Metric {
        name,
        kind,
        labels,
        help,
    }
}

/// Every metric the service exports, each once: what `/metrics` describes (`# HELP`), what
/// the README's metrics table lists, and what the shipped alerts and dashboard may query (a
/// test checks each against this list, and that a running service exports nothing else).
pub const CATALOGUE: &[Metric] = &[
    metric(
        "tollgate_requests_total",
        Kind::Counter,
        &["rule", "outcome"],
        "Requests decided, by rule and outcome: allowed, limited, shadow_limited (a shadow rule would have refused).",
    ),
    metric(
        "tollgate_delayed_total",
        Kind::Counter,
        &["rule"],
        "Requests held (on_limit = \"delay\") before they were admitted, by rule; also counted as allowed.",
    ),
    metric(
        "tollgate_delay_seconds",
        Kind::Histogram,
        &["rule"],
        "How long on_limit = \"delay\" held each delayed request, by rule.",
    ),
    metric(
        "tollgate_decision_seconds",
        Kind::Histogram,
        &[],
        "Time to decide one request (key, rule, bucket), sampled one request in 64.",
    ),
    metric(
        "tollgate_in_flight",
        Kind::Gauge,
        &["rule"],
        "Requests in flight under a rule's concurrency cap.",
    ),
    metric(
        "tollgate_concurrency_limit",
        Kind::Gauge,
        &["rule"],
        "A concurrency cap in force: the fixed cap, or where the adaptive limit stands.",
    ),
    metric(
        "tollgate_concurrency_refused_total",
        Kind::Counter,
        &["rule"],
        "Requests refused because the rule's concurrency cap was full.",
    ),
    metric(
        "tollgate_buckets_active",
        Kind::Gauge,
        &[],
        "Buckets held in memory: clients that have spent part of a budget (with Redis, this instance's fallback buckets).",
    ),
    metric(
        "tollgate_evictions_total",
        Kind::Counter,
        &[],
        "Buckets evicted at [store] max_buckets, those closest to full first.",
    ),
    metric(
        "tollgate_backend_errors_total",
        Kind::Counter,
        &["slots"],
        "Redis calls that failed or timed out (on a cluster, by the slot range of the shard).",
    ),
    metric(
        "tollgate_backend_fallbacks_total",
        Kind::Counter,
        &[],
        "Decisions made by on_backend_error because Redis could not answer.",
    ),
    metric(
        "tollgate_backend_breaker_open",
        Kind::Gauge,
        &["slots"],
        "1 while a circuit breaker is open and decisions skip Redis (on a cluster, per shard).",
    ),
    metric(
        "tollgate_hybrid_decisions_total",
        Kind::Counter,
        &["where"],
        "Hybrid mode's decisions, by where they were made: local (on a leased share) or redis.",
    ),
    metric(
        "tollgate_hybrid_instances",
        Kind::Gauge,
        &[],
        "Instances hybrid mode's heartbeat last counted sharing the leases.",
    ),
    metric(
        "tollgate_config_generation",
        Kind::Gauge,
        &[],
        "Generation of the config in force: 1 at start, +1 per applied reload.",
    ),
    metric(
        "tollgate_config_reloads_total",
        Kind::Counter,
        &[],
        "Config reloads applied.",
    ),
    metric(
        "tollgate_config_reload_failures_total",
        Kind::Counter,
        &[],
        "Config reloads refused, and distinct remote fetch errors; the previous rules kept serving. Each reported once.",
    ),
    metric(
        "tollgate_config_reads_total",
        Kind::Counter,
        &["kind"],
        "Config sources read: files opened (kind=file) and URLs fetched (kind=url).",
    ),
    metric(
        "tollgate_config_fetch_errors_total",
        Kind::Counter,
        &[],
        "Fetches of remote config that failed (every attempt).",
    ),
    metric(
        "tollgate_resp_commands_total",
        Kind::Counter,
        &["command"],
        "Commands the Redis-protocol front end ran, by command (unknown ones as unknown).",
    ),
    metric(
        "tollgate_resp_errors_total",
        Kind::Counter,
        &["command"],
        "Commands the Redis-protocol front end answered with an error, by command.",
    ),
    metric(
        "tollgate_resp_command_seconds",
        Kind::Histogram,
        &["command"],
        "Time to run one Redis-protocol command, by command, sampled one in 16 per connection.",
    ),
    metric(
        "tollgate_grpc_requests_total",
        Kind::Counter,
        &["domain", "code"],
        "ShouldRateLimit requests, by domain (other for domains without rules) and overall code.",
    ),
    metric(
        "tollgate_tls_reload_failures_total",
        Kind::Counter,
        &["listener"],
        "Certificate reloads refused (the previous pair kept), by listener.",
    ),
    metric(
        "tollgate_upstream_errors_total",
        Kind::Counter,
        &["kind"],
        "Proxied requests the upstream failed, by kind: timeout (no response head in time: a 504), unavailable (no connection or a refused certificate: a 502), broken (a response body or its trailers broke off mid-stream).",
    ),
    metric(
        "tollgate_client_connection_errors_total",
        Kind::Counter,
        &["listener", "kind"],
        "Client connections the gateway closed for what the client did, by listener and kind: excessive_resets (HTTP/2 streams reset in a flood, CVE-2023-44487), protocol_error (another HTTP/2 violation), header_timeout (HTTP/1.1 headers not sent in time).",
    ),
    metric(
        "tollgate_telemetry_spans_total",
        Kind::Counter,
        &["outcome"],
        "Trace spans sent to the OTLP collector, by outcome: exported, dropped (the bounded queue was full: the collector is down or slow), failed (the collector refused them or did not answer in time).",
    ),
    metric(
        "tollgate_telemetry_metric_exports_total",
        Kind::Counter,
        &["outcome"],
        "Exports of these metrics to the OTLP collector, by outcome: exported, failed (refused, or no answer within the export timeout; the next interval sends the cumulative figures again).",
    ),
    metric(
        "tollgate_rlqs_streams",
        Kind::Gauge,
        &[],
        "Envoy streams open on the rate limit quota service (RLQS), one per Envoy and domain.",
    ),
    metric(
        "tollgate_rlqs_buckets",
        Kind::Gauge,
        &[],
        "RLQS buckets whose budget is being divided among Envoys.",
    ),
    metric(
        "tollgate_rlqs_reports_total",
        Kind::Counter,
        &[],
        "RLQS usage reports received.",
    ),
    metric(
        "tollgate_rlqs_assignments_total",
        Kind::Counter,
        &["action"],
        "RLQS bucket actions sent, by action: token_bucket (a share of the rule's rate and burst, or its renewal), allow_all (an unlimited rule or none), abandon (the bucket's rule was removed).",
    ),
    metric(
        "tollgate_rlqs_claims_total",
        Kind::Counter,
        &["outcome"],
        "Claims of this gateway's parts of the RLQS rules in Redis (gateways sharing one Redis; one a second), by outcome: claimed, failed (Redis did not answer: the last parts kept, then the rule divided by the gateways last counted).",
    ),
    metric(
        "tollgate_tls_handshake_failures_total",
        Kind::Counter,
        &["listener"],
        "TLS handshakes that failed or timed out, by listener.",
    ),
    metric(
        "tollgate_disk_errors_total",
        Kind::Counter,
        &[],
        "Writes and syncs of the disk store that failed (a full disk): each decided by on_backend_error until a write succeeds again.",
    ),
    metric(
        "tollgate_candidate_requests_total",
        Kind::Counter,
        &["rule", "candidate", "outcome"],
        "Requests each candidate limit decided beside its rule, never enforced, by rule, candidate (its rates as written) and outcome: allowed, or refused (what it would have refused).",
    ),
    metric(
        "tollgate_settled_total",
        Kind::Counter,
        &["rule", "outcome"],
        "Reservations settled from their responses (cost = { reserve, from }), by rule and outcome: refunded (used less), exact, charged (used more, the excess taken as debt), kept (no usable figure: the reservation stands).",
    ),
    metric(
        "tollgate_settled_tokens_total",
        Kind::Counter,
        &["rule"],
        "Tokens the responses of reserving rules said they used, by rule.",
    ),
    metric(
        "tollgate_usage_tokens_total",
        Kind::Counter,
        &["rule", "kind"],
        "Tokens of each kind (input, cached, output) the responses of rules settled from usage reported, by rule.",
    ),
    metric(
        "tollgate_settle_faults_total",
        Kind::Counter,
        &["rule", "reason"],
        "Responses whose figure could not be believed (negative, not a number, above max, malformed JSON, a body over the bound read), by rule and reason; the reservation stands.",
    ),
    metric(
        "tollgate_invalid_credentials_total",
        Kind::Counter,
        &["reason", "action"],
        "Requests whose credential failed (reason: unknown key), by what was done: anonymous (counted as if absent) or reject (401).",
    ),
];

pub(crate) mod exemplars;
pub(crate) mod exposition;
pub mod openmetrics;

fn describe() {
    for metric in CATALOGUE {
        match metric.kind {
            Kind::Counter => metrics::describe_counter!(metric.name, metric.help),
            Kind::Gauge => metrics::describe_gauge!(metric.name, metric.help),
            Kind::Histogram => {
                metrics::describe_histogram!(metric.name, metrics::Unit::Seconds, metric.help);
            }
        }
    }
}
