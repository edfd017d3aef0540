//! The proxy: one request in a straight line.
//!
//! ```text
//!  server ─► headers::admit ─► locate ─► dispatch ─► forward ─► headers::from_upstream ─► respond ─► server
//!  accept    limits, framing,  match,    local,      attempts,   hygiene, minted id      problem+json, writes it,
//!  (plain,   dot segments,     extract,  peer or     retries,    announced on 2xx        metrics, log  + request id,
//!   TLS)     mesh trust        decode,   failover    tunnel                                            + Via
//!                              place     chain
//! ```
//!
//! The listeners that hand it requests are [`crate::server`]'s.
//!
//! * `ctx`: the one value a request carries through the stages: the table
//!   snapshot, its connection, how it arrived, and the journal the stages
//!   write and `respond` reads.
//! * `endpoints`: what the listener answers itself (readiness, batch mint).
//! * [`headers`]: the heads on both legs: admission checks, hygiene, `X-Forwarded-*`, `Via`.
//! * [`path`]: dot segments removed before matching.
//! * [`locate`]: match → extract → decode (or mint) → place, a pure function.
//! * `message`: a gRPC call's first message, read when its route's id is a field of it.
//! * [`extract`]: where the route's id is (path parameter, header, query, message field).
//! * [`rewrite`]: the target the upstream is asked for, when the route rewrites it.
//! * [`mint`]: ids minted for create routes, and the batch mint endpoint.
//! * [`dispatch`]: which endpoints: local, peer, or along the failover chain.
//! * [`forward`]: the attempts of the upstream leg ([`crate::upstream`] sends them), the tunnel.
//! * `fanout`: list routes asked of several regions, answers merged ([`crate::merge`]).
//! * `search`: ids without a region, asked of the regions, remembered ([`crate::routing::Found`]).
//! * `legs`: one request to one region alone, for those two.
//! * `room`: the room all fan-outs' answers share (`server.fanout_buffer_bytes`).
//! * `respond`: every answer's end: problem+json, metrics, access log (the
//!   request id and `Via` are the server's to write, beside the map).
//! * [`error`]: the one table of failures the proxy answers itself.
//! * [`tunnel`]: the tunnel an upgrade opens.

mod ctx;
pub mod dispatch;
mod endpoints;
pub mod error;
pub mod extract;
mod fanout;
pub mod forward;
pub mod headers;
pub mod hold;
mod legs;
pub mod locate;
mod message;
pub mod mint;
pub mod path;
mod respond;
pub mod rewrite;
mod room;
mod search;
pub mod tunnel;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use http::request::Parts;
use http::{HeaderValue, Response};
use http_body_util::Either;

use crate::grpc::status::is_call;
use crate::http1::rules::RuleFields;
use crate::ids::{SystemClock, Uuid7Minter};
use crate::mesh;
use crate::metrics::Metrics;
use crate::routing::{Found, Loaded, RegionId, SharedTable};
use crate::server::{Answer, AnswerBody, ConnInfo, Drain, Handler};
use crate::telemetry::traces::{TraceSettings, Traces};
use crate::upstream::{ClientSettings, Health, RequestBody, Upstreams};

use ctx::{Arrival, Ctx, Journal, Sender};
use error::ProxyError;
use forward::{Leg, Reach};
pub use locate::Plan;

/// What the proxy shares with the admin listener, the health checker and
/// the signal handlers.
#[derive(Clone, Debug)]
pub struct Shared {
    /// The live routing table.
    pub table: Arc<SharedTable>,
    /// Request, id, upstream and listener metrics.
    pub metrics: Arc<Metrics>,
    /// Health of every endpoint (active checks and passive ejection).
    pub health: Arc<Health>,
    /// The going-away flag.
    pub drain: Drain,
    /// The upstream connections, and the retry counters.
    pub upstreams: Arc<Upstreams>,
    /// Where `placement: search` routes found their ids.
    pub found: Arc<Found>,
    /// This instance's traces, when they are on (`telemetry:` or `OTEL_*`).
    pub traces: Option<Arc<Traces>>,
    /// What DNS discovery of named endpoints did.
    pub dns: Arc<crate::upstream::dns::DnsStats>,
    /// The requests held for moving placement units.
    pub holds: Arc<hold::Holds>,
    /// Room for the answers fan-outs hold (`server.fanout_buffer_bytes`).
    pub(crate) room: Arc<room::Room>,
}

