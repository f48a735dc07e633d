//! The span queue: ended, sampled spans wait here (at most `capacity` of them) and a task of
//! its own exports them in batches — when a batch is full, or every schedule delay. A full
//! queue drops the span and counts it; a request never waits on the collector.
//!
//! Not the SDK's `BatchSpanProcessor`, which does the same but keeps how many spans it
//! dropped to itself: an operator whose collector is down or slow must see what is lost,
//! so every span is counted in `tollgate_telemetry_spans_total{outcome}` — `exported`,
//! `dropped` (the queue was full) or `failed` (the collector refused the batch or did not
//! answer within the export timeout).

use std::time::Duration;

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter, SpanProcessor};
use tokio::sync::mpsc;

/// What happened to spans: each outcome of `tollgate_telemetry_spans_total`.
pub(crate) const OUTCOMES: [&str; 3] = ["exported", "dropped", "failed"];

/// A request to the exporting task, answered once done.
enum Control {
    Flush(std::sync::mpsc::Sender<()>),
    Shutdown(std::sync::mpsc::Sender<()>),
}

/// The queue's sending side, as the tracer provider's span processor.
#[derive(Debug)]
pub(crate) struct Queue {
    spans: mpsc::Sender<SpanData>,
    control: mpsc::UnboundedSender<Control>,
    dropped: metrics::Counter,
}

/// How a queue exports.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batching {
    /// Spans waiting at most.
    pub(crate) capacity: usize,
    /// Spans in one export at most.
    pub(crate) batch: usize,
    /// How long a span waits for its batch to fill.
    pub(crate) delay: Duration,
    /// How long one export may take.
    pub(crate) timeout: Duration,
}

impl Queue {
    /// A queue exporting to `exporter` as `batching` says, its task spawned on the current
    /// tokio runtime.
    pub(crate) fn start<E: SpanExporter + 'static>(exporter: E, batching: Batching) -> Queue {
        let (spans, receiver) = mpsc::channel(batching.capacity.max(1));
        let (control, controls) = mpsc::unbounded_channel();
        tokio::spawn(run(exporter, receiver, controls, batching));
        Queue {
            spans,
            control,
            dropped: counter("dropped"),
        }
    }

    /// Asks the task for `control` and waits (at most `timeout`) for it to be done.
    fn ask(
        &self,
        control: fn(std::sync::mpsc::Sender<()>) -> Control,
        timeout: Duration,
    ) -> OTelSdkResult {
        let (done, finished) = std::sync::mpsc::channel();
        self.control
            .send(control(done))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        finished
            .recv_timeout(timeout)
            .map_err(|_| OTelSdkError::Timeout(timeout))
    }
}

fn counter(outcome: &'static str) -> metrics::Counter {
    metrics::counter!("tollgate_telemetry_spans_total", "outcome" => outcome)
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.spans.try_send(span).is_err() {
            self.dropped.increment(1);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(Control::Flush, Duration::from_secs(30))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.ask(Control::Shutdown, timeout)
    }
}

/// The exporting task: batches from `spans`, exported one at a time.
async fn run<E: SpanExporter>(
    exporter: E,
    mut spans: mpsc::Receiver<SpanData>,
    mut controls: mpsc::UnboundedReceiver<Control>,
    batching: Batching,
) {
    let (exported, failed) = (counter("exported"), counter("failed"));
    let mut batch = Vec::with_capacity(batching.batch);
    let mut tick = tokio::time::interval(batching.delay);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            span = spans.recv() => {
                let Some(span) = span else { break };
                batch.push(span);
                if batch.len() >= batching.batch {
                    export(&exporter, &mut batch, batching.timeout, &exported, &failed).await;
                }
            }
            _ = tick.tick() => {
                if !batch.is_empty() {
                    export(&exporter, &mut batch, batching.timeout, &exported, &failed).await;
                }
            }
            control = controls.recv() => {
                // Everything queued so far goes out before the answer.
                while let Ok(span) = spans.try_recv() {
                    batch.push(span);
                    if batch.len() >= batching.batch {
                        export(&exporter, &mut batch, batching.timeout, &exported, &failed).await;
                    }
                }
                if !batch.is_empty() {
                    export(&exporter, &mut batch, batching.timeout, &exported, &failed).await;
                }
                match control {
                    Some(Control::Flush(done)) => {
                        let _ = done.send(());
                    }
                    Some(Control::Shutdown(done)) => {
                        let _ = exporter.shutdown_with_timeout(batching.timeout);
                        let _ = done.send(());
                        break;
                    }
                    None => break,
                }
            }
        }
    }
}

/// Exports `batch` (emptying it) within `timeout`, counting each span's outcome.
async fn export<E: SpanExporter>(
    exporter: &E,
    batch: &mut Vec<SpanData>,
    timeout: Duration,
    exported: &metrics::Counter,
    failed: &metrics::Counter,
) {
    let spans = std::mem::take(batch);
    let count = u64::try_from(spans.len()).unwrap_or(u64::MAX);
    match tokio::time::timeout(timeout, exporter.export(spans)).await {
        Ok(Ok(())) => exported.increment(count),
        Ok(Err(error)) => {
            tracing::debug!(%error, spans = count, "the collector refused spans");
            failed.increment(count);
        }
        Err(_) => {
            tracing::debug!(spans = count, "the collector did not take spans in time");
            failed.increment(count);
        }
    }
}
