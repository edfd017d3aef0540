//! The export queue: finished spans wait in a bounded queue for one worker
//! thread, which sends them in batches to the OTLP exporter. A request
//! never waits for the collector: a span that finds the queue full is
//! dropped and counted, and a collector that is down or slow costs the
//! queue's memory, the worker's time and the counters, nothing else.
//!
//! The SDK's own batch processor has the same shape, but it keeps its
//! dropped-span count to itself (it logs it at shutdown); this one counts
//! every span by what became of it, for `shardgate_trace_spans_total`.
//!
//! Tuned by the standard variables: `OTEL_BSP_MAX_QUEUE_SIZE` (2048),
//! `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (512), `OTEL_BSP_SCHEDULE_DELAY`
//! (milliseconds between exports; 1000 here, where the SDK waits 5000).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;

/// What became of the spans handed to the queue.
#[derive(Debug, Default)]
pub struct ExportCounts {
    /// Accepted by the collector.
    pub exported: AtomicU64,
    /// Dropped: the queue was full (the collector is behind or away).
    pub dropped: AtomicU64,
    /// Sent, and refused or lost (the collector answered an error or was unreachable).
    pub failed: AtomicU64,
}

/// The most spans `OTEL_BSP_MAX_QUEUE_SIZE` can ask the queue to hold.
pub const MAX_QUEUE: usize = 65_536;

/// The queue's sizes and pace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueSettings {
    /// Spans waiting at most; more are dropped.
    pub max_queue: usize,
    /// Spans per export at most.
    pub max_batch: usize,
    /// Longest wait before a partial batch goes.
    pub delay: Duration,
}

impl QueueSettings {
    /// The defaults, changed by the `OTEL_BSP_*` variables that `env` gives.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> QueueSettings {
        let num = |key: &str, default: u64| {
            env(key).and_then(|v| v.trim().parse::<u64>().ok()).filter(|n| *n > 0).unwrap_or(default)
        };
        // The queue's slots are made at start: a number past any real need is cut to `MAX_QUEUE`.
        let max_queue = usize::try_from(num("OTEL_BSP_MAX_QUEUE_SIZE", 2048)).unwrap_or(2048).min(MAX_QUEUE);
        let max_batch = usize::try_from(num("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)).unwrap_or(512).min(max_queue);
        QueueSettings { max_queue, max_batch, delay: Duration::from_millis(num("OTEL_BSP_SCHEDULE_DELAY", 1000)) }
    }
}

/// A [`SpanProcessor`] that queues sampled spans for the export worker.
#[derive(Debug)]
pub struct Queue {
    tx: SyncSender<SpanData>,
    counts: Arc<ExportCounts>,
    stop: Arc<AtomicBool>,
    /// The worker's "done" signal, taken by the first shutdown.
    done: Mutex<Option<Receiver<()>>>,
}

impl Queue {
    /// Starts the worker thread that sends batches to `exporter`.
    pub fn start<E: SpanExporter + 'static>(
        exporter: E,
        settings: QueueSettings,
        counts: Arc<ExportCounts>,
    ) -> std::io::Result<Queue> {
        let (tx, rx) = mpsc::sync_channel(settings.max_queue);
        let (done_tx, done_rx) = mpsc::sync_channel(1);
        let stop = Arc::new(AtomicBool::new(false));
        let worker = Worker { rx, exporter, settings, counts: Arc::clone(&counts), stop: Arc::clone(&stop) };
        std::thread::Builder::new().name("shardgate-otlp".into()).spawn(move || {
            worker.run();
            let _ = done_tx.send(());
        })?;
        Ok(Queue { tx, counts, stop, done: Mutex::new(Some(done_rx)) })
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(span) {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Spans are sent within the schedule delay; nothing waits for them.
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    /// Asks the worker to send what is queued and stop; waits at most
    /// `timeout` (capped at 2 s: shutdown must not hold a process up).
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.stop.store(true, Ordering::Relaxed);
        let done = self.done.lock().map_err(|_| OTelSdkError::InternalFailure("queue lock poisoned".into()))?.take();
        let Some(done) = done else { return Err(OTelSdkError::AlreadyShutdown) };
        match done.recv_timeout(timeout.min(Duration::from_secs(2))) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => Ok(()),
            Err(RecvTimeoutError::Timeout) => Err(OTelSdkError::Timeout(timeout)),
        }
    }

    fn set_resource(&mut self, _resource: &Resource) {}
}

/// The export thread: collects a batch (full, or as old as the delay),
/// sends it, counts the outcome.
struct Worker<E> {
    rx: Receiver<SpanData>,
    exporter: E,
    settings: QueueSettings,
    counts: Arc<ExportCounts>,
    stop: Arc<AtomicBool>,
}

