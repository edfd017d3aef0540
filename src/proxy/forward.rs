//! Forward: the upstream leg of one request, as attempts over the targets
//! [`dispatch`](super::dispatch) gives. A small body is read whole first,
//! before any connection is taken ([`crate::upstream::body::take`]). An
//! attempt that sent nothing (a refused connection, a full endpoint) moves
//! on with the body it gave back; one that failed after sending is tried
//! again only when that is safe (idempotent, no body) and the retry budget
//! allows; either way never at an endpoint this request already tried, so a
//! region with none left hands over to its failover region. Saturation
//! never moves a request to another region.

use std::time::{Duration, Instant};

use http::request::Parts;
use http::uri::PathAndQuery;
use http::{header, HeaderMap, Response};

use super::ctx::Journal;
use super::dispatch::{dispatch, Chain, Target};
use super::error::ProxyError;
use super::rewrite;
use crate::config::settings::UpstreamPolicy;
use crate::grpc::status as grpc;
use crate::http1::write::Added;
use crate::mesh;
use crate::routing::{RegionId, Rewrite, Table};
use crate::telemetry::traces::{self, TraceSpan, Traces};
use crate::upstream::balance::Waiting;
use crate::upstream::body::{self, BodyFault, Pace};
use crate::upstream::outgoing::Outgoing;
use crate::upstream::retry::is_idempotent;
use crate::upstream::{
    Attempt, AttemptError, AttemptSettings, Health, RequestBody, ResponseBody, UpstreamBody, Upstreams, Use,
};

/// What the upstream leg needs of the proxy: the connections, the
/// endpoints' health, the traces, and the name it gives peers.
#[derive(Clone, Copy, Debug)]
pub(super) struct Reach<'p> {
    /// The upstream connections and the retry budget.
    pub(super) upstreams: &'p Upstreams,
    /// Every endpoint's health.
    pub(super) health: &'p Health,
    /// This instance's traces, when they are on.
    pub(super) traces: Option<&'p Traces>,
    /// This instance's node name (`Forwarded: by=` to peers).
    pub(super) node: &'p str,
    /// Room for the answers fan-outs hold.
    pub(super) room: &'p super::room::Room,
}

/// What the attempts of one request share.
#[derive(Debug)]
pub(super) struct Leg<'t> {
    /// The failover chain so far, the owner first.
    pub(super) chain: Chain,
    /// Whether the request may go to a failover region.
    pub(super) can_fail_over: bool,
    /// Peer hops the request has taken before reaching this instance.
    pub(super) hops: u32,
    /// A leg of a fan-out or search: a peer is asked to serve it from its
    /// own region's backends, as it is ([`mesh::mark_leg`]).
    pub(super) serve_only: bool,
    /// The table in force.
    pub(super) table: &'t Table,
    /// When the request (or the fan-out's or search's leg) started: the
    /// client's body is paced from here.
    pub(super) started: Instant,
    /// The route's rewrite of the target the backends are asked for (a
    /// peer is sent the client's).
    pub(super) rewrite: Option<&'t Rewrite>,
    /// Timeouts, retries and the retry budget: the route's own, else `upstream`'s.
    pub(super) policy: &'t UpstreamPolicy,
    /// The epoch of the request's placement unit, when it is being re-homed:
    /// sent to peers, which answer 421 when theirs is newer.
    pub(super) epoch: Option<u64>,
    /// The unit of a write whose move this instance gave up: it may go to
    /// a peer, whose table fences it, but to no backend of this instance's
    /// own ([`ProxyError::HoldExpired`]).
    pub(super) given_up: Option<&'t str>,
}

impl<'t> Leg<'t> {
    /// A leg of a fan-out or search, or one a peer asked for: `region`
    /// alone, never failed over, marked for a peer to serve as it is.
    pub(super) fn alone(table: &'t Table, region: RegionId, hops: u32) -> Leg<'t> {
        Leg {
            chain: Chain::from_slice(&[region]),
            can_fail_over: false,
            hops,
            table,
            serve_only: true,
            started: Instant::now(),
            rewrite: None,
            policy: table.upstream_of(region),
            epoch: None,
            given_up: None,
        }
    }
}

/// The attempt settings of `leg`: its policy, and the client body's pace
/// from when it started.
fn settings<'t>(leg: &Leg<'t>) -> AttemptSettings<'t> {
    let server = &leg.table.settings().server;
    let pace = Pace { since: leg.started, grace: server.body_timeout, min_rate: server.body_min_rate };
    AttemptSettings { policy: leg.policy, started: leg.started, pace, client_deadline: None }
}

