//! Forward: send the request to one of the chosen region's endpoints
//! over a kept-alive connection ([`super::pool`]), with per-attempt and whole-request timeouts,
//! safe retries under a budget, streaming bodies and upgrade tunnelling.

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{Either, Empty};
use hyper::body::{Body, Incoming};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;

use super::error::ProxyError;
use super::pool::{Pool, PoolError};
use crate::mesh::health::Health;

/// Body sent upstream: the client's streamed body, or nothing (which can be
/// sent again on a retry).
pub type UpstreamBody = Either<Incoming, Empty<Bytes>>;

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
    /// Timeout of one attempt, until the response headers arrive.
    pub attempt_timeout: Duration,
    /// Deadline of the whole request, retries included.
    pub deadline: Instant,
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
    /// Whether a 5xx answer counts against the endpoint. Off for peers: a
    /// peer's 5xx speaks of its region (or is its own loop guard), not of
    /// the peer being unhealthy.
    pub count_5xx: bool,
}

impl Upstreams {
    /// Upstream connections kept alive per endpoint (at most 256 each).
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

    /// Sends `parts` + `body` to one of `endpoints` (base URIs such as
    /// `http://10.0.0.1:8080`), moving to the next endpoint when a connection
    /// cannot be made. The request's path and query are kept; the authority
    /// comes only from the table.
    ///
    /// Retries happen only when safe: the request has no body (so it can be
    /// sent again) and either nothing was sent (connect failure) or the
    /// method is idempotent (RFC 9110 §9.2.2); at most `retries` times and
    /// only while the retry budget allows.
    #[allow(clippy::too_many_arguments)]
    pub async fn send(
        &self,
        parts: &http::request::Parts,
        body: Incoming,
        endpoints: &[crate::routing::Upstream],
        region: &str,
        s: AttemptSettings,
        attempts: &mut u32,
        health: &Health,
    ) -> Result<Response<Incoming>, ProxyError> {
        let usable = endpoints.iter().filter(|e| health.usable(&e.uri)).count();
        if usable == 0 {
            return Err(ProxyError::RegionUnavailable { region: region.to_string() });
        }
        self.budget.deposit(s.budget_ratio);
        let replayable = body.is_end_stream();
        let mut body = if replayable { None } else { Some(body) };
        let mut cursor = self.cursor.fetch_add(1, Ordering::Relaxed);
        // One pass over the usable endpoints for connect failures, plus the retries.
        let max_attempts = usable as u32 + s.retries;
        let mut last_err = ProxyError::UpstreamConnect { region: region.to_string() };
        let mut retries_used = 0;
        for i in 0..max_attempts {
            // The next endpoint in rotation that is up and not ejected.
            let Some(endpoint) = (0..endpoints.len()).find_map(|_| {
                let e = &endpoints[cursor % endpoints.len()];
                cursor = cursor.wrapping_add(1);
                health.usable(&e.uri).then_some(e)
            }) else {
                return Err(ProxyError::RegionUnavailable { region: region.to_string() });
            };
            // The client's path and query as hyper parsed them (shared bytes, not parsed again).
            let path = parts.uri.path_and_query().cloned().unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
            // Origin-form: the connection is already to the endpoint.
            let uri = Uri::from(path);
            let b = match body.take() {
                Some(b) => Either::Left(b),
                None => Either::Right(Empty::new()),
            };
            let mut req = Request::new(b);
            *req.method_mut() = parts.method.clone();
            *req.uri_mut() = uri;
            *req.version_mut() = http::Version::HTTP_11;
            *req.headers_mut() = parts.headers.clone();
            req.headers_mut().insert(http::header::HOST, endpoint.host.clone());
            let now = Instant::now();
            if now >= s.deadline {
                return Err(ProxyError::RequestTimeout);
            }
            let timeout = s.attempt_timeout.min(s.deadline - now);
            *attempts += 1;
            let outcome = tokio::time::timeout(timeout, self.pool.send(endpoint, req)).await;
            let idempotent = is_idempotent(&parts.method);
            let (err, retry_ok) = match outcome {
                Ok(Ok(resp)) => {
                    health.record(
                        &endpoint.uri,
                        s.count_5xx && resp.status().is_server_error(),
                        s.eject_after,
                        s.eject_for,
                    );
                    return Ok(resp);
                }
                Ok(Err(PoolError::Connect(e))) => {
                    tracing::debug!(endpoint = %endpoint.uri, error = %e, "upstream connect failed");
                    (ProxyError::UpstreamConnect { region: region.to_string() }, replayable)
                }
                Ok(Err(PoolError::Failed(e))) => {
                    tracing::debug!(endpoint = %endpoint.uri, error = %e, "upstream request failed");
                    (ProxyError::UpstreamFailed { region: region.to_string() }, replayable && idempotent)
                }
                Err(_) if Instant::now() >= s.deadline => {
                    health.record(&endpoint.uri, true, s.eject_after, s.eject_for);
                    return Err(ProxyError::RequestTimeout);
                }
                Err(_) => (ProxyError::UpstreamTimeout { region: region.to_string() }, replayable && idempotent),
            };
            health.record(&endpoint.uri, true, s.eject_after, s.eject_for);
            let connect_failure = matches!(err, ProxyError::UpstreamConnect { .. });
            last_err = err;
            if !retry_ok {
                break;
            }
            // Skipping a refusing endpoint is free while endpoints remain;
            // anything else spends a retry, which the budget must allow.
            let free = connect_failure && (i as usize) + 1 < usable;
            if !free {
                if retries_used >= s.retries || !self.budget.withdraw(s.budget_min_per_second) {
                    break;
                }
                retries_used += 1;
                self.retries.fetch_add(1, Ordering::Relaxed);
            }
        }
        Err(last_err)
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
pub fn is_switching(resp: &Response<Incoming>) -> bool {
    resp.status() == StatusCode::SWITCHING_PROTOCOLS
}