/// The worker's longest sleep (how soon it sees the stop flag when idle).
const LONGEST_NAP: Duration = Duration::from_millis(100);
/// Its sleep while spans keep coming: 100 drains a second, each moving what
/// arrived meanwhile.
const BUSY_NAP: Duration = Duration::from_millis(10);

impl<E: SpanExporter> Worker<E> {
    /// Drains the queue, sleeps, drains again: it never blocks on the
    /// queue, because a worker asleep in `recv` is woken by every span
    /// sent, and that wake-up (a futex call and a switch of threads, on
    /// the request's core) cost more than the span itself under load.
    fn run(mut self) {
        let mut batch = Vec::with_capacity(self.settings.max_batch);
        let mut due = Instant::now() + self.settings.delay;
        let mut nap = BUSY_NAP;
        loop {
            let stopping = self.stop.load(Ordering::Relaxed);
            let (mut got, mut disconnected) = (false, false);
            loop {
                match self.rx.try_recv() {
                    Ok(span) => {
                        got = true;
                        batch.push(span);
                        if batch.len() >= self.settings.max_batch {
                            self.send(std::mem::take(&mut batch));
                            due = Instant::now() + self.settings.delay;
                        }
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        disconnected = true;
                        break;
                    }
                }
            }
            let ended = disconnected || stopping;
            if !batch.is_empty() && (ended || Instant::now() >= due) {
                self.send(std::mem::take(&mut batch));
                due = Instant::now() + self.settings.delay;
            }
            if ended {
                let _ = self.exporter.shutdown();
                return;
            }
            nap = if got { BUSY_NAP } else { (nap * 2).min(LONGEST_NAP) };
            std::thread::sleep(nap.min(self.settings.delay));
        }
    }

    fn send(&mut self, batch: Vec<SpanData>) {
        let n = batch.len() as u64;
        match futures_executor::block_on(self.exporter.export(batch)) {
            Ok(()) => self.counts.exported.fetch_add(n, Ordering::Relaxed),
            Err(e) => {
                tracing::debug!(error = %e, spans = n, "span export failed");
                self.counts.failed.fetch_add(n, Ordering::Relaxed)
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::Sender;

    #[test]
    fn a_queue_size_past_any_need_is_cut_to_the_most_the_queue_holds() {
        let env = |k: &str| (k == "OTEL_BSP_MAX_QUEUE_SIZE").then(|| "10000000000".to_string());
        let s = QueueSettings::from_env(env);
        assert_eq!((s.max_queue, s.max_batch), (super::MAX_QUEUE, 512));
    }

    use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
    use opentelemetry::InstrumentationScope;
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};

    use super::*;

    /// An exporter that reports each batch and then hangs until told to go on.
    #[derive(Debug)]
    struct Stuck {
        batches: Mutex<Sender<usize>>,
        go: Mutex<Receiver<()>>,
    }

    impl SpanExporter for Stuck {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            if let Ok(tx) = self.batches.lock() {
                let _ = tx.send(batch.len());
            }
            if let Ok(go) = self.go.lock() {
                let _ = go.recv();
            }
            Ok(())
        }
    }

    fn span(sampled: bool) -> SpanData {
        let flags = if sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
        SpanData {
            span_context: SpanContext::new(TraceId::from(1), SpanId::from(1), flags, false, TraceState::default()),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "s".into(),
            start_time: std::time::SystemTime::UNIX_EPOCH,
            end_time: std::time::SystemTime::UNIX_EPOCH,
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: InstrumentationScope::default(),
        }
    }

    #[test]
    fn a_stuck_exporter_costs_dropped_spans_never_a_wait() -> Result<(), Box<dyn std::error::Error>> {
        let (batches_tx, batches) = mpsc::channel();
        let (go, go_rx) = mpsc::channel();
        let stuck = Stuck { batches: Mutex::new(batches_tx), go: Mutex::new(go_rx) };
        let settings = QueueSettings { max_queue: 4, max_batch: 1, delay: Duration::from_millis(10) };
        let counts = Arc::new(ExportCounts::default());
        let queue = Queue::start(stuck, settings, Arc::clone(&counts))?;
        queue.on_end(span(true));
        // The worker holds that one span in an export that does not return.
        assert_eq!(batches.recv_timeout(Duration::from_secs(10))?, 1);
        for _ in 0..10 {
            queue.on_end(span(true));
        }
        queue.on_end(span(false));
        assert_eq!(counts.dropped.load(Ordering::Relaxed), 6, "4 queued, 6 dropped, the unsampled one ignored");
        for _ in 0..5 {
            go.send(())?;
        }
        for _ in 0..4 {
            assert_eq!(batches.recv_timeout(Duration::from_secs(10))?, 1);
        }
        drop(go);
        queue.shutdown_with_timeout(Duration::from_secs(2))?;
        assert_eq!(counts.exported.load(Ordering::Relaxed), 5);
        Ok(())
    }
}
