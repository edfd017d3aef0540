//! Forward: one attempt of a request at one endpoint over a kept-alive
//! connection ([`super::pool`]), with its timeout, passive health and the
//! retry budget; the client's body watched so that a failure is blamed on
//! the side that caused it; streaming bodies and upgrade tunnelling.
//!
//! Which endpoint comes next, and whether a failed attempt is tried again
//! (another endpoint, or the failover region), is the caller's loop
//! ([`super::Proxy`]): an endpoint already tried is never tried again.

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use http_body_util::{Either, Empty};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;

use super::error::ProxyError;
use super::pool::{Limits, Pool, PoolBody, PoolError};
use crate::mesh::health::{Admit, Health};
use crate::routing::Upstream;

/// Body sent upstream: the client's streamed body, or nothing (which can be
/// sent again on a retry).
pub type UpstreamBody = Either<ClientBody, Empty<Bytes>>;

/// The connector of every upstream and peer client: plain TCP for
/// `http://`, rustls for `https://` (HTTP/1.1 by ALPN).
pub type Connector = HttpsConnector<HttpConnector>;

/// The upstream connections, the round-robin cursor and the retry budget.
#[derive(Debug)]
pub struct Upstreams {
    pool: Pool,
    cursor: AtomicUsize,
    budget: RetryBudget,
    /// Retries sent so far (for `shardgate_retries_total`).
    retries: AtomicU64,
}

