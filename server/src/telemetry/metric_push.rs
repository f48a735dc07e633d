//! Metrics over OTLP: every interval (`OTEL_METRIC_EXPORT_INTERVAL`, a minute by default)
//! the catalogue `/metrics` shows — the same names, labels as attributes — goes to the
//! collector as cumulative sums (counters), gauges and explicit-bucket histograms, the
//! decision-latency histogram with its exemplars. `/metrics` stays.
//!
//! Read from the Prometheus recorder's own rendering (`metrics::exposition`) rather than a
//! second recorder beside it: counting stays one atomic add per event whether telemetry is
//! on or off, and OTLP cannot show anything `/metrics` does not. A task of its own sends;
//! an export that fails or takes longer than the export timeout is counted in
//! `tollgate_telemetry_metric_exports_total{outcome="failed"}` and the next interval
//! sends the (cumulative) figures again.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Exemplar, Gauge, Histogram, HistogramDataPoint, Metric,
    NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, exemplar, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use tokio::sync::mpsc;

use crate::metrics::exemplars;
use crate::metrics::exposition::{Family, FamilyKind, Sample};

use super::{MetricsTarget, Protocol};

/// Each outcome of `tollgate_telemetry_metric_exports_total`.
pub(crate) const OUTCOMES: [&str; 2] = ["exported", "failed"];

/// The running export: asked to send once more and stop at shutdown.
#[derive(Debug)]
pub(crate) struct MetricPush {
    stop: mpsc::UnboundedSender<std::sync::mpsc::Sender<()>>,
    timeout: Duration,
}

/// How the export reaches the collector.
enum Transport {
    Grpc(MetricsServiceClient<tonic::transport::Channel>),
    Http {
        client: Box<super::http_client::Client>,
        endpoint: String,
    },
}

impl MetricPush {
    /// Starts exporting to `target` every `target.interval`, as `service_name`, on the
    /// current tokio runtime.
    pub(crate) fn start(
        target: &MetricsTarget,
        service_name: &str,
        timeout: Duration,
        trust: &super::Trust,
    ) -> Result<MetricPush, super::TelemetryError> {
        let refused = |error: tonic::transport::Error| {
            super::TelemetryError::Exporter(format!("metrics endpoint: {error}"))
        };
        let transport = match target.protocol {
            Protocol::Grpc => {
                let mut endpoint = tonic::transport::Endpoint::from_shared(target.endpoint.clone())
                    .map_err(refused)?
                    .connect_timeout(timeout)
                    .timeout(timeout);
                if target.endpoint.starts_with("https://") {
                    endpoint = endpoint.tls_config(trust.tonic()).map_err(refused)?;
                }
                let channel = endpoint.connect_lazy();
                Transport::Grpc(MetricsServiceClient::new(channel))
            }
            Protocol::HttpProtobuf => Transport::Http {
                client: Box::new(super::http_client::Client::new(timeout, trust.rustls())),
                endpoint: target.endpoint.clone(),
            },
        };
        let (stop, stops) = mpsc::unbounded_channel();
        let resource = Resource {
            attributes: vec![attribute("service.name", service_name)],
            ..Resource::default()
        };
        tokio::spawn(run(transport, resource, target.interval, timeout, stops));
        Ok(MetricPush { stop, timeout })
    }

    /// Sends the figures once more and stops (waiting at most the export timeout).
    pub(crate) fn shutdown(&self) {
        let (done, finished) = std::sync::mpsc::channel();
        if self.stop.send(done).is_ok() {
            let _ = finished.recv_timeout(self.timeout + Duration::from_millis(100));
        }
    }
}

