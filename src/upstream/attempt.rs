//! One attempt of a request at one endpoint: a connection from the pool
//! ([`super::pool`]), the exchange on it ([`super::exchange`]), with its
//! timeout, passive health and the retry budget. A kept connection the
//! server closed while it was idle costs no attempt: the request goes out
//! again on the next one, twice at most.
//!
//! Which endpoint comes next, and whether a failed attempt is tried again
//! (another endpoint, or the failover region), is the caller's loop: an
//! endpoint already tried is never tried again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use http::Response;

use super::balance::{self, Candidates};
use super::body::{BodyPhase, BodyWatch, Pace, UpstreamBody};
use super::connect::{connector, ClientSettings, Connector};
use super::exchange::{exchange, ExchangeError, ResponseBody};
use super::h2::{H2Error, Unopened, Unready, CONNECTIONS, H2};
use super::health::{Admit, Health};
use super::outgoing::Outgoing;
use super::pool::{Full, Limits, Pool, PoolError, Use};
use super::retry::{is_idempotent, RegionBudgets};
use crate::config::settings::UpstreamPolicy;
use crate::config::values::is_h2;
use crate::routing::{RegionId, Upstream};

/// Most kept connections one attempt sends its request again after, each
/// found closed under it: beyond them the failure is the endpoint's. A
/// server that closes every connection a request reaches it on would
/// otherwise receive it once per kept connection.
const STALE_RESENDS: u32 = 2;

/// The upstream connections and the retry budget.
#[derive(Debug)]
pub struct Upstreams {
    pool: Pool,
    /// HTTP/2 endpoints' connections.
    h2: H2,
    budgets: RegionBudgets,
    /// Retries sent so far (for `shardgate_retries_total`).
    retries: AtomicU64,
}

/// One request's forwarding settings: the table's upstream policy (read
/// from the request's snapshot, so it reloads live), when the request
/// arrived and the pace its body must keep.
#[derive(Clone, Copy, Debug)]
pub struct AttemptSettings<'p> {
    /// Timeouts (an attempt's counts from when the request, body included,
    /// has been sent, or from when the upstream stopped reading it; never
    /// while the client is still sending, nor while the request waits for a
    /// connection), retries and their budget, limits, passive health.
    pub policy: &'p UpstreamPolicy,
    /// When the request was ready to go: its arrival, or once its body
    /// was read whole (`request_timeout` never counts a slow upload).
    pub started: Instant,
    /// How fast the client must send a body that is passed on as it arrives.
    pub pace: Pace,
    /// The client's own deadline (a gRPC call's `grpc-timeout`): a timer
    /// that runs out at or after it is the client's doing, never held
    /// against the endpoint, and it bounds the wait on the client's body.
    pub client_deadline: Option<Instant>,
}

/// What went wrong in an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptError {
    /// No connection could be opened: nothing was sent.
    Connect,
    /// The endpoint is at one of its limits (which one): nothing was sent.
    Saturated(Full),
    /// The exchange failed after the request was (or may have been) sent.
    Failed,
    /// No response head within the attempt timeout.
    Timeout,
    /// The whole request's deadline passed.
    RequestTimeout,
    /// The client broke its own body (malformed, or cut short): its fault.
    ClientBody(&'static str),
    /// The client sent its body slower than its [`Pace`]: its fault.
    BodyTimeout,
}

impl AttemptError {
    /// Whether a request that failed so after it was sent may be sent again
    /// (when that is safe): not when the client broke or stalled its body,
    /// nor when the whole request's time is up.
    pub fn may_retry(self) -> bool {
        !matches!(self, AttemptError::ClientBody(_) | AttemptError::BodyTimeout | AttemptError::RequestTimeout)
    }
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

/// One attempt: where it goes, what it sends, what it is.
#[derive(Debug)]
pub struct Attempt<'a> {
    /// The endpoint.
    pub endpoint: &'a Upstream,
    /// Its admission by health (held for the attempt: a trial request's).
    pub admit: Admit,
    /// The request: method, target, fields.
    pub out: Outgoing<'a>,
    /// What the connection is for: a request in hand, an upload, an upgrade.
    pub use_: Use,
    /// The endpoint's limits (its region's).
    pub limits: Limits,
    /// Whether a 5xx answer counts against the endpoint (not a peer's).
    pub count_5xx: bool,
    /// Whether an attempt of the request went before it: its time may be
    /// cut short by what is left of the request's.
    pub retry: bool,
}

impl Upstreams {
    /// Lets go of the HTTP/2 connections of endpoints `table` does not
    /// name (HTTP/1 connections leave with the pool's idle sweep).
    pub fn keep_only(&self, table: &crate::routing::Table) {
        self.h2.keep_only(table);
    }

