//! The proxy: one request through match → extract → decode → place →
//! dispatch → forward, with errors turned into responses in one place
//! ([`error`]).
//!
//! * [`server`]: accept loop, HTTP/1.1 and h2c on one port, graceful shutdown.
//! * [`locate`]: match → extract → decode → place, pure (no I/O).
//! * [`extract`]: where the route's id is (path parameter, header, query).
//! * [`headers`]: hop-by-hop removal, `X-Forwarded-*`, `Via`, request ids.
//! * [`mint`]: ids minted for create routes.
//! * [`forward`]: endpoint choice, timeouts, safe retries, upgrades.
//! * [`pool`]: keep-alive upstream connections per endpoint.
//! * [`error`]: every proxy-made failure → problem+json + `Proxy-Status`.

pub mod error;
pub mod extract;
pub mod forward;
pub mod headers;
pub mod locate;
pub mod mint;
pub mod path;
pub mod server;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::{Either, Empty, Full};
use hyper::body::{Body, Incoming};

use crate::ids::{Format, SystemClock, Uuid7Minter};
use crate::mesh;
use crate::metrics::{self, Metrics, RequestRecord};
use crate::routing::shared::SharedTable;
use crate::routing::{RegionId, Table};
use crate::upstream::{
    AttemptSettings, ClientBody, ClientSettings, Failure, Health, PoolBody, UpstreamBody, Upstreams,
};

use error::ProxyError;
pub use server::ConnInfo;

/// Response body: an upstream's streamed body or a proxy-made one.
pub type ProxyBody = Either<PoolBody, Full<Bytes>>;

/// Everything a request needs, shared by all connections.
#[derive(Debug)]
pub struct Proxy {
    shared: Arc<SharedTable>,
    upstreams: Upstreams,
    request_ids: Uuid7Minter<SystemClock>,
    minters: mint::Minters,
    via: headers::Via,
    name: String,
    /// `by=` node name in `Forwarded` (RFC 7239 obfuscated form).
    node: String,
    /// Requests handled so far.
    handled: std::sync::atomic::AtomicU64,
    /// Health of every endpoint (active checks and passive ejection).
    health: Arc<Health>,
    /// Request, id and upstream metrics.
    metrics: Arc<Metrics>,
    /// Set once draining starts: HTTP/1.1 responses then carry `Connection: close`.
    drain: server::Drain,
}

/// The endpoints a request is sent to.
#[derive(Debug)]
struct Target<'t> {
    region: &'t crate::routing::Region,
    endpoints: &'t [crate::routing::Upstream],
    via_peer: bool,
}

/// What the router decided for one request, for logs and debug headers.
#[derive(Debug, Default)]
pub struct Decision<'t> {
    /// Route name, when one matched (borrowed from the request's table snapshot).
    pub route: Option<&'t str>,
    /// Name of the region that served the request.
    pub region: Option<&'t str>,
    /// Why the owner was chosen (the table's rule).
    pub rule: Option<crate::routing::Rule>,
    /// When the owner's region was down: the owner, whose failover region served.
    pub failover_from: Option<&'t str>,
    /// Upstream attempts made.
    pub attempts: u32,
    /// Whether the request went to another region's shardgate.
    pub peer: bool,
    /// Format of the id the request was routed by (decoded or minted).
    pub format: Option<Format>,
    /// Whether that id was minted by a create route.
    pub minted: bool,
    /// The id in canonical form, kept only when `log.ids` is on.
    pub id: Option<String>,
    /// When the first upstream attempt started.
    pub upstream_started: Option<Instant>,
}

impl Decision<'_> {
    /// The placement rule as text with the table's names (`country 7 (KZ)`,
    /// `override KZ/WalletAccount; failover from kz`), built only when a log
    /// line or debug header needs it.
    pub fn rule_text(&self, table: &Table) -> Option<String> {
        self.rule.map(|rule| match self.failover_from {
            Some(from) => format!("{}; failover from {from}", table.explain(rule)),
            None => table.explain(rule).to_string(),
        })
    }
}

impl Proxy {
    /// A proxy serving the tables published in `shared`. `name` identifies
    /// this instance in `Via` and `Proxy-Status`.
    pub fn new(shared: Arc<SharedTable>, client: ClientSettings, name: &str) -> Proxy {
        let via = headers::Via::new(name);
        let settings = shared.snapshot();
        let settings = settings.table.settings();
        let minters = mint::Minters::new(settings.locality_node, settings.locality_mode);
        Proxy {
            shared,
            upstreams: Upstreams::new(client),
            request_ids: Uuid7Minter::new(SystemClock),
            minters,
            via,
            name: name.to_string(),
            node: crate::mesh::node_name(name),
            handled: std::sync::atomic::AtomicU64::new(0),
            health: Arc::new(Health::default()),
            metrics: Arc::new(Metrics::new()),
            drain: server::Drain::new(),
        }
    }

