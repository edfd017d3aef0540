//! One attempt of a request at one endpoint over a kept-alive connection
//! ([`super::pool`]), with its timeout, passive health and the retry budget.
//!
//! Which endpoint comes next, and whether a failed attempt is tried again
//! (another endpoint, or the failover region), is the caller's loop: an
//! endpoint already tried is never tried again.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::{HeaderMap, Method, Request, Response, Uri};
use http_body_util::Either;

use super::body::{BodyPhase, BodyWatch, UpstreamBody};
use super::connect::{connector, ClientSettings, Connector};
use super::health::{Admit, Health};
use super::pool::{Limits, Pool, PoolBody, PoolError};
use super::retry::RetryBudget;
use crate::routing::Upstream;

/// The upstream connections, the round-robin cursor and the retry budget.
#[derive(Debug)]
pub struct Upstreams {
    pool: Pool,
    cursor: AtomicUsize,
    budget: RetryBudget,
    /// Retries sent so far (for `shardgate_retries_total`).
    retries: AtomicU64,
}

/// Per-request forwarding settings (taken from the table snapshot, so they
/// reload live).
#[derive(Clone, Copy, Debug)]
pub struct AttemptSettings {
    /// Timeout of one attempt, until the response headers arrive, counted
    /// from when the request (head and body) has been sent, or from when the
    /// upstream stopped reading it; never while the client is still sending.
    pub attempt_timeout: Duration,
    /// Timeout of the whole request, retries included, counted the same way.
    pub request_timeout: Duration,
    /// When the request arrived.
    pub started: Instant,
    /// Retries allowed after the first attempt.
    pub retries: u32,
    /// Retry budget ratio.
    pub budget_ratio: f64,
    /// Retries always allowed per second.
    pub budget_min_per_second: u32,
    /// Passive health: failures in a row that eject an endpoint (0: never).
    pub eject_after: u32,
    /// How long an ejected endpoint is left out.
    pub eject_for: Duration,
    /// Connections per endpoint and requests waiting for one.
    pub limits: Limits,
}

/// What went wrong in an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptError {
    /// No connection could be opened: nothing was sent.
    Connect,
    /// The endpoint is at its connection cap with a full wait queue: nothing was sent.
    Saturated,
    /// The exchange failed after the request was (or may have been) sent.
    Failed,
    /// No response head within the attempt timeout.
    Timeout,
    /// The whole request's deadline passed.
    RequestTimeout,
    /// The client broke its own body (malformed, or cut short): its fault.
    ClientBody(&'static str),
}

/// Why an attempt failed, and whether the request may be tried again.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong.
    pub error: AttemptError,
    /// The body, given back when nothing was sent (so another endpoint can
    /// take the request as it is).
    pub unsent: Option<UpstreamBody>,
}

impl Upstreams {
    /// Upstream connections kept alive per endpoint (at most 256 idle each).
    pub fn new(settings: ClientSettings) -> Upstreams {
        let connector = connector(&settings);
        Upstreams {
            pool: Pool::new(connector, settings.pool_idle_timeout, 256),
            cursor: AtomicUsize::new(0),
            budget: RetryBudget::new(),
            retries: AtomicU64::new(0),
        }
    }

    /// The connector (for health checks that must reach the same endpoints the same way).
    pub fn connector(&self) -> &Connector {
        self.pool.connector()
    }

    /// Retries refused by the budget so far.
    pub fn budget_exhausted(&self) -> u64 {
        self.budget.exhausted.load(Ordering::Relaxed)
    }

    /// Retries sent so far (attempts beyond the first that spent a retry).
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Counts a request against the retry budget (once per request).
    pub fn deposit(&self, s: &AttemptSettings) {
        self.budget.deposit(s.budget_ratio);
    }