impl Shared {
    /// Fresh metrics, health and drain around `table`, with an upstream
    /// client of `client` settings.
    pub fn new(table: Arc<SharedTable>, client: ClientSettings) -> Shared {
        let snapshot = table.snapshot();
        let settings = snapshot.table.settings();
        let fixed = &settings.restart;
        let traces = start_traces(&fixed.telemetry, &fixed.instance);
        Shared {
            traces,
            found: Arc::new(Found::new(fixed.search_cache_capacity)),
            holds: Arc::default(),
            room: Arc::new(room::Room::new(fixed.fanout_buffer_bytes)),
            table,
            metrics: Arc::new(Metrics::new()),
            health: Arc::new(Health::default()),
            drain: Drain::new(),
            upstreams: Arc::new(Upstreams::new(client)),
            dns: Arc::default(),
        }
    }
}

/// The traces `telemetry` and the `OTEL_*` variables ask for; a failure
/// to start them is logged, and the proxy runs without.
fn start_traces(telemetry: &crate::config::settings::Telemetry, instance: &str) -> Option<Arc<Traces>> {
    let started = TraceSettings::resolve(telemetry, instance, |k| std::env::var(k).ok())
        .and_then(|s| s.map(Traces::start).transpose());
    match started {
        Ok(Some(traces)) => {
            let s = traces.settings();
            tracing::info!(endpoint = %s.endpoint, sample_ratio = s.sample_ratio, service = %s.service_name, "traces on");
            Some(Arc::new(traces))
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(error = %e, "traces off");
            None
        }
    }
}

/// How this instance names itself: in `Proxy-Status`, `Via` and `Forwarded: by=`.
#[derive(Debug)]
struct Identity {
    name: String,
    /// `by=` node name in `Forwarded` (RFC 7239 obfuscated form).
    node: String,
    via: headers::Via,
}

/// The proxy: routes every request it is handed.
#[derive(Debug)]
pub struct Proxy {
    shared: Shared,
    me: Identity,
    minters: mint::Minters,
    request_ids: Uuid7Minter<SystemClock>,
    handled: AtomicU64,
}

/// What the hold stage hands on: the table to route with (the one that
/// released the request, when it was held), how the request passed, and
/// its body.
struct Through {
    loaded: Arc<Loaded>,
    passed: hold::Passed,
    body: RequestBody,
}

impl Proxy {
    /// A proxy on `shared`, named `name` (in `Via`, `Proxy-Status`,
    /// `Forwarded: by=`). The Locality minting node is the table's at this
    /// moment (restart-only).
    pub fn new(shared: Shared, name: &str) -> Proxy {
        let snapshot = shared.table.snapshot();
        let settings = snapshot.table.settings();
        let locality = settings.restart.locality;
        let minters = mint::Minters::new(locality.node, locality.mode);
        let me = Identity { name: name.to_string(), node: mesh::node_name(name), via: headers::Via::new(name) };
        Proxy { shared, me, minters, request_ids: Uuid7Minter::new(SystemClock), handled: AtomicU64::new(0) }
    }

    /// What this proxy shares with the rest of the instance.
    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// This instance's name.
    pub fn name(&self) -> &str {
        &self.me.name
    }

    /// Requests handled since start.
    pub fn handled(&self) -> u64 {
        self.handled.load(Ordering::Relaxed)
    }