    /// Upstream connections kept alive per endpoint (at most 256 idle each).
    pub fn new(settings: ClientSettings) -> Upstreams {
        let connector = connector(&settings);
        Upstreams {
            h2: H2::new(connector.clone()),
            pool: Pool::new(connector, settings.pool_idle_timeout, 256),
            budgets: RegionBudgets::default(),
            retries: AtomicU64::new(0),
        }
    }

    /// The connector (for health checks that must reach the same endpoints the same way).
    pub fn connector(&self) -> &Connector {
        self.pool.connector()
    }

    /// Retries refused by the budget so far.
    pub fn budget_exhausted(&self) -> u64 {
        self.budgets.exhausted()
    }

    /// Retries sent so far (attempts beyond the first that spent a retry).
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Upstream connections opened so far.
    pub fn connects(&self) -> u64 {
        self.pool.connects() + self.h2.connects()
    }

    /// Counts a request against `region`'s retry budget (once per request,
    /// in the region it goes to first).
    pub fn deposit(&self, region: RegionId, s: &AttemptSettings<'_>) {
        self.budgets.of(region).deposit(s.policy.budget_ratio);
    }

    /// Spends a retry of `region`'s (where the attempt failed), if its
    /// budget allows one.
    pub fn withdraw(&self, region: RegionId, s: &AttemptSettings<'_>) -> bool {
        let ok = self.budgets.of(region).withdraw(s.policy.budget_min_per_second);
        if ok {
            self.retries.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// The endpoint of `candidates` a request goes to by the region's
    /// balance, passing over those in `tried` and those health does not
    /// admit; its position and its admission.
    pub fn pick<'e>(
        &self,
        candidates: Candidates<'e>,
        tried: &[&str],
        health: &Health,
    ) -> Option<(usize, &'e Upstream, Admit)> {
        balance::pick(candidates, tried, health)
    }

    /// One attempt of the request (`a`) with `body`. Records the outcome in
    /// passive health: only what the upstream did wrong counts (refused,
    /// failed or timed out once the request was sent, an invalid response,
    /// a 5xx when `count_5xx`), never the client's half of the exchange nor
    /// the endpoint's limits. A kept connection the server turns out to have
    /// closed is dropped and the next one taken (twice at most), when the
    /// request may go again: its body untouched, or read whole and held for
    /// it.
    pub async fn attempt(
        &self,
        a: Attempt<'_>,
        mut body: UpstreamBody,
        s: &AttemptSettings<'_>,
        health: &Health,
    ) -> Result<Response<ResponseBody>, Failure> {
        // `a`, and with it the endpoint's admission (a trial request's), is
        // held until the attempt ends.
        let endpoint = a.endpoint;
        let (trial, retry) = (matches!(a.admit, Admit::Trial(_)), a.retry);
        let record =
            |failed: bool| health.record(&endpoint.pool_key, failed, trial, s.policy.eject_after, s.policy.eject_for);
        let watch = body.watch();
        if is_h2(endpoint.uri.scheme_str()) {
            // Boxed: its state (hyper's) would otherwise widen every HTTP/1 attempt's future.
            return Box::pin(self.attempt_h2(&a, body, s, watch.as_deref(), &record)).await;
        }
        let deadline = s.started + s.policy.request_timeout;
        // A request whose repeat does no harm holds its body, when read
        // whole (a count, not a copy), for a kept connection closed under it.
        let again = if is_idempotent(a.out.method) { body.again() } else { None };
        // Kept connections found closed under the request: each may have
        // carried it to the server, so after one it is no longer unsent.
        let mut stale = 0;
        loop {
            // Waiting for a connection is bounded on its own: the attempt's
            // timer, and the endpoint's blame, start once it has one.
            let until = (Instant::now() + s.policy.queue_timeout).min(deadline);
            let conn = match self.pool.connection(endpoint, a.limits, a.use_, until).await {
                Ok(conn) => conn,
                Err(PoolError::Connect(e)) => {
                    tracing::debug!(endpoint = %endpoint.uri, error = %e, "upstream connect failed");
                    record(true);
                    return Err(Failure { error: AttemptError::Connect, unsent: (stale == 0).then_some(body) });
                }
                Err(PoolError::Saturated(_)) if Instant::now() >= deadline => {
                    return Err(Failure { error: AttemptError::RequestTimeout, unsent: None });
                }
                Err(PoolError::Saturated(full)) => {
                    return Err(Failure { error: AttemptError::Saturated(full), unsent: (stale == 0).then_some(body) });
                }
            };
            // Bound before it is matched: the pinned exchange borrows `body`
            // until this statement ends, and a stale connection's arm gives
            // `body` its held copy.
            let exchanged = timed(std::pin::pin!(exchange(conn, &a.out, &mut body)), watch.as_deref(), s).await;
            match exchanged {
                Timed::Answered(Ok(resp)) => {
                    record(a.count_5xx && resp.status().is_server_error());
                    return Ok(resp);
                }
                Timed::Answered(Err(ExchangeError::Stale { error, taken })) => {
                    stale += 1;
                    if stale > STALE_RESENDS {
                        return Err(failed(ExchangeError::Io(error), watch.as_deref(), endpoint, record));
                    }
                    if taken {
                        match again.as_ref().and_then(UpstreamBody::again) {
                            Some(whole) => body = whole,
                            None => return Err(failed(ExchangeError::Io(error), watch.as_deref(), endpoint, record)),
                        }
                    }
                    tracing::debug!(endpoint = %endpoint.uri, %error, "kept connection was closed; sending on another");
                }
                Timed::Answered(Err(e)) => return Err(failed(e, watch.as_deref(), endpoint, record)),
                Timed::Slow => return Err(Failure { error: AttemptError::BodyTimeout, unsent: None }),
                Timed::Late => return Err(late(watch.as_deref(), s, retry, record)),
            }
        }
    }

    /// [`Upstreams::attempt`] at an HTTP/2 endpoint: a stream on one of
    /// its few connections ([`super::h2`]), under the same timers, health
    /// and blame. Waiting for the stream (the connection's opening, the
    /// endpoint's saturation) is not the attempt's time; a connection that
    /// closes before it takes the stream costs nothing, and the call goes
    /// once more on a new one.
    async fn attempt_h2(
        &self,
        a: &Attempt<'_>,
        mut body: UpstreamBody,
        s: &AttemptSettings<'_>,
        watch: Option<&BodyWatch>,
        record: &impl Fn(bool),
    ) -> Result<Response<ResponseBody>, Failure> {
        let endpoint = a.endpoint;
        let caps = (a.limits.max_connections.clamp(1, CONNECTIONS), a.limits.max_pending);
        for _ in 0..2 {
            let reserved = match self.h2.reserve(endpoint, caps).await {
                Ok(reserved) => reserved,
                Err(Unready::Connect { error, waited }) => {
                    tracing::debug!(endpoint = %endpoint.uri, %error, waited, "http2 upstream connect failed");
                    // One failed opening counts once, however many calls waited for it.
                    if !waited {
                        record(true);
                    }
                    return Err(Failure { error: AttemptError::Connect, unsent: Some(body) });
                }
                Err(Unready::Saturated) => {
                    return Err(Failure { error: AttemptError::Saturated(Full::Queue), unsent: Some(body) });
                }
            };
            // Waiting for the server to take the stream is bounded on its
            // own, as a wait for a pooled connection is.
            let deadline = s.started + s.policy.request_timeout;
            let opened = match self.h2.start(endpoint, reserved, &a.out, (body, s.policy.queue_timeout, deadline)).await
            {
                Ok(opened) => opened,
                Err(Unopened::Closed(e, unsent)) => {
                    tracing::debug!(endpoint = %endpoint.uri, error = %e, "http2 connection closed; sending on another");
                    body = unsent;
                    continue;
                }
                // Past the request's deadline nothing goes anywhere else.
                Err(Unopened::Pending(_)) if Instant::now() >= deadline => {
                    return Err(Failure { error: AttemptError::RequestTimeout, unsent: None });
                }
                Err(Unopened::Pending(unsent)) => {
                    return Err(Failure { error: AttemptError::Saturated(Full::Streams), unsent });
                }
                Err(Unopened::Failed(e)) => return Err(failed(ExchangeError::Io(e), watch, endpoint, record)),
            };
            let sent = self.h2.answer(endpoint, opened, s.policy.request_timeout);
            match timed(std::pin::pin!(sent), watch, s).await {
                Timed::Answered(Ok(resp)) => {
                    record(a.count_5xx && resp.status().is_server_error());
                    return Ok(ResponseBody::h2(resp));
                }
                Timed::Answered(Err(H2Error::Closed(e, unsent))) => {
                    tracing::debug!(endpoint = %endpoint.uri, error = %e, "http2 connection closed; sending on another");
                    body = unsent;
                }
                Timed::Answered(Err(H2Error::GoneAway(e))) => {
                    tracing::debug!(endpoint = %endpoint.uri, error = %e, "http2 upstream went away under the call");
                    return Err(Failure { error: AttemptError::Failed, unsent: None });
                }
                Timed::Answered(Err(H2Error::Failed(e))) => {
                    return Err(failed(ExchangeError::Io(e), watch, endpoint, record))
                }
                Timed::Slow => return Err(Failure { error: AttemptError::BodyTimeout, unsent: None }),
                Timed::Late => return Err(late(watch, s, a.retry, record)),
            }
        }
        // Closed twice under it: the endpoint is going away, not failing.
        Err(Failure { error: AttemptError::Connect, unsent: Some(body) })
    }
}

/// The failure of an exchange its timer ran out on: held against the
/// endpoint unless the client's own deadline set the timer, or the
/// request's did on a `retry` (what was left of `request_timeout` after
/// the attempts before it says nothing of this endpoint).
fn late(watch: Option<&BodyWatch>, s: &AttemptSettings<'_>, retry: bool, record: impl Fn(bool)) -> Failure {
    let cut = watch.is_none() && Instant::now() >= s.started + s.policy.request_timeout;
    if !(retry && cut) && s.client_deadline.is_none_or(|d| Instant::now() < d) {
        record(true);
    }
    let error = if cut { AttemptError::RequestTimeout } else { AttemptError::Timeout };
    Failure { error, unsent: None }
}

/// How an exchange under the attempt's timers ended.
enum Timed<T> {
    /// It ended by itself.
    Answered(T),
    /// No answer in time: the upstream's fault (see [`late`]).
    Late,
    /// The client's body fell behind its pace: the client's fault.
    Slow,
}

/// Runs `exchange` until it ends or a timer runs out ([`due`]): the
/// attempt's, or the client's pace while the exchange waits on its body.
/// The exchange is pinned where the caller made it: taken by value, its
/// state (the size of a whole exchange) was copied into this future and
/// again as it was pinned.
async fn timed<T>(
    mut exchange: std::pin::Pin<&mut impl std::future::Future<Output = T>>,
    watch: Option<&BodyWatch>,
    s: &AttemptSettings<'_>,
) -> Timed<T> {
    let started = Instant::now();
    loop {
        // The body may start waiting on its client at any moment: its pace's
        // deadline, which only moves later, is woken for too.
        let pace = watch.and_then(|w| s.pace.deadline(w.received()));
        let wake = due(watch, started, s).0.min(pace.unwrap_or(Instant::now() + s.policy.request_timeout));
        tokio::select! {
            r = exchange.as_mut() => return Timed::Answered(r),
            _ = tokio::time::sleep_until(wake.into()) => {
                // The body may have moved on while this slept: judge by now.
                let (at, late) = due(watch, started, s);
                if Instant::now() >= at {
                    return if late { Timed::Late } else { Timed::Slow };
                }
            }
        }
    }
}

/// The failure of an exchange that failed after sending: the client's when
/// its body broke (malformed, cut short), else the endpoint's.
fn failed(e: ExchangeError, watch: Option<&BodyWatch>, endpoint: &Upstream, record: impl Fn(bool)) -> Failure {
    let client = watch.and_then(BodyWatch::client_failure);
    let error = match (client, &e) {
        (Some(detail), _) => {
            tracing::debug!(endpoint = %endpoint.uri, error = %e, detail, "client body failed");
            AttemptError::ClientBody(detail)
        }
        (None, ExchangeError::ClientBody(_)) => {
            tracing::debug!(endpoint = %endpoint.uri, error = %e, "client body failed");
            AttemptError::ClientBody("the request body could not be read from the client")
        }
        (None, _) => {
            tracing::debug!(endpoint = %endpoint.uri, error = %e, "upstream request failed");
            record(true);
            AttemptError::Failed
        }
    };
    Failure { error, unsent: None }
}

/// When the exchange's next timer runs out, as things stand, and whether
/// that is the upstream's lateness (`true`) or the client's pace (`false`):
/// while the proxy waits on the client's body, only its pace counts.
fn due(watch: Option<&BodyWatch>, attempt_started: Instant, s: &AttemptSettings<'_>) -> (Instant, bool) {
    let late = |at: Instant| (at, true);
    match watch {
        // No body, or one in hand: the request was sent at once; the whole
        // request's deadline counts from its arrival.
        None => late((attempt_started + s.policy.attempt_timeout).min(s.started + s.policy.request_timeout)),
        Some(w) => match w.phase() {
            BodyPhase::Finished(at) => late(at + s.policy.attempt_timeout.min(s.policy.request_timeout)),
            // The client's idle timeout bounds a body without a pace.
            BodyPhase::WaitingOnClient => match s.pace.deadline(w.received()) {
                Some(at) => (at, false),
                None => {
                    let at = Instant::now() + s.policy.attempt_timeout;
                    late(s.client_deadline.map_or(at, |d| at.min(d)))
                }
            },
            // The upstream is not taking the body: count from the last progress.
            BodyPhase::Flowing(last) => late(last.max(attempt_started) + s.policy.attempt_timeout),
        },
    }
}