async fn run(
    mut transport: Transport,
    resource: Resource,
    interval: Duration,
    timeout: Duration,
    mut stops: mpsc::UnboundedReceiver<std::sync::mpsc::Sender<()>>,
) {
    let counter = |outcome: &'static str| metrics::counter!("tollgate_telemetry_metric_exports_total", "outcome" => outcome);
    let (exported, failed) = (counter("exported"), counter("failed"));
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is at once: the first export waits one interval.
    tick.tick().await;
    loop {
        let stopping = tokio::select! {
            _ = tick.tick() => None,
            stop = stops.recv() => Some(stop),
        };
        let request = request(&resource);
        let sent = tokio::time::timeout(timeout, send(&mut transport, request)).await;
        match sent {
            Ok(Ok(())) => exported.increment(1),
            Ok(Err(error)) => {
                tracing::debug!(%error, "the collector refused metrics");
                failed.increment(1);
            }
            Err(_) => {
                tracing::debug!("the collector did not take metrics in time");
                failed.increment(1);
            }
        }
        match stopping {
            None => {}
            Some(Some(done)) => {
                let _ = done.send(());
                break;
            }
            Some(None) => break,
        }
    }
}

async fn send(
    transport: &mut Transport,
    request: ExportMetricsServiceRequest,
) -> Result<(), String> {
    match transport {
        Transport::Grpc(client) => client
            .export(request)
            .await
            .map(|_| ())
            .map_err(|status| status.to_string()),
        Transport::Http { client, endpoint } => {
            use opentelemetry_http::HttpClient as _;
            let body = Bytes::from(prost::Message::encode_to_vec(&request));
            let request = http::Request::post(endpoint.as_str())
                .header(http::header::CONTENT_TYPE, "application/x-protobuf")
                .body(body)
                .map_err(|error| error.to_string())?;
            let response = client
                .send_bytes(request)
                .await
                .map_err(|error| error.to_string())?;
            if response.status().is_success() {
                Ok(())
            } else {
                Err(format!("the collector answered {}", response.status()))
            }
        }
    }
}

/// The export request for the recorder's figures now.
fn request(resource: &Resource) -> ExportMetricsServiceRequest {
    let handle = crate::metrics::install();
    handle.run_upkeep();
    let families = crate::metrics::exposition::families(&handle.render());
    let start = nanos(crate::metrics::installed_at());
    let now = nanos(SystemTime::now());
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource.clone()),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "tollgate".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..InstrumentationScope::default()
                }),
                metrics: families
                    .iter()
                    .filter_map(|family| metric(family, start, now))
                    .collect(),
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }],
    }
}

/// One family as an OTLP metric (`None` for a kind OTLP is not sent).
fn metric(family: &Family, start: u64, now: u64) -> Option<Metric> {
    let number = |sample: &Sample| NumberDataPoint {
        attributes: attributes(sample, None),
        start_time_unix_nano: start,
        time_unix_nano: now,
        value: Some(number_data_point::Value::AsDouble(sample.value)),
        ..NumberDataPoint::default()
    };
    let data = match family.kind {
        FamilyKind::Counter => metric::Data::Sum(Sum {
            data_points: family.samples.iter().map(number).collect(),
            aggregation_temporality: AggregationTemporality::Cumulative.into(),
            is_monotonic: true,
        }),
        FamilyKind::Gauge => metric::Data::Gauge(Gauge {
            data_points: family
                .samples
                .iter()
                .map(|sample| NumberDataPoint {
                    start_time_unix_nano: 0,
                    ..number(sample)
                })
                .collect(),
        }),
        FamilyKind::Histogram => metric::Data::Histogram(Histogram {
            data_points: histogram_points(family, start, now),
            aggregation_temporality: AggregationTemporality::Cumulative.into(),
        }),
        FamilyKind::Other => return None,
    };
    Some(Metric {
        name: family.name.clone(),
        description: family.help.clone(),
        unit: if family.kind == FamilyKind::Histogram && family.name.ends_with("_seconds") {
            "s".into()
        } else {
            String::new()
        },
        data: Some(data),
        ..Metric::default()
    })
}