    /// Handles one request end to end. Never fails: errors become answers.
    /// `conn` describes its connection. The head is borrowed, not moved: it
    /// stays where the caller built it while every stage reads it (a head
    /// moved from stage to stage is copied into each one's future), and
    /// what the upstream leg needs changed in it is changed in place.
    pub async fn handle(&self, head: &mut Parts, mut body: RequestBody, conn: ConnInfo) -> Answer {
        // What is matched (the listener's own paths, a move's hold, the
        // routes) is what is forwarded: the path without dot segments.
        if let Some(normal) = path::without_dot_segments(&head.uri) {
            head.uri = normal;
        }
        let mut loaded = self.shared.table.snapshot();
        let shared = &self.shared;
        if let Some(response) = endpoints::own_answer(head, &loaded.table, &shared.drain, &self.minters, &self.me.name)
        {
            return Answer { response, request_id: None, from_upstream: false, rules: RuleFields::new() };
        }
        // A unit being re-homed: its requests wait before anything of them
        // is read (but a call's first message, when its id is there).
        let (mut refused, mut held) = (None, hold::Passed::Free);
        if loaded.table.is_holding() {
            match Box::pin(self.hold(head, body, Arc::clone(&loaded))).await {
                Ok(through) => (loaded, held, body) = (through.loaded, through.passed, through.body),
                Err(e) => (refused, body) = (Some(e), RequestBody::Empty),
            }
        }
        let table = &loaded.table;
        self.handled.fetch_add(1, Ordering::Relaxed);
        let (request_id, fresh_request_id) = self.request_id(head);
        let arrival = Arrival {
            started: Instant::now(),
            request_id,
            fresh_request_id,
            method: head.method.clone(),
            uri: head.uri.clone(),
            version: head.version,
            // gRPC is carried over HTTP/2 only.
            grpc: is_call(head),
        };
        let sender = Sender::of(&conn, table.settings());
        let journal = Journal { trace: self.server_span(head, sender), ..Journal::default() };
        let mut ctx = Ctx { table, conn, sender, arrival, journal, hops: 0, relayed: false, held };
        let result = match refused {
            Some(e) => Err(e),
            None => self.route(&mut ctx, head, body).await,
        };
        let report = respond::Report { metrics: &shared.metrics, drain: &shared.drain, name: &self.me.name };
        let (response, rules) = respond::finish(report, &loaded, &ctx, result);
        let from_upstream = matches!(response.body(), Either::Left(_));
        Answer { response, request_id: Some(ctx.arrival.request_id), from_upstream, rules }
    }

    /// The hold stage ([`hold::hold`]). A call whose route reads its id
    /// from its first message has that message read first: without it the
    /// call's unit is unknown, and its write would pass the hold. The body
    /// handed on starts with what was read (the route reads the message
    /// again from memory). Its timers start once the hold lets it go.
    async fn hold(&self, head: &Parts, body: RequestBody, loaded: Arc<Loaded>) -> Result<Through, ProxyError> {
        let (first, body) = match is_call(head) {
            true => message::if_routed_by(&loaded.table, head, Instant::now(), body).await?,
            false => (None, body),
        };
        let asked = hold::Asked { head, message: first.as_ref().map(message::First::message) };
        let s = &self.shared;
        let (loaded, passed) = hold::hold(&s.table, &s.holds, &s.metrics, &self.minters, asked, loaded).await?;
        Ok(Through { loaded, passed, body })
    }