/// The attempt settings of `leg`, and of a gRPC call (`call`) under its
/// deadline (`timeout`, its `grpc-timeout`; `bounded`, its policy within it).
fn call_settings<'b>(
    leg: &Leg<'b>,
    call: bool,
    timeout: Option<Duration>,
    bounded: Option<&'b UpstreamPolicy>,
) -> AttemptSettings<'b> {
    let mut s = AttemptSettings { policy: bounded.unwrap_or(leg.policy), ..settings(leg) };
    if call {
        // A streaming call's client may send its messages as slowly as its
        // conversation goes: no pace, its deadline bounds it.
        s.pace.min_rate = 0;
        s.client_deadline = timeout.map(|t| leg.started + t);
    }
    s
}

/// A gRPC call's policy under its deadline (`t`, its `grpc-timeout`), which
/// bounds its attempts within the route's timeouts; `None` when it shortens
/// neither.
fn deadline(t: Duration, policy: &UpstreamPolicy) -> Option<UpstreamPolicy> {
    if t >= policy.attempt_timeout.max(policy.request_timeout) {
        return None;
    }
    Some(UpstreamPolicy {
        attempt_timeout: policy.attempt_timeout.min(t),
        request_timeout: policy.request_timeout.min(t),
        ..policy.clone()
    })
}

/// Sends the request (`parts`, headers prepared for the upstream leg, the
/// proxy's `added` fields, and `body`) until an attempt answers or no safe
/// attempt is left.
pub(super) async fn forward<'t>(
    reach: Reach<'_>,
    mut leg: Leg<'t>,
    parts: &Parts,
    added: &Added,
    body: RequestBody,
    journal: &mut Journal<'t>,
) -> Result<Response<ResponseBody>, ProxyError> {
    let table = leg.table;
    let call = grpc::is_call(parts);
    let timeout = call.then(|| grpc::timeout(&parts.headers)).flatten();
    let bounded = timeout.and_then(|t| deadline(t, leg.policy));
    let s = call_settings(&leg, call, timeout, bounded.as_ref());
    let path = parts.uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
    let rewritten = leg.rewrite.map(|rule| rewrite::target(table, rule, &parts.method, &parts.uri)).transpose()?;
    let (body, use_) = prepare(parts, body, table, s.pace, call).await?;
    let s = AttemptSettings { started: Instant::now(), ..s }; // The upload was the client's time.
    let (mut again, mut body) = (Again::new(parts, &body), Some(body));
    let mut deposited = false;
    journal.upstream_started = Some(Instant::now());
    let mut tried: Vec<&'t str> = Vec::new();
    let mut last = Last::default();
    let mut fence = Fence { used: false };
    loop {
        let fail_over = leg.can_fail_over && !last.saturated;
        let target = match dispatch(table, reach.health, &mut leg.chain, fail_over, &tried) {
            Ok(t) => t,
            Err(e) => return Err(last.error.unwrap_or(e)),
        };
        note_target(&leg, &target, journal)?;
        if !std::mem::replace(&mut deposited, true) {
            reach.upstreams.deposit(target.id, &s);
        }
        let Some((at, endpoint, admit)) = reach.upstreams.pick(target.candidates(), &tried, reach.health) else {
            // Health changed since dispatch looked (another request took a
            // half-open endpoint's trial): count the region as tried.
            tried.extend(target.endpoints.iter().map(|e| &*e.pool_key));
            continue;
        };
        let to_peer = peer_headers(reach.node, &leg, &target, &parts.headers)?;
        let headers = to_peer.as_ref().unwrap_or(&parts.headers);
        let Some(b) = body.take() else { return Err(last.error.unwrap_or(ProxyError::RequestTimeout)) };
        journal.attempts += 1;
        let traced = reach.traces.zip(journal.trace.as_deref()).map(|(traces, parent)| {
            let why = last.error.as_ref().map(ProxyError::reason);
            trace_attempt(traces, parent, &target.attempt(&parts.method, &endpoint.uri, journal.attempts, why), headers)
        });
        let headers = traced.as_deref().map_or(headers, |(_, h)| h);
        let asked = if target.via_peer { &path } else { rewritten.as_ref().unwrap_or(&path) };
        let out = Outgoing { method: &parts.method, target: asked, host: &endpoint.host, headers, added };
        let (limits, count_5xx, retry) = (target.limits, !target.via_peer, journal.attempts > 1);
        let attempt = Attempt { endpoint, admit, out, use_, limits, count_5xx, retry };
        let waiting = Waiting::on(target.loads.get(at).map(|l| &**l));
        let replay = fence.replay(&b, target.via_peer);
        let answered = reach.upstreams.attempt(attempt, b, &s, reach.health).await;
        drop(waiting);
        let failure = match answered {
            Ok(resp) => {
                span_ends(traced.as_deref(), Ok(resp.status().as_u16()));
                // A peer with a newer epoch for the unit names its owner: once, there.
                let Some(again) = fence.redirect(&resp, replay, &mut leg) else { return Ok(resp) };
                (last.saturated, body) = (false, Some(again));
                tried.push(&endpoint.pool_key);
                continue;
            }
            Err(f) => f,
        };
        tried.push(&endpoint.pool_key);
        let error = ProxyError::from_attempt(failure.error, &target.region.name);
        span_ends(traced.as_deref(), Err(error.reason()));
        body = Some(match failure.unsent {
            // Nothing was sent: the next endpoint takes it as it is.
            Some(b) => b,
            // Sent, and failed: again only if it is safe and the budget allows.
            None if again.allowed(failure.error, (target.id, &s), reach.upstreams) => UpstreamBody::Empty,
            None => return Err(error),
        });
        last.failed(error);
    }
}