/// Client settings fixed at start-up (changing them needs a restart).
#[derive(Clone, Debug)]
pub struct ClientSettings {
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// How long idle pooled connections are kept.
    pub pool_idle_timeout: Duration,
    /// TLS for `https://` endpoints; `None`: the system roots, no client certificate.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// The connector for `settings`: `http://` and `https://` endpoints alike.
pub fn connector(settings: &ClientSettings) -> Connector {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(settings.connect_timeout));
    http.set_nodelay(true);
    // The TLS layer sees `https://` URIs only if the TCP layer lets them through.
    http.enforce_http(false);
    let tls = match &settings.tls {
        Some(c) => (**c).clone(),
        None => crate::tls::client_config_or_closed(&crate::config::raw::UpstreamTls::default()),
    };
    HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().wrap_connector(http)
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

/// Why an attempt failed, and whether the request may be tried again.
#[derive(Debug)]
pub struct Failure {
    /// What to answer if it is not tried again.
    pub error: ProxyError,
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
        region: &str,
        s: &AttemptSettings,
        count_5xx: bool,
        health: &Health,
    ) -> Result<Response<PoolBody>, Failure> {
        let watch = match &body {
            Either::Left(b) => Some(Arc::clone(&b.watch)),
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
                let error = ProxyError::UpstreamConnect { region: region.to_string() };
                Err(Failure { error, unsent: Some(req.into_body()) })
            }
            Some(Err(PoolError::Saturated(req))) => {
                let error = ProxyError::UpstreamSaturated { region: region.to_string() };
                Err(Failure { error, unsent: Some(req.into_body()) })
            }
            Some(Err(PoolError::Failed(e))) => match watch.as_deref().and_then(BodyWatch::client_failure) {
                Some(detail) => {
                    tracing::debug!(endpoint = %endpoint.uri, error = %e, detail, "client body failed");
                    Err(Failure { error: ProxyError::ClientBody { detail }, unsent: None })
                }
                None => {
                    tracing::debug!(endpoint = %endpoint.uri, error = %e, "upstream request failed");
                    record(true);
                    Err(Failure { error: ProxyError::UpstreamFailed { region: region.to_string() }, unsent: None })
                }
            },
            None => {
                record(true);
                let error = if watch.is_none() && Instant::now() >= s.started + s.request_timeout {
                    ProxyError::RequestTimeout
                } else {
                    ProxyError::UpstreamTimeout { region: region.to_string() }
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

/// Where a client's body stands on its way upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyPhase {
    /// The proxy is waiting for the client's next bytes.
    WaitingOnClient,
    /// The last bytes went upstream at this time; the upstream has not asked for more since.
    Flowing(Instant),
    /// The whole body was passed on at this time.
    Finished(Instant),
}

/// What the proxy saw of a client's body while passing it upstream, shared
/// between the connection that sends it and the request that waits for the
/// answer.
#[derive(Debug)]
pub struct BodyWatch {
    origin: Instant,
    /// Milliseconds after `origin` of the last frame passed on.
    last_ms: AtomicU64,
    state: AtomicU8,
}

const WAITING: u8 = 1;
const FINISHED: u8 = 2;
const ABORTED: u8 = 4;
const MALFORMED: u8 = 8;

impl BodyWatch {
    fn new() -> BodyWatch {
        BodyWatch { origin: Instant::now(), last_ms: AtomicU64::new(0), state: AtomicU8::new(0) }
    }

    fn touch(&self, set: u8) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
        let state = self.state.load(Ordering::Relaxed);
        self.state.store((state & !WAITING) | set, Ordering::Relaxed);
    }

    /// Where the body stands.
    pub fn phase(&self) -> BodyPhase {
        let state = self.state.load(Ordering::Relaxed);
        let last = self.origin + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        if state & FINISHED != 0 {
            BodyPhase::Finished(last)
        } else if state & WAITING != 0 {
            BodyPhase::WaitingOnClient
        } else {
            BodyPhase::Flowing(last)
        }
    }

    /// Why the client's body failed, if it did.
    pub fn client_failure(&self) -> Option<&'static str> {
        let state = self.state.load(Ordering::Relaxed);
        if state & MALFORMED != 0 {
            Some("the request body is malformed (its framing could not be read)")
        } else if state & ABORTED != 0 {
            Some("the client stopped sending the request body before its end")
        } else {
            None
        }
    }
}

/// The client's request body on its way upstream, reporting into a
/// [`BodyWatch`] what it sees: so an attempt's timeout does not run while
/// the client is still sending, and a body the client broke (malformed
/// framing, an upload cut short) is the client's 400, not a failure held
/// against the upstream.
#[derive(Debug)]
pub struct ClientBody {
    inner: Incoming,
    watch: Arc<BodyWatch>,
}

impl ClientBody {
    /// Watches `inner`.
    pub fn new(inner: Incoming) -> ClientBody {
        ClientBody { inner, watch: Arc::new(BodyWatch::new()) }
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        let w = &self.watch;
        match &polled {
            Poll::Pending => {
                w.state.fetch_or(WAITING, Ordering::Relaxed);
            }
            Poll::Ready(Some(Ok(_))) => w.touch(0),
            Poll::Ready(None) => w.touch(FINISHED),
            Poll::Ready(Some(Err(e))) => w.touch(if e.is_incomplete_message() { ABORTED } else { MALFORMED }),
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// `endpoint` (scheme and authority) joined with the request's path and query.
pub(crate) fn upstream_uri(endpoint: &Uri, path_and_query: &str) -> Result<Uri, http::Error> {
    let mut b = Uri::builder();
    if let Some(s) = endpoint.scheme() {
        b = b.scheme(s.clone());
    }
    if let Some(a) = endpoint.authority() {
        b = b.authority(a.clone());
    }
    b.path_and_query(path_and_query).build()
}

/// RFC 9110 §9.2.2 idempotent methods.
pub fn is_idempotent(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE)
}

/// A retry budget in the style of Finagle and Linkerd: every request
/// deposits `ratio` of a retry, every retry withdraws one; in addition
/// `min_per_second` retries are always allowed each second. It keeps
/// retries from multiplying load when an upstream is failing.
#[derive(Debug)]
struct RetryBudget {
    /// Balance in thousandths of a retry, capped.
    milli_tokens: AtomicI64,
    /// The current second (Unix) and retries spent from its free reserve.
    second: AtomicU64,
    reserve_used: AtomicU64,
    exhausted: AtomicU64,
}

const BUDGET_CAP: i64 = 1_000_000; // at most 1000 banked retries

impl RetryBudget {
    fn new() -> Self {
        RetryBudget {
            milli_tokens: AtomicI64::new(0),
            second: AtomicU64::new(0),
            reserve_used: AtomicU64::new(0),
            exhausted: AtomicU64::new(0),
        }
    }

    fn deposit(&self, ratio: f64) {
        let add = (ratio.clamp(0.0, 1.0) * 1000.0) as i64;
        if add > 0 && self.milli_tokens.load(Ordering::Relaxed) < BUDGET_CAP {
            self.milli_tokens.fetch_add(add, Ordering::Relaxed);
        }
    }

    fn withdraw(&self, min_per_second: u32) -> bool {
        let now = crate::ids::SystemClock.unix_secs();
        if self.second.swap(now, Ordering::Relaxed) != now {
            self.reserve_used.store(0, Ordering::Relaxed);
        }
        if self.reserve_used.fetch_add(1, Ordering::Relaxed) < u64::from(min_per_second) {
            return true;
        }
        if self.milli_tokens.fetch_sub(1000, Ordering::Relaxed) >= 1000 {
            return true;
        }
        self.milli_tokens.fetch_add(1000, Ordering::Relaxed);
        self.exhausted.fetch_add(1, Ordering::Relaxed);
        false
    }
}

/// Tunnels an upgraded connection (WebSocket) between client and upstream
/// once both sides have switched protocols.
pub fn spawn_tunnel(client: hyper::upgrade::OnUpgrade, upstream: hyper::upgrade::OnUpgrade) {
    tokio::spawn(async move {
        let (Ok(c), Ok(u)) = (client.await, upstream.await) else {
            tracing::debug!("upgrade failed on one side; tunnel not opened");
            return;
        };
        let mut c = TokioIo::new(c);
        let mut u = TokioIo::new(u);
        if let Err(e) = tokio::io::copy_bidirectional(&mut c, &mut u).await {
            tracing::debug!(error = %e, "upgraded tunnel closed with an error");
        }
    });
}

/// Whether an upstream answered `101 Switching Protocols`.
pub fn is_switching<B>(resp: &Response<B>) -> bool {
    resp.status() == StatusCode::SWITCHING_PROTOCOLS
}