    /// What the upstream leg needs of this proxy.
    fn reach(&self) -> Reach<'_> {
        let shared = &self.shared;
        Reach {
            upstreams: &shared.upstreams,
            health: &shared.health,
            traces: shared.traces.as_deref(),
            node: &self.me.node,
            room: &shared.room,
        }
    }

    /// The request's server span, when traces are on; the client's
    /// sampled flag is followed from a mesh peer or a trusted hop only.
    fn server_span(&self, head: &Parts, sender: Sender) -> Option<Box<crate::telemetry::traces::TraceSpan>> {
        let traces = self.shared.traces.as_ref()?;
        Some(Box::new(traces.server(&head.method, &head.headers, sender.traced())))
    }

    /// Whether the request came from an authenticated peer shardgate; from
    /// anyone else the mesh headers are removed (and `Forwarded`, unless
    /// from a trusted hop).
    fn trust(head: &mut Parts, ctx: &Ctx<'_>) -> bool {
        let Sender { peer, hop } = ctx.sender;
        if !peer && mesh::strip_from_request(&mut head.headers, hop) {
            tracing::debug!(peer = %ctx.conn.peer, "mesh headers from a client that is not an authenticated peer removed");
        }
        peer
    }

    /// The request's id and whether it is fresh: the client's when it sent
    /// one acceptable id (which stays in the request's map), else a fresh
    /// UUIDv7 (and what the client sent, an unacceptable id or more than
    /// one, is removed), which the upstream leg adds to the request
    /// ([`Arrival::id_to_add`]) so that the upstream sees the one the
    /// answer carries. Not inserted into the map here: that hashed into it
    /// on every request a client sends without an id.
    fn request_id(&self, head: &mut Parts) -> (HeaderValue, bool) {
        let mut sent = head.headers.get_all(headers::X_REQUEST_ID).iter();
        let (first, second) = (sent.next(), sent.next());
        let (mut id, fresh) = match (first, second) {
            (Some(v), None) if headers::acceptable_request_id(v) => (v.clone(), false),
            _ => {
                if first.is_some() {
                    head.headers.remove(headers::X_REQUEST_ID);
                }
                // Written on the stack, copied once into the header value.
                let id = self.request_ids.mint(&mut rand::rng());
                (HeaderValue::from_bytes(&id.to_ascii()).unwrap_or(HeaderValue::from_static("-")), true)
            }
        };
        // A value no other message repeats: HPACK sends it as a literal
        // that is never indexed, instead of adding it to the connection's
        // table, where each new id would push out the fields that repeat.
        id.set_sensitive(true);
        (id, fresh)
    }

    /// trust → admit → locate → (one region, a fan-out, a search) → the
    /// response head for the client.
    async fn route<'t>(
        &self,
        ctx: &mut Ctx<'t>,
        parts: &mut Parts,
        body: RequestBody,
    ) -> Result<Response<AnswerBody>, ProxyError> {
        let table = ctx.table;
        let from_peer = Self::trust(parts, ctx);
        headers::admit(parts, table.settings())?;
        let relay = mesh::Relay::take(&mut parts.headers, &self.me.node);
        let served_here = relay.served_here(table);
        not_a_loop(&relay, served_here, &self.me.name)?;
        ctx.hops = relay.hops.count;
        ctx.relayed = from_peer && ctx.hops > 0;
        // Boxed, and only for gRPC calls: its state would otherwise widen every request's future.
        let (first, body) = match ctx.arrival.grpc {
            true => Box::pin(message::if_routed_by(table, parts, ctx.arrival.started, body)).await?,
            false => (None, body),
        };
        let message = first.as_ref().map(message::First::message);
        let plan = locate::locate(table, parts, message, &self.minters, ctx.relayed).map_err(|rejected| {
            ctx.journal.route = rejected.route;
            rejected.error
        })?;
        ctx.journal.located(table, &plan);
        let minted = match &plan {
            Plan::One(located) => minted_id(located, parts),
            _ => None,
        };
        let (mut added, tunnel) = headers::to_upstream(ctx, parts, &body, plan.route(), &self.me.via);
        let route = plan.route();
        if let Some(rules) = route.headers.request_rules.as_ref().filter(|_| !ctx.relayed) {
            let owner = match &plan {
                Plan::One(located) => Some(located.placement.region),
                _ => None,
            };
            *added.rules_mut() = ctx.rule_fields(rules, owner);
        }
        let reach = self.reach();
        // A peer's fan-out or search leg: this region's answer, as it is.
        if let Some(name) = &relay.leg {
            let writes = !only_reads(&parts.method, tunnel.is_some());
            let region = serve_leg_here(ctx, (&plan, writes), name, &self.me.name)?;
            let (rewrite, policy) = (route.rewrite.as_ref(), table.policy(route, region));
            let leg = Leg { started: ctx.arrival.started, rewrite, policy, ..Leg::alone(table, region, ctx.hops) };
            let resp = Box::pin(forward::forward(reach, leg, parts, &added, body, &mut ctx.journal)).await?;
            return headers::from_upstream(resp, tunnel, None);
        }
        match plan {
            Plan::One(located) => {
                let (epoch, here) = fence(ctx, &located, &relay, served_here)?;
                let reads = only_reads(&parts.method, tunnel.is_some());
                let mut leg = Leg { epoch, ..one_leg(ctx, &located, &relay, served_here, reads) };
                // A sender with a newer epoch placed it here: this region owns it now.
                if let Some(here) = here {
                    leg.chain = dispatch::Chain::from_slice(&[here]);
                    leg.given_up = None;
                }
                let resp = forward::forward(reach, leg, parts, &added, body, &mut ctx.journal).await?;
                // Through a peer, the owner's shardgate announces the id its
                // backend stored (it mints again when it does not trust this
                // instance): that one, not this instance's, is the client's.
                let minted = minted.filter(|_| !ctx.journal.peer);
                headers::from_upstream(resp, tunnel, minted)
            }
            Plan::Fanout(route, rule) => {
                // The legs copy the head's map: the added fields go into it.
                added.move_into(&mut parts.headers);
                // Boxed, as the search below: their futures are large, and held
                // inline they would make every request's future as large.
                Box::pin(fanout::fanout(reach, ctx, route, rule, parts)).await
            }
            Plan::Search(asked) => {
                added.move_into(&mut parts.headers);
                let found = &self.shared.found;
                let resp = Box::pin(search::search(reach, found, ctx, &asked, parts, body)).await?;
                headers::from_upstream(resp, None, None)
            }
        }
    }
}

