//! The request's context: what the proxy knows of one request, carried
//! through its stages as one value. [`Arrival`] is what it came as;
//! [`Journal`] is what happened to it, written by the stages as they go
//! and read once, at its end ([`super::respond`]); [`Ctx`] holds both
//! beside the table snapshot the request is routed by. A stage takes the
//! part it needs: `locate` the table, `forward` the journal, `fanout` and
//! `search` the whole context.

use std::sync::Arc;
use std::time::Instant;

use http::{HeaderValue, Method, Uri, Version};

use super::error::ProxyError;
use super::locate::Plan;
use crate::config::settings::Settings;
use crate::http1::rules::{RuleFields, Rules, PICKS};
use crate::ids::{Decoded, Format};
use crate::outcome::Outcome;
use crate::routing::rules::{COUNTRY, ENTITY, REGION};
use crate::routing::{RegionId, Route, Rule, Table};
use crate::server::ConnInfo;
use crate::telemetry::traces::TraceSpan;

/// One request as it goes: the table it is routed by, how it came, what
/// became of it, and how many peer hops it took to get here.
#[derive(Debug)]
pub(super) struct Ctx<'t> {
    /// The table snapshot the request is routed by, start to end.
    pub(super) table: &'t Table,
    /// The connection it came on.
    pub(super) conn: ConnInfo,
    /// How far its sender is trusted, judged once by `table`.
    pub(super) sender: Sender,
    /// How it came.
    pub(super) arrival: Arrival,
    /// What became of it.
    pub(super) journal: Journal<'t>,
    /// Peer hops it took before this instance (0 from a client).
    pub(super) hops: u32,
    /// Whether an authenticated peer relayed it: its header rules were
    /// applied there, and its answer gets them there.
    pub(super) relayed: bool,
    /// How it passed its unit's hold on this instance: released into
    /// `table`, it is placed by this table, whatever epoch a peer sent.
    pub(super) held: super::hold::Passed,
}

/// How far a request's sender is trusted, by the table's settings: the one
/// place that judges a connection's address and certificate.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sender {
    /// An authenticated peer shardgate (a verified client certificate on a
    /// listener that asks for one, else an address in `mesh.trusted_peers`):
    /// its mesh headers are honoured.
    pub(super) peer: bool,
    /// A trusted hop (`server.trusted_hops`): its `Forwarded` and
    /// `X-Forwarded-*` fields are kept.
    pub(super) hop: bool,
}

impl Sender {
    /// `conn`'s sender, judged by `settings`.
    pub(super) fn of(conn: &ConnInfo, settings: &Settings) -> Sender {
        Sender {
            peer: conn.is_mesh_peer(&settings.mesh.trusted_peers),
            hop: settings.server.trusted_hops.iter().any(|c| c.contains(conn.peer.ip())),
        }
    }

    /// Whether its trace context decides sampling: a peer's or a trusted hop's.
    pub(super) fn traced(self) -> bool {
        self.peer || self.hop
    }
}

/// What is kept of a request for its answer and its log line.
#[derive(Debug)]
pub(super) struct Arrival {
    /// When it arrived.
    pub(super) started: Instant,
    /// Its request id (the client's, if acceptable, else a fresh UUIDv7).
    pub(super) request_id: HeaderValue,
    /// Whether the id is a fresh one: then it goes upstream among the
    /// fields the upstream head writer adds (and into the map only of a
    /// fan-out's or a search's request, whose legs copy it).
    pub(super) fresh_request_id: bool,
    /// Its method, target and version, as the client sent them (the
    /// stages may change the head's).
    pub(super) method: Method,
    /// See `method`.
    pub(super) uri: Uri,
    /// See `method`.
    pub(super) version: Version,
    /// Whether it is a gRPC call (`content-type: application/grpc…`): the
    /// proxy's own answers to it are gRPC statuses, not problem+json.
    pub(super) grpc: bool,
}

impl Arrival {
    /// The request id the upstream leg adds to the request, when the
    /// client sent none (or one not acceptable).
    pub(super) fn id_to_add(&self) -> Option<&HeaderValue> {
        self.fresh_request_id.then_some(&self.request_id)
    }
}