/// The last failure of a request's attempts, and whether one of them found
/// its endpoint full: the request then stays in its region, whatever the
/// endpoints tried after it said (a peer's redirect to the owner aside).
#[derive(Default)]
struct Last {
    error: Option<ProxyError>,
    saturated: bool,
}

impl Last {
    fn failed(&mut self, error: ProxyError) {
        self.saturated |= matches!(error, ProxyError::UpstreamSaturated { .. });
        self.error = Some(error);
    }
}

/// The one retry a `421` from a peer with a newer epoch earns: at the owner
/// it names, with the body again (one read whole, or none; a body still
/// streaming from the client cannot be sent twice, and its 421 goes back to
/// the client, which may send it again).
#[derive(Debug)]
struct Fence {
    used: bool,
}

impl Fence {
    /// A copy of `body` to send again, for a request to a peer.
    fn replay(&self, body: &UpstreamBody, via_peer: bool) -> Option<UpstreamBody> {
        if self.used || !via_peer {
            return None;
        }
        body.again()
    }

    /// When `resp` is a peer's `421` naming an owner this table knows:
    /// `leg` turned to it (its backends when this instance serves it, else
    /// its peer), with its epoch, and the body to send there; a move given
    /// up here no longer keeps it from this instance's backends.
    fn redirect(
        &mut self,
        resp: &Response<ResponseBody>,
        replay: Option<UpstreamBody>,
        leg: &mut Leg<'_>,
    ) -> Option<UpstreamBody> {
        let table = leg.table;
        if resp.status() != http::StatusCode::MISDIRECTED_REQUEST {
            return None;
        }
        let again = replay?;
        let field = |name: &http::HeaderName| -> Option<String> {
            let raw =
                resp.headers().get(name).map(|v| v.as_bytes()).or_else(|| resp.body().fields().get(name.as_str()))?;
            Some(String::from_utf8_lossy(raw).trim().to_string())
        };
        let owner = table.region_by_name(&field(&mesh::OWNER)?)?;
        let epoch = crate::ids::parse_canonical_u64(&field(&mesh::EPOCH)?)?;
        // Followed only for a unit this table is moving too, to a newer epoch
        // of it, at another region than the one that answered: a peer still on
        // an older move's table cannot send a request back where it was.
        let ours = leg.epoch?;
        if epoch <= ours || leg.chain.last() == Some(&owner) {
            return None;
        }
        self.used = true;
        leg.chain = crate::proxy::dispatch::Chain::from_slice(&[owner]);
        leg.epoch = Some(epoch);
        // The newer epoch's owner takes the unit's writes, wherever it is.
        leg.given_up = None;
        Some(again)
    }
}

/// Whether a request that failed after it was sent may be sent again.
#[derive(Debug)]
struct Again {
    /// No body can be sent again after a failure; a client's body only
    /// while nothing of it has been sent (a refused connection gives it back).
    replayable: bool,
    idempotent: bool,
    used: u32,
}

impl Again {
    fn new(parts: &Parts, body: &UpstreamBody) -> Again {
        Again { replayable: matches!(body, UpstreamBody::Empty), idempotent: is_idempotent(&parts.method), used: 0 }
    }