/// The id a create route minted, set in the request's head for the
/// owner's backend and kept to announce on its answer.
fn minted_id(located: &locate::Located<'_>, parts: &mut Parts) -> Option<headers::Minted> {
    let rule = located.route.mint.as_ref().filter(|_| located.minted)?;
    let id = located.id.as_ref()?.to_string();
    if let Ok(v) = HeaderValue::from_str(&id) {
        parts.headers.insert(rule.header.clone(), v);
    }
    Some((rule.header.clone(), id, rule.location.clone()))
}

/// A request this instance forwarded before is a loop, unless a peer
/// failed its region over to this one (`served_here`) or a move's switch
/// placed its unit here meanwhile (the sender carries the unit's epoch;
/// the hop limit still bounds its way).
fn not_a_loop(relay: &mesh::Relay, served_here: Option<RegionId>, me: &str) -> Result<(), ProxyError> {
    if relay.hops.seen_self && served_here.is_none() && relay.epoch == 0 {
        return Err(ProxyError::Loop { detail: format!("this instance ({me}) already forwarded the request") });
    }
    Ok(())
}

/// The epoch of the request's unit when this table moves it (forwards
/// carry it), or the 421 for a peer's forward of a unit this table re-homed
/// with a newer epoch than the sender's and no longer owns: naming the
/// owner, which the sender tries once (nothing has reached a backend).
/// The other way round, a peer's forward with a newer epoch than this
/// table's (none: 0) is placed by the sender's newer table, which sent it
/// to this region: it is served here (the region returned), never sent on
/// by this instance's older placement, which would send it back towards
/// the sender or to the unit's old owner.
fn fence(
    ctx: &Ctx<'_>,
    located: &locate::Located<'_>,
    relay: &mesh::Relay,
    served_here: Option<RegionId>,
) -> Result<(Option<u64>, Option<RegionId>), ProxyError> {
    let table = ctx.table;
    let m = table.move_of(located.placement.rule, located.placement.region);
    // A peer's forward that this table would send on to another region.
    let sent_on = ctx.relayed && served_here.is_none() && Some(located.placement.region) != table.local_region();
    if sent_on && relay.epoch > m.map_or(0, |m| m.epoch) {
        return Ok((Some(relay.epoch), table.local_region()));
    }
    let Some(m) = m else { return Ok((None, None)) };
    // Held here and released into this table: placed by it, a forward on if need be.
    if sent_on && ctx.held != hold::Passed::Released && m.epoch > relay.epoch {
        return Err(ProxyError::StaleEpoch {
            unit: m.unit.clone(),
            owner: table.region(located.placement.region).name.clone(),
            epoch: m.epoch,
        });
    }
    Ok((Some(m.epoch), None))
}