    /// Records into `metrics` instead of a private registry.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Proxy {
        self.metrics = metrics;
        self
    }

    /// Follows `drain` (responses carry `Connection: close` once it starts).
    pub fn with_drain(mut self, drain: server::Drain) -> Proxy {
        self.drain = drain;
        self
    }

    /// The metrics this proxy records into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The drain this proxy follows.
    pub fn drain(&self) -> &server::Drain {
        &self.drain
    }

    /// The connector of the upstream client (`http://` and `https://`).
    pub fn connector(&self) -> &crate::upstream::Connector {
        self.upstreams.connector()
    }

    /// Upstream retries sent and retries refused by the budget, so far.
    pub fn retry_counts(&self) -> (u64, u64) {
        (self.upstreams.retries(), self.upstreams.budget_exhausted())
    }

    /// This instance's name (in `Via` and `Proxy-Status`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The shared table this proxy reads.
    pub fn shared(&self) -> &Arc<SharedTable> {
        &self.shared
    }

    /// The answer to a peer's health check on [`crate::mesh::READY_PATH`].
    /// `503` while draining, so peers stop sending before this instance goes.
    fn mesh_ready(&self) -> Response<ProxyBody> {
        let (status, body) = if self.drain().is_draining() {
            (http::StatusCode::SERVICE_UNAVAILABLE, &b"draining\n"[..])
        } else {
            (http::StatusCode::OK, &b"ready\n"[..])
        };
        let mut resp = Response::new(Either::Right(Full::new(Bytes::from_static(body))));
        *resp.status_mut() = status;
        resp.headers_mut().insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        resp
    }

    /// Answers the batch mint endpoint (never forwarded).
    fn mint_batch(&self, table: &Table, uri: &http::Uri) -> Response<ProxyBody> {
        match mint::batch(uri.query(), table, &self.minters) {
            Ok(body) => {
                let mut resp = Response::new(Either::Right(Full::new(Bytes::from(body))));
                let h = resp.headers_mut();
                h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                h.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                resp
            }
            Err(err) => error::problem_response(&err, uri.path(), "-", &self.name).map(Either::Right),
        }
    }

    /// Health of the endpoints this proxy sends to.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// Requests handled since start.
    pub fn handled(&self) -> u64 {
        self.handled.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Handles one request end to end. Never fails: errors become responses.
    /// Records its metrics and writes its access-log line. `conn` describes
    /// the connection (a bare `SocketAddr` is a plain-HTTP one); on one whose
    /// mesh headers are not trusted they are removed before routing.
    pub async fn handle(&self, mut req: Request<Incoming>, conn: impl Into<ConnInfo>) -> Response<ProxyBody> {
        if req.uri().path() == crate::mesh::READY_PATH {
            return self.mesh_ready();
        }
        if req.method() == http::Method::POST {
            let snapshot = self.shared.snapshot();
            if snapshot.table.settings().mint_batch.path.as_deref() == Some(req.uri().path()) {
                return self.mint_batch(&snapshot.table, req.uri());
            }
        }
        let conn = conn.into();
        let snapshot = self.shared.snapshot();
        let settings = snapshot.table.settings();
        let from_peer = conn.is_mesh_peer(&settings.trusted_peers);
        if !from_peer {
            let trusted_hop = settings.server.trusted_hops.iter().any(|c| c.contains(conn.peer.ip()));
            if mesh::strip_from_request(req.headers_mut(), trusted_hop) {
                tracing::debug!(peer = %conn.peer, "mesh headers from a client that is not an authenticated peer removed");
            }
        }
        let started = Instant::now();
        self.handled.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let request_id = match req.headers().get(headers::X_REQUEST_ID) {
            Some(v) if headers::acceptable_request_id(v) => v.clone(),
            _ => {
                // Written on the stack, copied once into the header value.
                let id = self.request_ids.mint(&mut rand::rng());
                let v = HeaderValue::from_bytes(&id.to_ascii()).unwrap_or(HeaderValue::from_static("-"));
                req.headers_mut().insert(headers::X_REQUEST_ID, v.clone());
                v
            }
        };
        // Cheap clones (shared bytes), kept for the log, metrics and problem `instance`.
        let uri = req.uri().clone();
        let method = req.method().clone();
        let version = req.version();
        let table = &snapshot.table;
        let mut decision = Decision::default();
        let result = self.route_and_forward(table, req, conn, from_peer, &mut decision).await;
        let upstream = decision.upstream_started.map(|t| t.elapsed());
        let (mut resp, reason, outcome, upstream_ok) = match result {
            Ok(resp) => {
                let outcome = if decision.peer {
                    "forwarded_to_peer"
                } else if decision.minted {
                    "minted"
                } else {
                    "proxied"
                };
                (resp.map(Either::Left), None, outcome, true)
            }
            Err(err) => {
                let outcome = match &err {
                    ProxyError::BadId { error, .. } => {
                        self.metrics.id_decode_failed(error.format.name(), error.reason.code());
                        "bad_id"
                    }
                    other => metrics::outcome_for_reason(other.reason()),
                };
                tracing::debug!(error = %err, reason = err.reason(), "proxy error");
                let id = request_id.to_str().unwrap_or("-");
                let resp = error::problem_response(&err, uri.path(), id, &self.name).map(Either::Right);
                (resp, Some(err.reason()), outcome, false)
            }
        };
        let h = resp.headers_mut();
        h.insert(headers::X_REQUEST_ID, request_id.clone());
        if self.drain.is_draining() && version <= http::Version::HTTP_11 {
            h.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        if settings.server.debug_headers {
            let rule = decision.rule_text(table);
            for (name, value) in [
                ("x-shardgate-route", decision.route),
                ("x-shardgate-region", decision.region),
                ("x-shardgate-rule", rule.as_deref()),
            ] {
                if let Some(v) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
                    h.insert(name, v);
                }
            }
        }
        let status = resp.status().as_u16();
        let duration = started.elapsed();

        let labels = self.metrics.labels(&snapshot);
        self.metrics.observe_request(
            &labels,
            &RequestRecord {
                method: &method,
                route: decision.route,
                region: decision.region,
                status,
                outcome,
                id: decision.format.map(|f| (f.name(), decision.minted)),
                duration,
                upstream: upstream.filter(|_| upstream_ok),
            },
        );
        if settings.log.access {
            tracing::info!(
                target: "shardgate::access",
                request_id = request_id.to_str().unwrap_or("-"),
                method = method.as_str(),
                route = decision.route,
                status,
                duration_s = duration.as_secs_f64(),
                upstream_duration_s = upstream.map(|d| d.as_secs_f64()),
                region = decision.region,
                rule = decision.rule_text(table).as_deref(),
                attempts = decision.attempts,
                peer_forwarded = decision.peer,
                outcome,
                reason,
                id_format = decision.format.map(Format::name),
                id = decision.id.as_deref(),
                "request"
            );
        }
        resp
    }

    /// Where a request goes whose failover `chain` (the owner first) ends in
    /// the region to try: that region's backends, or its shardgate when it is
    /// another region (or has no backends of its own). Endpoints in `tried`
    /// (failed earlier for this request) do not count. When none of those
    /// endpoints is healthy, the region's failover region is appended to the
    /// chain and tried in turn (when `can_fail_over`: reads always, writes
    /// only where the route allows), never a region already in the chain;
    /// else 503.
    fn dispatch<'t>(
        &self,
        table: &'t Table,
        chain: &mut Vec<RegionId>,
        can_fail_over: bool,
        tried: &[&http::Uri],
    ) -> Result<Target<'t>, ProxyError> {
        let owner = chain.first().copied().unwrap_or(RegionId(0));
        let usable = |u: &crate::routing::Upstream| !tried.contains(&&u.uri) && self.health.usable(&u.uri);
        while let Some(&id) = chain.last() {
            let region = table.region(id);
            let remote = table.local_region().is_some_and(|local| local != id);
            if remote || region.upstreams.is_empty() {
                if let Some(peer) = region.peer.as_ref().filter(|p| usable(p)) {
                    let endpoints = std::slice::from_ref(peer);
                    return Ok(Target { region, endpoints, via_peer: true });
                }
            }
            if region.upstreams.iter().any(usable) {
                return Ok(Target { region, endpoints: &region.upstreams, via_peer: false });
            }
            match region.failover {
                Some(next) if can_fail_over && !chain.contains(&next) => chain.push(next),
                _ => break,
            }
        }
        Err(ProxyError::RegionUnavailable { region: table.region(owner).name.clone() })
    }

    async fn route_and_forward<'t>(
        &self,
        table: &'t Table,
        req: Request<Incoming>,
        conn: ConnInfo,
        from_peer: bool,
        decision: &mut Decision<'t>,
    ) -> Result<Response<PoolBody>, ProxyError> {
        let settings = table.settings();
        let started = Instant::now();
        let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
        if uri_len > settings.server.max_uri_bytes {
            return Err(ProxyError::UriTooLong { limit: settings.server.max_uri_bytes });
        }
        if req.headers().len() > settings.server.max_headers {
            return Err(ProxyError::HeadersTooLarge { limit: settings.server.max_headers });
        }
        let (mut parts, body) = req.into_parts();
        headers::check_framing(&parts)?;
        // What is routed is what is forwarded: a path with dot segments is
        // normalised before both.
        if let Some(normal) = path::without_dot_segments(&parts.uri) {
            parts.uri = normal;
        }
        let hops = mesh::inspect(&parts.headers, &self.node);
        // A request failed over to this instance's region comes back here
        // legitimately (this instance may have sent it to the owner, whose
        // backends are down); anything else that names this instance is a loop.
        let relayed_chain = mesh::take_failover(&mut parts.headers);
        let local = table.local_region();
        let failover_to_local =
            relayed_chain.last().and_then(|name| table.region_by_name(name)).filter(|r| Some(*r) == local);
        if hops.seen_self && failover_to_local.is_none() {
            return Err(ProxyError::Loop {
                detail: format!("this instance ({}) already forwarded the request", self.name),
            });
        }
        let relayed = from_peer && hops.count > 0;
        let located = locate::locate(table, &parts, &self.minters, relayed, decision)?;
        let route = located.route;
        // A minted id goes upstream in the rule's header, and back to the
        // client there and in `Location` once the owner accepted the create.
        let minted = route
            .mint
            .as_ref()
            .filter(|_| decision.minted)
            .map(|rule| (rule.header.clone(), located.id.to_string(), rule.location.clone()));
        let owner = located.placement.region;
        // A peer that failed a region over to this one asks it to serve the
        // request from here (or to follow this region's failover on): placing
        // it again would send it back, since its owner's region is down and
        // this instance's table may not know it yet.
        let mut chain: Vec<RegionId> = match failover_to_local {
            Some(_) => relayed_chain.iter().filter_map(|name| table.region_by_name(name)).collect(),
            None => vec![owner],
        };
        let idempotent = crate::upstream::retry::is_idempotent(&parts.method);
        let can_fail_over = idempotent || route.allow_failover_writes;
        if let Some((header, id, _)) = &minted {
            if let Ok(v) = HeaderValue::from_str(id) {
                parts.headers.insert(header.clone(), v);
            }
        }

        // Request headers for the upstream leg (every attempt starts from these).
        let upgrade = parts.version == http::Version::HTTP_11
            && headers::keep_allowed_upgrades(&mut parts.headers, &route.upgrades);
        let client_upgrade = if upgrade { parts.extensions.remove::<hyper::upgrade::OnUpgrade>() } else { None };
        // The authority the client asked for: the absolute URI's (or HTTP/2's
        // `:authority`), else `Host`.
        let host = parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
            .or_else(|| parts.headers.get(http::header::HOST).cloned());
        let chunked = !body.is_end_stream() && body.size_hint().exact().is_none();
        headers::remove_hop_by_hop(&mut parts.headers, upgrade);
        parts.headers.remove(http::header::HOST);
        let trusted = settings.server.trusted_hops.iter().any(|c| c.contains(conn.peer.ip()));
        let keep_proto = trusted && parts.headers.contains_key(&headers::X_FORWARDED_PROTO);
        headers::set_forwarded(&mut parts.headers, conn.peer.ip(), trusted, host.as_ref());
        if conn.tls && !keep_proto {
            parts.headers.insert(headers::X_FORWARDED_PROTO, HeaderValue::from_static("https"));
        }
        headers::append_via(&mut parts.headers, self.via.for_version(parts.version));
        // A body of unknown length (chunked from the client, or HTTP/2 without
        // content-length) goes upstream chunked, whatever the method: without
        // the header the client leg would send a GET's body as no body.
        if chunked {
            parts.headers.insert(http::header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        }
        let path = parts.uri.path_and_query().cloned().unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));

        let up = &settings.upstream;
        let s = AttemptSettings {
            attempt_timeout: up.attempt_timeout.0,
            request_timeout: up.request_timeout.0,
            started,
            retries: up.retries,
            budget_ratio: up.retry_budget.ratio,
            budget_min_per_second: up.retry_budget.min_per_second,
            eject_after: up.eject_after,
            eject_for: up.eject_for.0,
            limits: crate::upstream::Limits { max_connections: up.max_connections, max_pending: up.max_pending },
        };
        // A body that is empty can be sent again; a client's streamed body
        // only while nothing of it has been sent (a refused connection gives it back).
        let replayable = body.is_end_stream();
        let mut body: Option<UpstreamBody> =
            Some(if replayable { Either::Right(Empty::new()) } else { Either::Left(ClientBody::new(body)) });
        self.upstreams.deposit(&s);
        decision.upstream_started = Some(Instant::now());
        let mut tried: Vec<&http::Uri> = Vec::new();
        let mut retries_used = 0;
        let mut last: Option<ProxyError> = None;
        let mut resp = loop {
            // Saturation is overload, not failure: it never moves a request
            // to another region.
            let fail_over = can_fail_over && !matches!(last, Some(ProxyError::UpstreamSaturated { .. }));
            let target = match self.dispatch(table, &mut chain, fail_over, &tried) {
                Ok(t) => t,
                Err(e) => return Err(last.unwrap_or(e)),
            };
            decision.region = Some(target.region.name.as_str());
            decision.failover_from =
                chain.first().map(|&r| table.region(r).name.as_str()).filter(|f| *f != target.region.name);
            let Some((endpoint, admit)) = self.upstreams.pick(target.endpoints, &tried, &self.health) else {
                // Health changed since dispatch looked (another request took a
                // half-open endpoint's trial): count the region as tried.
                tried.extend(target.endpoints.iter().map(|e| &e.uri));
                continue;
            };
            let mut headers = parts.headers.clone();
            decision.peer = target.via_peer;
            if target.via_peer {
                let next = hops.count.saturating_add(1);
                if next > settings.max_hops {
                    return Err(ProxyError::Loop {
                        detail: format!(
                            "forwarding to region {} would exceed the hop limit of {}",
                            target.region.name, settings.max_hops
                        ),
                    });
                }
                mesh::mark_forwarded(&mut headers, &self.node, next);
                if chain.len() > 1 {
                    mesh::mark_failover(&mut headers, chain.iter().map(|&r| table.region(r).name.as_str()));
                }
            }
            let Some(b) = body.take() else { return Err(last.unwrap_or(ProxyError::RequestTimeout)) };
            decision.attempts += 1;
            let region = target.region.name.as_str();
            let outcome = self
                .upstreams
                .attempt(endpoint, admit, &parts.method, &path, headers, b, &s, !target.via_peer, &self.health)
                .await;
            struct Failure2 {
                error: ProxyError,
                unsent: Option<UpstreamBody>,
            }
            let failure = match outcome {
                Ok(resp) => break resp,
                Err(Failure { error, unsent }) => Failure2 { error: ProxyError::from_attempt(error, region), unsent },
            };
            tried.push(&endpoint.uri);
            match failure.unsent {
                // Nothing was sent: the next endpoint takes it as it is.
                Some(b) => body = Some(b),
                // Sent, and failed: again only if it is safe and the budget allows.
                None => {
                    let safe = replayable && idempotent && !matches!(failure.error, ProxyError::ClientBody { .. });
                    if !safe || retries_used >= s.retries || !self.upstreams.withdraw(&s) {
                        return Err(failure.error);
                    }
                    retries_used += 1;
                    body = Some(Either::Right(Empty::new()));
                }
            }
            last = Some(failure.error);
        };

        if forward::is_switching(&resp) {
            if let (Some(client), Some(up)) =
                (client_upgrade, resp.extensions_mut().remove::<hyper::upgrade::OnUpgrade>())
            {
                forward::spawn_tunnel(client, up);
            }
            headers::remove_hop_by_hop(resp.headers_mut(), true);
        } else {
            headers::remove_hop_by_hop(resp.headers_mut(), false);
        }
        mesh::strip_from_response(resp.headers_mut());
        // The id is announced only when the owner created the entity (2xx):
        // after a failure the client must not hold an id nothing stands behind.
        if let Some((header, id, location)) = minted.filter(|_| resp.status().is_success()) {
            if let Ok(v) = HeaderValue::from_str(&id) {
                if let Some(loc) = location.and_then(|l| HeaderValue::from_str(&l.replace("{id}", &id)).ok()) {
                    resp.headers_mut().insert(http::header::LOCATION, loc);
                }
                resp.headers_mut().insert(header, v);
            }
        }
        headers::append_via(resp.headers_mut(), &self.via.http11);
        Ok(resp)
    }
}