/// A histogram family's series (one per label set), bucket counts made per-bucket from
/// Prometheus's cumulative ones.
fn histogram_points(family: &Family, start: u64, now: u64) -> Vec<HistogramDataPoint> {
    let exemplary = family.name == "tollgate_decision_seconds";
    let mut points: Vec<(Vec<KeyValue>, HistogramDataPoint, u64)> = Vec::new();
    for sample in &family.samples {
        let labels = attributes(sample, Some("le"));
        let index = match points.iter().position(|(key, _, _)| *key == labels) {
            Some(index) => index,
            None => {
                points.push((
                    labels.clone(),
                    HistogramDataPoint {
                        attributes: labels,
                        start_time_unix_nano: start,
                        time_unix_nano: now,
                        ..HistogramDataPoint::default()
                    },
                    0,
                ));
                points.len() - 1
            }
        };
        let (_, point, cumulative) = &mut points[index];
        let whole = if sample.value.is_finite() && sample.value > 0.0 {
            sample.value as u64
        } else {
            0
        };
        match sample.name.rsplit('_').next() {
            Some("bucket") => {
                let le = match sample.label("le") {
                    Some("+Inf") => f64::INFINITY,
                    Some(le) => le.parse().unwrap_or(f64::INFINITY),
                    None => continue,
                };
                point.bucket_counts.push(whole.saturating_sub(*cumulative));
                *cumulative = whole.max(*cumulative);
                if le.is_finite() {
                    point.explicit_bounds.push(le);
                }
                if exemplary && let Some(found) = exemplars::latest(le) {
                    point.exemplars.push(exemplar_of(&found));
                }
            }
            Some("sum") => point.sum = Some(sample.value),
            Some("count") => point.count = whole,
            _ => {}
        }
    }
    points.into_iter().map(|(_, point, _)| point).collect()
}

fn exemplar_of(found: &exemplars::Exemplar) -> Exemplar {
    Exemplar {
        time_unix_nano: nanos(found.at),
        span_id: found.ids.span_id.to_vec(),
        trace_id: found.ids.trace_id.to_vec(),
        value: Some(exemplar::Value::AsDouble(found.value)),
        ..Exemplar::default()
    }
}

/// A sample's labels as attributes, `skip` left out.
fn attributes(sample: &Sample, skip: Option<&str>) -> Vec<KeyValue> {
    sample
        .labels
        .iter()
        .filter(|(key, _)| Some(key.as_str()) != skip)
        .map(|(key, value)| attribute(key, value))
        .collect()
}

fn attribute(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..KeyValue::default()
    }
}

fn nanos(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_histograms_become_otlp_buckets_counted_per_bucket() {
        let families = crate::metrics::exposition::families(
            "# TYPE h_seconds histogram\n\
             h_seconds_bucket{rule=\"a\",le=\"0.1\"} 2\n\
             h_seconds_bucket{rule=\"a\",le=\"1\"} 5\n\
             h_seconds_bucket{rule=\"a\",le=\"+Inf\"} 6\n\
             h_seconds_sum{rule=\"a\"} 2.5\n\
             h_seconds_count{rule=\"a\"} 6\n\
             # TYPE c_total counter\nc_total{k=\"v\"} 4\n",
        );
        let histogram = metric(&families[0], 1, 2).unwrap();
        let Some(metric::Data::Histogram(histogram)) = histogram.data else {
            panic!("a histogram");
        };
        let point = &histogram.data_points[0];
        assert_eq!(point.explicit_bounds, [0.1, 1.0]);
        assert_eq!(point.bucket_counts, [2, 3, 1]);
        assert_eq!((point.count, point.sum), (6, Some(2.5)));
        assert_eq!(point.attributes, [attribute("rule", "a")]);
        let counter = metric(&families[1], 1, 2).unwrap();
        let Some(metric::Data::Sum(sum)) = counter.data else {
            panic!("a sum");
        };
        assert!(sum.is_monotonic);
        assert_eq!(
            sum.data_points[0].value,
            Some(number_data_point::Value::AsDouble(4.0))
        );
        assert_eq!(counter.name, "c_total", "named as /metrics names it");
    }
}