    /// When it is safe (idempotent, no body, a failure worth retrying) and
    /// the request's retries and the budget allow: one retry taken.
    fn allowed(
        &mut self,
        error: AttemptError,
        (region, s): (RegionId, &AttemptSettings<'_>),
        upstreams: &Upstreams,
    ) -> bool {
        let safe = self.replayable && self.idempotent && error.may_retry();
        if !safe || self.used >= s.policy.retries || !upstreams.withdraw(region, s) {
            return false;
        }
        self.used += 1;
        true
    }
}

/// The body as it goes upstream, and what its connection is for. A small
/// body is read whole here, before any connection is taken: a client that
/// sends slowly then holds none of the endpoint's. A gRPC call's (`call`)
/// is taken as far as it is at hand, and the rest passed on as it comes: a
/// streaming call's messages may wait on the answers.
async fn prepare(
    parts: &Parts,
    body: RequestBody,
    table: &Table,
    pace: Pace,
    call: bool,
) -> Result<(UpstreamBody, Use), ProxyError> {
    let limit = table.settings().server.request_buffer_bytes;
    let taken = if call { body::at_hand(body, limit) } else { body::take(body, limit, pace).await };
    let body = taken.map_err(|fault| match fault {
        BodyFault::Broken(detail) => ProxyError::ClientBody { detail },
        BodyFault::TooSlow => ProxyError::BodyTimeout,
    })?;
    let use_ = match &body {
        _ if parts.headers.contains_key(header::UPGRADE) => Use::Tunnel,
        UpstreamBody::Streamed(_) => Use::Upload,
        _ => Use::Plain,
    };
    Ok((body, use_))
}

/// The client span of `attempt`, and `headers` naming it the upstream's
/// parent. Boxed: held across the attempt's await, unboxed it would widen
/// every request's future (and its moves) by a span and a header map.
/// Ends an attempt's span, when it has one: answered with a status, or failed for a reason.
fn span_ends(traced: Option<&(TraceSpan, HeaderMap)>, end: Result<u16, &'static str>) {
    match (traced, end) {
        (Some((span, _)), Ok(status)) => traces::answered(span, status),
        (Some((span, _)), Err(reason)) => traces::failed(span, reason),
        (None, _) => {}
    }
}

fn trace_attempt(
    traces: &Traces,
    parent: &TraceSpan,
    attempt: &traces::Attempt<'_>,
    headers: &HeaderMap,
) -> Box<(TraceSpan, HeaderMap)> {
    let span = traces.attempt(parent, attempt);
    let mut headers = headers.clone();
    traces::inject(&span, &mut headers);
    Box::new((span, headers))
}

/// Records where the request is going, for the log and the debug headers;
/// refuses a write of a move given up here that would go to this
/// instance's own backends (`leg.given_up`).
fn note_target<'t>(leg: &Leg<'t>, target: &Target<'t>, journal: &mut Journal<'t>) -> Result<(), ProxyError> {
    journal.region = Some(target.id);
    journal.peer = target.via_peer;
    let owner = leg.chain.first().map(|&r| leg.table.region(r).name.as_str());
    journal.failover_from = owner.filter(|o| *o != target.region.name);
    match leg.given_up {
        Some(unit) if !target.via_peer => Err(ProxyError::HoldExpired { unit: unit.to_string() }),
        _ => Ok(()),
    }
}

/// The request headers for an attempt at `target` when it is a peer:
/// `base` with this instance's `Forwarded: by=`, the hop count and the
/// failover chain (`None`: not a peer, `base` goes as it is, uncopied).
fn peer_headers(
    node: &str,
    leg: &Leg<'_>,
    target: &Target<'_>,
    base: &HeaderMap,
) -> Result<Option<HeaderMap>, ProxyError> {
    if !target.via_peer {
        return Ok(None);
    }
    let mut headers = base.clone();
    let max_hops = leg.table.settings().mesh.max_hops;
    let next = leg.hops.saturating_add(1);
    if next > max_hops {
        return Err(ProxyError::Loop {
            detail: format!("forwarding to region {} would exceed the hop limit of {max_hops}", target.region.name),
        });
    }
    mesh::mark_forwarded(&mut headers, node, next);
    if leg.serve_only {
        mesh::mark_leg(&mut headers, &target.region.name);
    }
    if leg.chain.len() > 1 {
        mesh::mark_failover(&mut headers, leg.chain.iter().map(|&r| leg.table.region(r).name.as_str()));
    }
    if let Some(epoch) = leg.epoch {
        mesh::mark_epoch(&mut headers, epoch);
    }
    Ok(Some(headers))
}
