//! One attempt of a request at one endpoint: a connection from the pool
//! ([`super::pool`]), the exchange on it ([`super::exchange`]), with its
//! timeout, passive health and the retry budget. A kept connection the
//! server closed while it was idle costs no attempt: the request goes out
//! again on the next one.
//!
//! Which endpoint comes next, and whether a failed attempt is tried again
//! (another endpoint, or the failover region), is the caller's loop: an
//! endpoint already tried is never tried again.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::{HeaderMap, Method, Response, Uri};
use http_body_util::Either;

use super::body::{BodyPhase, BodyWatch, UpstreamBody};
use super::connect::{connector, ClientSettings, Connector};
use super::exchange::{exchange, ExchangeError, Outgoing, ResponseBody};
use super::health::{Admit, Health};
use super::pool::{Limits, Pool, PoolError};
use super::retry::RetryBudget;
use crate::http1::write::Added;
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

    /// Upstream connections opened so far.
    pub fn connects(&self) -> u64 {
        self.pool.connects()
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
    /// origin-form target), `headers` (their `Host` is not sent: the
    /// endpoint's goes out), the proxy's `added` fields and `body`. Records
    /// the outcome in passive health: only what the upstream did wrong
    /// counts (refused, failed or timed out once the request was sent, an
    /// invalid response, a 5xx when `count_5xx`), never the client's half of
    /// the exchange nor the endpoint's connection cap.
    #[allow(clippy::too_many_arguments)]
    pub async fn attempt(
        &self,
        endpoint: &Upstream,
        admit: Admit,
        method: &Method,
        path: &http::uri::PathAndQuery,
        headers: &HeaderMap,
        added: &Added,
        body: UpstreamBody,
        s: &AttemptSettings,
        count_5xx: bool,
        health: &Health,
    ) -> Result<Response<ResponseBody>, Failure> {
        let watch = match &body {
            Either::Left(b) => Some(b.watch()),
            Either::Right(_) => None,
        };
        let out = Outgoing { method, target: path.as_str(), host: &endpoint.host, headers, added };
        let record = |failed: bool| health.record(&endpoint.uri, failed, s.eject_after, s.eject_for);
        let send = self.send(endpoint, &out, body, s.limits);
        tokio::pin!(send);
        let attempt_started = Instant::now();
        let mut now = attempt_started;
        let outcome = loop {
            let wake = due(watch.as_deref(), attempt_started, s).unwrap_or(now + s.attempt_timeout);
            tokio::select! {
                r = &mut send => break Some(r),
                _ = tokio::time::sleep_until(wake.into()) => {
                    // The body may have moved on while this slept: judge by now.
                    now = Instant::now();
                    if due(watch.as_deref(), attempt_started, s).is_some_and(|d| now >= d) {
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
            Some(Err(Unsent::Connect(e, body))) => {
                tracing::debug!(endpoint = %endpoint.uri, error = %e, "upstream connect failed");
                record(true);
                Err(Failure { error: AttemptError::Connect, unsent: Some(body) })
            }
            Some(Err(Unsent::Saturated(body))) => Err(Failure { error: AttemptError::Saturated, unsent: Some(body) }),
            Some(Err(Unsent::Failed(e))) => {
                let client = watch.as_deref().and_then(BodyWatch::client_failure);
                match (client, &e) {
                    (Some(detail), _) => {
                        tracing::debug!(endpoint = %endpoint.uri, error = %e, detail, "client body failed");
                        Err(Failure { error: AttemptError::ClientBody(detail), unsent: None })
                    }
                    (None, ExchangeError::ClientBody(_)) => {
                        tracing::debug!(endpoint = %endpoint.uri, error = %e, "client body failed");
                        let detail = "the request body could not be read from the client";
                        Err(Failure { error: AttemptError::ClientBody(detail), unsent: None })
                    }
                    (None, _) => {
                        tracing::debug!(endpoint = %endpoint.uri, error = %e, "upstream request failed");
                        record(true);
                        Err(Failure { error: AttemptError::Failed, unsent: None })
                    }
                }
            }
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

    /// Sends the request on a connection to `endpoint`: a kept one the
    /// server turns out to have closed is dropped and the next one taken
    /// (the body was not touched), until a fresh one, which cannot be stale.
    async fn send(
        &self,
        endpoint: &Upstream,
        out: &Outgoing<'_>,
        mut body: UpstreamBody,
        limits: Limits,
    ) -> Result<Response<ResponseBody>, Unsent> {
        loop {
            let conn = match self.pool.connection(endpoint, limits).await {
                Ok(conn) => conn,
                Err(PoolError::Connect(e)) => return Err(Unsent::Connect(e, body)),
                Err(PoolError::Saturated) => return Err(Unsent::Saturated(body)),
            };
            match exchange(conn, out, &mut body).await {
                Ok(resp) => return Ok(resp),
                Err(ExchangeError::Stale(e)) => {
                    tracing::debug!(endpoint = %endpoint.uri, error = %e, "kept connection was closed; sending on another");
                }
                Err(e) => return Err(Unsent::Failed(e)),
            }
        }
    }
}

/// How [`Upstreams::send`] failed: with the body back when nothing was sent.
enum Unsent {
    Connect(String, UpstreamBody),
    Saturated(UpstreamBody),
    Failed(ExchangeError),
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