/// What happened to one request, written by the stages as it goes and read
/// here, once, at its end: for the access log, the metrics, the trace and
/// the debug headers, even when it failed.
#[derive(Debug, Default)]
pub(super) struct Journal<'t> {
    /// The route, when one matched (borrowed from the request's table snapshot).
    pub(super) route: Option<&'t Route>,
    /// The region that served the request.
    pub(super) region: Option<RegionId>,
    /// Why the owner was chosen (the table's rule).
    pub(super) rule: Option<Rule>,
    /// When the owner's region was down: the owner, whose failover region served.
    pub(super) failover_from: Option<&'t str>,
    /// Upstream attempts made.
    pub(super) attempts: u32,
    /// Whether the request went to another region's shardgate.
    pub(super) peer: bool,
    /// Format of the id the request was routed by (decoded or minted).
    pub(super) format: Option<Format>,
    /// Whether that id was minted by a create route.
    pub(super) minted: bool,
    /// The id in canonical form, kept only when `log.ids` is on.
    pub(super) id: Option<String>,
    /// An iUID's country and service entity (for header rules).
    pub(super) iuid: Option<(u8, u8)>,
    /// When the first upstream attempt started.
    pub(super) upstream_started: Option<Instant>,
    /// A fan-out's or search's regions and what each answered.
    pub(super) legs: Option<Legs>,
    /// How a fan-out or search that answered ended; `None`: as the other
    /// fields say ([`Journal::outcome`]).
    pub(super) outcome: Option<Outcome>,
    /// The span the request's upstream attempts are children of (the
    /// server span; in a fan-out's or search's leg, the leg's), when traces
    /// are on. Boxed: with traces off it costs every request's future a
    /// pointer's width, not a span's.
    pub(super) trace: Option<Box<TraceSpan>>,
}

/// The regions a fan-out or search asked, and what each answered (`ok`,
/// `found`, `not_found`, `cancelled`, or a failure's reason).
#[derive(Debug)]
pub(super) struct Legs {
    /// `fanout` or `search`.
    pub(super) kind: &'static str,
    /// Each region and its answer, in the route's order.
    pub(super) answers: Vec<(RegionId, &'static str)>,
}

impl Legs {
    /// `eu=ok us=leg_timeout`, for the access log and the debug header.
    pub(super) fn summary(&self, table: &Table) -> String {
        let mut out = String::new();
        for (region, answer) in &self.answers {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&table.region(*region).name);
            out.push('=');
            out.push_str(answer);
        }
        out
    }
}

impl Journal<'_> {
    /// The placement rule as text with the table's names (`country 7 (KZ)`,
    /// `override KZ/WalletAccount; failover from kz`), built only when a log
    /// line or debug header needs it.
    pub(super) fn rule_text(&self, table: &Table) -> Option<String> {
        self.rule.map(|rule| match self.failover_from {
            Some(from) => format!("{}; failover from {from}", table.explain(rule)),
            None => table.explain(rule).to_string(),
        })
    }

    /// How the request ended: `error`'s row's, a fan-out's or search's own,
    /// else by where it went.
    pub(super) fn outcome(&self, error: Option<&ProxyError>) -> Outcome {
        match (error, self.outcome) {
            (Some(err), _) => err.spec().outcome,
            (None, Some(outcome)) => outcome,
            (None, None) if self.peer => Outcome::ForwardedToPeer,
            (None, None) if self.minted => Outcome::Minted,
            (None, None) => Outcome::Proxied,
        }
    }
}

impl Ctx<'_> {
    /// What header rules `rules` make of this request's fields, or of its
    /// answer's: `region` is the owner (request) or the region that served
    /// it (answer).
    pub(super) fn rule_fields(&self, rules: &Arc<Rules>, region: Option<RegionId>) -> RuleFields {
        let mut at = [None; PICKS];
        at[REGION] = region.map(|r| usize::from(r.0));
        if let Some((country, entity)) = self.journal.iuid {
            at[COUNTRY] = Some(usize::from(country));
            at[ENTITY] = Some(usize::from(entity));
        }
        RuleFields::of(rules, at, &self.arrival.request_id)
    }
}

impl<'t> Journal<'t> {
    /// The name of the region that served the request.
    pub(super) fn region_name<'a>(&self, table: &'a Table) -> Option<&'a str> {
        self.region.map(|r| table.region(r).name.as_str())
    }

    /// Records what `locate` decided: the route, the id (its format,
    /// whether it was minted, the id itself when `log.ids` is on) and the
    /// placement rule.
    pub(super) fn located(&mut self, table: &Table, plan: &Plan<'t>) {
        self.route = Some(plan.route());
        let (id, minted) = match plan {
            Plan::One(l) => {
                self.rule = Some(l.placement.rule);
                (l.id.as_ref(), l.minted)
            }
            Plan::Search(s) => (Some(&s.id), false),
            Plan::Fanout(..) => return,
        };
        if let Some(id) = id {
            self.id_routed_by(table, id, minted);
        }
    }

    fn id_routed_by(&mut self, table: &Table, id: &Decoded, minted: bool) {
        self.format = Some(id.format());
        self.minted = minted;
        if let Decoded::Iuid(i) = id {
            self.iuid = Some((i.country(), i.service_entity()));
        }
        if table.settings().log.ids {
            self.id = Some(id.to_string());
        }
    }
}