    /// Spends a retry, if the budget allows one.
    pub fn withdraw(&self, s: &AttemptSettings) -> bool {
        let ok = self.budget.withdraw(s.budget_min_per_second);
        if ok {
            self.retries.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// The next endpoint in rotation among `endpoints` that is not in
    /// `tried` and that health admits, with its admission.
    pub fn pick<'e>(
        &self,
        endpoints: &'e [Upstream],
        tried: &[&Uri],
        health: &Health,
    ) -> Option<(&'e Upstream, Admit)> {
        let start = self.cursor.fetch_add(1, Ordering::Relaxed);
        (0..endpoints.len()).find_map(|i| {
            let e = &endpoints[start.wrapping_add(i) % endpoints.len()];
            if tried.contains(&&e.uri) {
                return None;
            }
            match health.admit(&e.uri) {
                Admit::No => None,
                admit => Some((e, admit)),
            }
        })
    }

    /// One attempt of the request at `endpoint`: `method`, `path` (the
    /// origin-form target), `headers` (`Host` is set here from the table)
    /// and `body`. Records the outcome in passive health: only what the
    /// upstream did wrong counts (refused, failed or timed out once the
    /// request was sent, a 5xx when `count_5xx`), never the client's half
    /// of the exchange nor the endpoint's connection cap.
    #[allow(clippy::too_many_arguments)]
    pub async fn attempt(
        &self,
        endpoint: &Upstream,
        admit: Admit,
        method: &Method,
        path: &http::uri::PathAndQuery,
        mut headers: HeaderMap,
        body: UpstreamBody,
        s: &AttemptSettings,
        count_5xx: bool,
        health: &Health,
    ) -> Result<Response<PoolBody>, Failure> {
        let watch = match &body {
            Either::Left(b) => Some(b.watch()),
            Either::Right(_) => None,
        };
        headers.insert(http::header::HOST, endpoint.host.clone());
        let mut req = Request::new(body);
        *req.method_mut() = method.clone();
        // Origin-form: the connection is already to the endpoint.
        *req.uri_mut() = Uri::from(path.clone());
        *req.version_mut() = http::Version::HTTP_11;
        *req.headers_mut() = headers;
        let record = |failed: bool| health.record(&endpoint.uri, failed, s.eject_after, s.eject_for);
        let exchange = self.pool.send(endpoint, req, s.limits);
        tokio::pin!(exchange);
        let attempt_started = Instant::now();
        let outcome = loop {
            let now = Instant::now();
            let wake = due(watch.as_deref(), attempt_started, s).unwrap_or(now + s.attempt_timeout);
            tokio::select! {
                r = &mut exchange => break Some(r),
                _ = tokio::time::sleep_until(wake.into()) => {
                    // The body may have moved on while this slept: judge by now.
                    if due(watch.as_deref(), attempt_started, s).is_some_and(|d| Instant::now() >= d) {
                        break None;
                    }
                }
            }
        };
        let _trial = admit;
        match outcome {
            Some(Ok(resp)) => {
                record(count_5xx && resp.status().is_server_error());
                Ok(resp)
            }
            Some(Err(PoolError::Connect(e, req))) => {
                tracing::debug!(endpoint = %endpoint.uri, error = %e, "upstream connect failed");
                record(true);
                Err(Failure { error: AttemptError::Connect, unsent: Some(req.into_body()) })
            }
            Some(Err(PoolError::Saturated(req))) => {
                Err(Failure { error: AttemptError::Saturated, unsent: Some(req.into_body()) })
            }
            Some(Err(PoolError::Failed(e))) => match watch.as_deref().and_then(BodyWatch::client_failure) {
                Some(detail) => {
                    tracing::debug!(endpoint = %endpoint.uri, error = %e, detail, "client body failed");
                    Err(Failure { error: AttemptError::ClientBody(detail), unsent: None })
                }
                None => {
                    tracing::debug!(endpoint = %endpoint.uri, error = %e, "upstream request failed");
                    record(true);
                    Err(Failure { error: AttemptError::Failed, unsent: None })
                }
            },
            None => {
                record(true);
                let error = if watch.is_none() && Instant::now() >= s.started + s.request_timeout {
                    AttemptError::RequestTimeout
                } else {
                    AttemptError::Timeout
                };
                Err(Failure { error, unsent: None })
            }
        }
    }
}

/// When the attempt times out, as things stand: `None` while the client is
/// still sending its body (the client side's idle timeout bounds that).
fn due(watch: Option<&BodyWatch>, attempt_started: Instant, s: &AttemptSettings) -> Option<Instant> {
    match watch {
        // No body: the request was sent at once; the whole request's
        // deadline counts from its arrival.
        None => Some((attempt_started + s.attempt_timeout).min(s.started + s.request_timeout)),
        Some(w) => match w.phase() {
            BodyPhase::Finished(at) => Some(at + s.attempt_timeout.min(s.request_timeout)),
            BodyPhase::WaitingOnClient => None,
            // The upstream is not taking the body: count from the last progress.
            BodyPhase::Flowing(last) => Some(last.max(attempt_started) + s.attempt_timeout),
        },
    }
}