/// Whether a request only reads, and may go where its entity does not
/// live (a failover region; past a move's hold): a safe method, and no
/// protocol switch (`upgrading`), whose tunnel would carry writes the
/// proxy never sees.
fn only_reads(method: &http::Method, upgrading: bool) -> bool {
    crate::upstream::retry::is_safe(method) && !upgrading
}

/// The upstream leg of one id's request: along the owner's failover chain,
/// or the one a peer asks this instance to serve from.
fn one_leg<'t>(
    ctx: &Ctx<'t>,
    located: &locate::Located<'t>,
    relay: &mesh::Relay,
    served_here: Option<RegionId>,
    reads: bool,
) -> Leg<'t> {
    let table = ctx.table;
    let given_up = match ctx.held {
        hold::Passed::GivenUp if !reads => {
            table.move_of(located.placement.rule, located.placement.region).map(|m| m.unit.as_str())
        }
        _ => None,
    };
    Leg {
        // A peer that failed a region over to this one asks it to serve
        // from here (or follow this region's failover on): placing it
        // again would send it back to the owner, whose region is down.
        chain: match served_here {
            Some(_) => relay.chain.iter().filter_map(|name| table.region_by_name(name)).collect(),
            None => dispatch::Chain::from_slice(&[located.placement.region]),
        },
        // Reads fail over unless the route says not; a write only where the
        // route says so (it would land in a region that does not own the entity).
        // A write of a move given up here fails over nowhere: the region
        // it would reach serves it unfenced.
        can_fail_over: if reads {
            located.route.allow_failover_reads
        } else {
            located.route.allow_failover_writes && given_up.is_none()
        },
        hops: ctx.hops,
        table,
        serve_only: false,
        started: ctx.arrival.started,
        rewrite: located.route.rewrite.as_ref(),
        policy: table.policy(located.route, located.placement.region),
        // Set by [`fence`], which looks the unit's move up.
        epoch: None,
        given_up,
    }
}

impl Handler for Proxy {
    fn handle<'a>(
        &'a self,
        head: &'a mut Parts,
        body: RequestBody,
        conn: ConnInfo,
    ) -> impl std::future::Future<Output = Answer> + Send + 'a {
        Proxy::handle(self, head, body, conn)
    }

    fn via(&self) -> &HeaderValue {
        &self.me.via.http11
    }

    fn name(&self) -> &str {
        &self.me.name
    }
}

/// The region a peer's leg names, when it is the one this instance serves,
/// and the leg's request is this region's to take. A write (`writes`) this
/// table places (`plan`) in another region is refused, as is one of a unit
/// whose move this instance gave up: the sender's table may not agree with
/// this one (a search route here by id, during a rollout), and a leg is
/// served as it is, without the forward's fence.
fn serve_leg_here(
    ctx: &Ctx<'_>,
    (plan, writes): (&Plan<'_>, bool),
    name: &str,
    me: &str,
) -> Result<RegionId, ProxyError> {
    let table = ctx.table;
    let region = match (table.region_by_name(name), table.local_region()) {
        (Some(r), Some(local)) if r == local => r,
        _ => {
            return Err(ProxyError::Loop {
                detail: format!(
                    "a peer asked this instance ({me}) to serve region {} from its backends, which it does not hold",
                    error::quote(name)
                ),
            })
        }
    };
    let Plan::One(located) = plan else { return Ok(region) };
    if !writes {
        return Ok(region);
    }
    let m = table.move_of(located.placement.rule, located.placement.region);
    if let (Some(m), hold::Passed::GivenUp) = (m, ctx.held) {
        return Err(ProxyError::HoldExpired { unit: m.unit.clone() });
    }
    if located.placement.region == region {
        return Ok(region);
    }
    let owner = table.region(located.placement.region).name.clone();
    Err(match m {
        Some(m) => ProxyError::StaleEpoch { unit: m.unit.clone(), owner, epoch: m.epoch },
        None => ProxyError::NotOwner { owner },
    })
}
