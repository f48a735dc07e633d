//! Prometheus metrics: one process-wide recorder, rendered by the admin listener.
//!
//! The library counts through the `metrics` facade; this installs the recorder those counts
//! go to. It must be installed before rules are compiled, since each rule keeps handles to
//! its counters ([`install`] is idempotent, and the gateway calls it first).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Decision latency buckets, in seconds: the decision takes hundreds of nanoseconds.
const DECISION_BUCKETS: [f64; 9] = [1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 1e-4, 1e-3];

/// How long `on_limit = "delay"` held requests, in seconds: milliseconds to a minute.
const DELAY_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once) and returns its handle.
///
/// If another recorder was installed first, tollgate's metrics go to that one and this
/// handle renders an empty page; a warning says so.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
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
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
            }
            describe();
            handle
        })
        .clone()
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "tollgate_requests_total",
        "Requests decided, by rule and outcome (allowed, limited)."
    );
    describe_counter!(
        "tollgate_delayed_total",
        "Requests on_limit = \"delay\" held before admitting them, by rule (also counted as allowed)."
    );
    describe_histogram!(
        "tollgate_delay_seconds",
        "How long on_limit = \"delay\" held each delayed request, by rule."
    );
    describe_gauge!(
        "tollgate_buckets_active",
        "Buckets currently held: clients that have spent part of a budget."
    );
    describe_counter!("tollgate_config_reloads_total", "Config reloads applied.");
    describe_counter!(
        "tollgate_resp_commands_total",
        "Commands the Redis-protocol front end ran, by command (unknown ones as unknown)."
    );
    describe_counter!(
        "tollgate_resp_errors_total",
        "Commands the Redis-protocol front end answered with an error, by command."
    );
    describe_histogram!(
        "tollgate_resp_command_seconds",
        metrics::Unit::Seconds,
        "Time to run one Redis-protocol command, by command, sampled 1 in 16 per connection."
    );
    describe_counter!(
        "tollgate_config_reads_total",
        "Config sources read: files opened (kind=file) and URLs fetched (kind=url). Idle and unchanged, files are not read again."
    );
    describe_counter!(
        "tollgate_config_fetch_errors_total",
        "Fetches of remote config that failed (each attempt; reported once per distinct error)."
    );
    describe_counter!(
        "tollgate_config_reload_failures_total",
        "Config reloads refused and distinct remote fetch errors (the previous rules kept serving), each reported once."
    );
    describe_gauge!(
        "tollgate_config_generation",
        "Generation of the active config: 1 at start, +1 per applied reload."
    );
    describe_histogram!(
        "tollgate_decision_seconds",
        metrics::Unit::Seconds,
        "Time to decide one request (key, rule, bucket), sampled 1 in 64."
    );
}
