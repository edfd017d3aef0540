//! The request and response heads on both legs: what is checked and
//! normalised on arrival ([`admit`]), and the header hygiene of RFC 9110
//! §7.6 on the way upstream (`to_upstream`) and back ([`from_upstream`]):
//! hop-by-hop removal, allowed upgrades only, `X-Forwarded-*`, a fresh
//! request id and `Via` upstream, which request ids are kept, and the
//! minted id announced on a successful create. The answer's own `Via` and
//! request id are written by the server that sends it
//! ([`super::Proxy::handle`]).

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::Response;
use hyper::body::Body;

use super::ctx::Ctx;
use super::error::ProxyError;
use super::tunnel::Tunnel;
use crate::http1::write::{Added, AddedField};
use crate::http1::Fields;
use crate::http1::{HOP_BY_HOP, HOP_COUNT};
use crate::routing::{Route, Settings};
use crate::server::upgrade::ClientUpgrade;
use crate::upstream::{RequestBody, ResponseBody};

/// Checks a request head as it arrived: within the limits, framed as RFC
/// 9112 wants (its path has lost its dot segments already, in
/// [`Proxy::handle`](super::Proxy::handle)).
pub fn admit(parts: &mut Parts, settings: &Settings) -> Result<(), ProxyError> {
    let server = &settings.server;
    let uri_len = parts.uri.path_and_query().map_or(0, |p| p.as_str().len());
    if uri_len > server.max_uri_bytes {
        return Err(ProxyError::UriTooLong { limit: server.max_uri_bytes });
    }
    let max_headers = settings.restart.max_headers;
    if parts.headers.len() > max_headers {
        return Err(ProxyError::HeadersTooLarge { limit: max_headers });
    }
    check_framing(parts)
}

/// Prepares the request head for the upstream leg: only the route's allowed
/// upgrades, hop-by-hop headers removed, a body of unknown length marked
/// chunked; the client's `X-Forwarded-*` removed unless it is a trusted hop.
/// Returns the fields the proxy adds (`X-Forwarded-*`, the request id when
/// this proxy minted it, `fresh_request_id`, and `Via`: a client's id stays
/// in the map), which the upstream head writer writes after the client's,
/// and the tunnel an upgrade would open, when one is asked for. The client's
/// `Host` stays in the map and is never written upstream (each attempt
/// sends its endpoint's).
pub(super) fn to_upstream(
    ctx: &Ctx<'_>,
    parts: &mut Parts,
    body: &RequestBody,
    route: &Route,
    via: &Via,
) -> (Added, Option<Tunnel>) {
    let (conn, settings) = (&ctx.conn, ctx.table.settings());
    let upgrade = parts.version == http::Version::HTTP_11 && keep_allowed_upgrades(&mut parts.headers, &route.upgrades);
    let tunnel = if upgrade { ClientUpgrade::take(&mut parts.extensions) } else { None }.and_then(|client| {
        let asked = parts.headers.get(header::UPGRADE)?.clone();
        let (idle, min_rate) = (route.tunnel_idle_timeout, settings.restart.answer_min_rate);
        Some(Tunnel { client, asked, idle, min_rate, peer: conn.peer })
    });
    // The authority the client asked for: the absolute URI's (or HTTP/2's
    // `:authority`), else `Host`.
    let host = match parts.uri.authority() {
        Some(a) => HeaderValue::from_str(a.as_str()).ok(),
        None => parts.headers.get(header::HOST).cloned(),
    };
    let chunked = !body.is_end_stream() && body.size_hint().exact().is_none();
    remove_hop_by_hop(&mut parts.headers, upgrade);
    let origin = Origin { peer: conn.peer.ip(), trusted: ctx.sender.hop, tls: conn.tls, host };
    let added = forwarded(&mut parts.headers, origin, ctx.arrival.id_to_add(), via.for_version(parts.version));
    // A body of unknown length (chunked from the client, or HTTP/2 without
    // content-length) goes upstream chunked, whatever the method: without
    // the header the client leg would send a GET's body as no body.
    if chunked {
        parts.headers.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
    }
    (added, tunnel)
}

/// A minted id to announce on the response: its header, the id, and the
/// `Location` template.
pub type Minted = (HeaderName, String, Option<String>);

/// Prepares the upstream's response for the client: the tunnel opened on a
/// `101` to what the client asked for (a `101` it did not ask for is the
/// upstream's failure), hop-by-hop and mesh headers removed, a minted id
/// announced when the owner accepted the create (2xx: after a failure no
/// entity stands behind the id). The answer comes back as the upstream's
/// kind of [`crate::server::AnswerBody`] (`Left`): that is what tells the client
/// leg's writers to add this proxy's `Via` after the upstream's fields
/// ([`super::Proxy::handle`]).
pub fn from_upstream(
    mut resp: Response<ResponseBody>,
    tunnel: Option<Tunnel>,
    minted: Option<Minted>,
) -> Result<Response<crate::server::AnswerBody>, ProxyError> {
    let switching = resp.status() == http::StatusCode::SWITCHING_PROTOCOLS;
    if switching {
        // A tunnel's `Upgrade` and `Connection` are kept and rewritten in
        // the map; rare enough to pay for it.
        crate::upstream::fields_into_map(&mut resp);
        let tunnel = tunnel.filter(|t| t.agrees(resp.headers())).ok_or(ProxyError::BadUpgrade)?;
        if let Some(up) = resp.body_mut().take_upgrade() {
            tunnel.spawn(up);
        }
    }
    // The upstream's fields are still bytes on the common path (and the map
    // empty), but a leg's answer may have had them moved to the map.
    drop_hop_by_hop_fields(resp.body_mut().fields_mut());
    remove_hop_by_hop(resp.headers_mut(), switching);
    crate::mesh::strip_from_response(resp.headers_mut());
    remove_ours(resp.headers_mut());
    // A gRPC call that failed at once (a Trailers-Only answer) created nothing either.
    let created = |resp: &Response<ResponseBody>| {
        resp.status().is_success() && resp.headers().get("grpc-status").is_none_or(|s| s == "0")
    };
    if let Some((header, id, location)) = minted.filter(|_| created(&resp)) {
        if let Ok(v) = HeaderValue::from_str(&id) {
            if let Some(loc) = location.and_then(|l| HeaderValue::from_str(&l.replace("{id}", &id)).ok()) {
                resp.headers_mut().insert(header::LOCATION, loc);
            }
            resp.headers_mut().insert(header, v);
        }
    }
    Ok(resp.map(http_body_util::Either::Left))
}

pub use crate::server::X_REQUEST_ID;
/// `X-Forwarded-For`.
pub const X_FORWARDED_FOR: HeaderName = AddedField::ForwardedFor.name();
/// `X-Forwarded-Proto`.
pub const X_FORWARDED_PROTO: HeaderName = AddedField::ForwardedProto.name();
/// `X-Forwarded-Host`.
pub const X_FORWARDED_HOST: HeaderName = AddedField::ForwardedHost.name();

/// `HTTP2-Settings`, which only an `Upgrade: h2c` request carries.
const HTTP2_SETTINGS: HeaderName = HeaderName::from_static("http2-settings");

/// Keeps in `Upgrade` only the protocols in `allowed` (lowercase names such
/// as `websocket`; `h2c` never: an upgraded connection is a raw tunnel, and
/// HTTP/2 inside it would carry requests the proxy never routed) and
/// returns whether an upgrade is still asked for. Without one, `Upgrade`
/// and `HTTP2-Settings` are removed and the request goes on as a plain one.
pub fn keep_allowed_upgrades(headers: &mut HeaderMap, allowed: &[String]) -> bool {
    // One look at the names instead of two hashed lookups, on every request.
    let (mut upgrade, mut settings) = (false, false);
    for name in headers.keys() {
        upgrade |= name == header::UPGRADE;
        settings |= name == HTTP2_SETTINGS;
    }
    if !upgrade {
        if settings {
            headers.remove(HTTP2_SETTINGS);
        }
        return false;
    }
    let asked = crate::server::upgrade::asked(headers);
    let kept: Vec<&str> = headers
        .get_all(header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| {
            // `websocket`, `websocket/13`: the protocol name before any version.
            let name = p.split('/').next().unwrap_or("");
            !name.eq_ignore_ascii_case("h2c") && allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
        })
        .collect();
    let value = (asked && !kept.is_empty()).then(|| HeaderValue::from_str(&kept.join(", ")).ok()).flatten();
    headers.remove(HTTP2_SETTINGS);
    match value {
        Some(v) => {
            headers.insert(header::UPGRADE, v);
            true
        }
        None => {
            headers.remove(header::UPGRADE);
            false
        }
    }
}

/// RFC 9112 checks hyper leaves to the application: an HTTP/1.1 request has
/// exactly one `Host` (§3.2), and a transfer coding other than `chunked`
/// (say `gzip, chunked`) is one the proxy cannot pass on faithfully, since
/// the upstream leg re-frames the body (§6.1: 501).
pub fn check_framing(parts: &Parts) -> Result<(), ProxyError> {
    if parts.version == http::Version::HTTP_11 {
        let hosts = parts.headers.get_all(header::HOST).iter().count();
        if hosts != 1 {
            return Err(ProxyError::BadHost { count: hosts });
        }
    }
    for value in parts.headers.get_all(header::TRANSFER_ENCODING) {
        if let Some(coding) = crate::http1::other_coding(value.as_bytes()) {
            let coding = String::from_utf8_lossy(coding).into_owned();
            return Err(ProxyError::UnsupportedTransferCoding { coding });
        }
    }
    Ok(())
}

/// This instance's `Via` element for each protocol version it receives
/// (RFC 9110 §7.6.3: the version of the request as received).
#[derive(Clone, Debug)]
pub struct Via {
    /// `1.0 <name>`.
    pub http10: HeaderValue,
    /// `1.1 <name>`: requests over HTTP/1.1 and every response (the upstream leg is HTTP/1.1).
    pub http11: HeaderValue,
    /// `2 <name>`.
    pub http2: HeaderValue,
}

impl Via {
    /// The elements for instance `name`.
    pub fn new(name: &str) -> Via {
        let make = |v: &str| {
            HeaderValue::from_str(&format!("{v} {name}")).unwrap_or_else(|_| HeaderValue::from_static("1.1 shardgate"))
        };
        Via { http10: make("1.0"), http11: make("1.1"), http2: make("2") }
    }

    /// The element for a request received with `version`.
    pub fn for_version(&self, version: http::Version) -> &HeaderValue {
        match version {
            http::Version::HTTP_10 | http::Version::HTTP_09 => &self.http10,
            http::Version::HTTP_2 | http::Version::HTTP_3 => &self.http2,
            _ => &self.http11,
        }
    }
}

/// Drops the hop-by-hop and mesh fields of an upstream response still kept
/// as bytes, and every field a `Connection` names (the parser dropped the
/// `Connection` fields that name none, and the fields the framing used).
pub fn drop_hop_by_hop_fields(fields: &mut Fields) {
    // Empty, and not allocated, unless a `Connection` field survived.
    let named: Vec<Vec<u8>> = fields
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
        .flat_map(|(_, v)| v.split(|&b| b == b','))
        .map(|t| t.trim_ascii().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    fields.drop_where(|name| {
        HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h.as_str().as_bytes()))
            || crate::mesh::is_mesh_field(name)
            || is_ours(name)
            || named.iter().any(|n| name.eq_ignore_ascii_case(n))
    });
}

/// The prefix of the fields this proxy itself puts on answers
/// (`X-Shardgate-Region`, `-Partial`, …): an upstream's are never passed on.
const OURS: &[u8] = b"x-shardgate-";

/// Whether `name` (as sent, any case) is one of this proxy's own answer fields.
fn is_ours(name: &[u8]) -> bool {
    name.len() >= OURS.len() && name[..OURS.len()].eq_ignore_ascii_case(OURS)
}

/// Removes the fields of this proxy's own that an upstream put in an
/// answer's map (the proxy adds its own after).
fn remove_ours(headers: &mut HeaderMap) {
    let ours: Vec<HeaderName> = headers.keys().filter(|n| is_ours(n.as_str().as_bytes())).cloned().collect();
    for name in ours {
        headers.remove(name);
    }
}

/// Removes hop-by-hop headers, including every header named in
/// `Connection`. With `keep_upgrade`, `Upgrade` and `Connection: upgrade`
/// survive (a real upgrade is being tunnelled).
pub fn remove_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    // Most messages carry none, or only `Connection: keep-alive`: one pass
    // over the names (compared, not hashed) finds which are present, and
    // only those are removed.
    let mut present = [false; HOP_COUNT];
    for name in headers.keys() {
        if let Some(i) = HOP_BY_HOP.iter().position(|h| h == name) {
            present[i] = true;
        }
    }
    if !present.contains(&true) {
        return;
    }
    if present[0] {
        // Names listed in `Connection` that are not hop-by-hop already
        // (`close` and `keep-alive` are the usual tokens; no lookup for them).
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|t| !t.eq_ignore_ascii_case("close") && !t.eq_ignore_ascii_case("keep-alive"))
            .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
            .filter(|n| !HOP_BY_HOP.contains(n))
            // The request id is this proxy's end-to-end field: the upstream
            // gets the one the answer carries, whatever a `Connection` says
            // of it (removed, the proxy would add the same value back).
            .filter(|n| *n != X_REQUEST_ID)
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    let upgrade = if keep_upgrade { headers.remove(header::UPGRADE) } else { None };
    for (name, _) in HOP_BY_HOP.iter().zip(present).filter(|(_, here)| *here) {
        headers.remove(name);
    }
    if let Some(u) = upgrade {
        headers.insert(header::UPGRADE, u);
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

/// Where a request came from, for its `X-Forwarded-*` fields.
#[derive(Debug)]
pub struct Origin {
    /// The client's address.
    pub peer: IpAddr,
    /// Whether the client is a trusted hop (`server.trusted_hops`).
    pub trusted: bool,
    /// Whether it came over TLS.
    pub tls: bool,
    /// The authority it asked for.
    pub host: Option<HeaderValue>,
}

/// The fields this proxy adds to a request from `origin`: its
/// `X-Forwarded-For/Proto/Host`, the request id when this proxy minted it
/// (`fresh_request_id`), and `via` last. The client's own `X-Forwarded-*`
/// are kept (its `For` appended to) only when it is a trusted hop;
/// otherwise they are removed from `headers`, so a client cannot forge its
/// origin.
pub fn forwarded(
    headers: &mut HeaderMap,
    origin: Origin,
    fresh_request_id: Option<&HeaderValue>,
    via: &HeaderValue,
) -> Added {
    // One pass over the names (compared, not hashed) finds whether the
    // client sent any: usually none, and then nothing is looked up or removed.
    let (mut has_for, mut has_proto, mut has_host) = (false, false, false);
    for name in headers.keys() {
        has_for |= name == X_FORWARDED_FOR;
        has_proto |= name == X_FORWARDED_PROTO;
        has_host |= name == X_FORWARDED_HOST;
    }
    let peer = origin.peer;
    // A trusted hop's list, every line of it, with this client appended.
    let before: Vec<&str> = match origin.trusted && has_for {
        true => {
            headers.get_all(&X_FORWARDED_FOR).iter().filter_map(|v| v.to_str().ok()).filter(|v| !v.is_empty()).collect()
        }
        false => Vec::new(),
    };
    let value = match (before.is_empty(), peer) {
        (false, _) => HeaderValue::from_str(&format!("{}, {peer}", before.join(", "))).ok(),
        // The common case costs one allocation: the address is written on
        // the stack and copied once into the header value.
        (true, IpAddr::V4(v4)) => HeaderValue::from_bytes(Ipv4Text::new(v4).as_bytes()).ok(),
        (true, IpAddr::V6(_)) => HeaderValue::from_str(&peer.to_string()).ok(),
    };
    let mut added = Added::default();
    if has_for {
        headers.remove(X_FORWARDED_FOR);
    }
    if let Some(v) = value {
        added.push(AddedField::ForwardedFor, v);
    }
    if !(origin.trusted && has_proto) {
        if has_proto {
            headers.remove(X_FORWARDED_PROTO);
        }
        added.push(AddedField::ForwardedProto, HeaderValue::from_static(if origin.tls { "https" } else { "http" }));
    }
    if !(origin.trusted && has_host) {
        if has_host {
            headers.remove(X_FORWARDED_HOST);
        }
        if let Some(h) = origin.host {
            added.push(AddedField::ForwardedHost, h);
        }
    }
    if let Some(id) = fresh_request_id {
        added.push(AddedField::RequestId, id.clone());
    }
    added.push(AddedField::Via, via.clone());
    added
}

/// An IPv4 address in dotted decimal, written on the stack. Written by hand
/// because `Display` for `Ipv4Addr` goes through `core::fmt` (padding
/// support, a formatter per octet), which a profile of the proxy showed
/// as a measurable share of each request's work.
struct Ipv4Text {
    buf: [u8; 15],
    len: usize,
}

impl Ipv4Text {
    fn new(ip: std::net::Ipv4Addr) -> Ipv4Text {
        let mut t = Ipv4Text { buf: [0; 15], len: 0 };
        for (i, octet) in ip.octets().into_iter().enumerate() {
            if i > 0 {
                t.push(b'.');
            }
            if octet >= 100 {
                t.push(b'0' + octet / 100);
            }
            if octet >= 10 {
                t.push(b'0' + octet / 10 % 10);
            }
            t.push(b'0' + octet % 10);
        }
        t
    }

    fn push(&mut self, b: u8) {
        // At most 4 × 3 digits + 3 dots = 15 bytes: the index is in bounds.
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// An incoming request id is kept when it is 1–128 visible ASCII characters.
pub fn acceptable_request_id(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    !b.is_empty() && b.len() <= 128 && b.iter().all(|c| c.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            if let (Ok(k), Ok(v)) = (HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(v)) {
                h.append(k, v);
            }
        }
        h
    }

    #[test]
    fn removes_headers_named_in_connection() {
        let mut h = map(&[("connection", "keep-alive, x-secret"), ("x-secret", "1"), ("te", "trailers"), ("a", "b")]);
        remove_hop_by_hop(&mut h, false);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("a"));
    }

    #[test]
    fn keeps_upgrade_when_tunnelling() {
        let mut h = map(&[("connection", "Upgrade"), ("upgrade", "websocket"), ("keep-alive", "5")]);
        assert!(crate::server::upgrade::asked(&h));
        remove_hop_by_hop(&mut h, true);
        assert_eq!(h.get("upgrade").map(|v| v.as_bytes()), Some(&b"websocket"[..]));
        assert_eq!(h.get("connection").map(|v| v.as_bytes()), Some(&b"upgrade"[..]));
        assert!(!h.contains_key("keep-alive"));
    }

    /// The fields `forwarded` adds, as `(name, value)` text.
    fn added_text(added: &Added) -> Vec<(&str, String)> {
        added.iter().map(|(n, v)| (n.as_str(), String::from_utf8_lossy(v.as_bytes()).into_owned())).collect()
    }

    #[test]
    fn untrusted_forwarded_headers_are_replaced() {
        let via = HeaderValue::from_static("1.1 gw");
        let origin = |trusted, tls, host: Option<&'static str>| Origin {
            peer: [10, 0, 0, 9].into(),
            trusted,
            tls,
            host: host.map(HeaderValue::from_static),
        };
        let sent = [("x-forwarded-for", "1.2.3.4"), ("x-forwarded-proto", "https"), ("x-forwarded-host", "a.example")];
        let mut h = map(&[("accept", "*/*"), sent[0], sent[1], sent[2], ("via", "1.1 edge")]);
        // Every field it can add: the list holds the five.
        let id = HeaderValue::from_static("0190163d-8694-739b-aea5-966c26f8ad91");
        let added = forwarded(&mut h, origin(false, false, Some("b.example")), Some(&id), &via);
        assert_eq!(
            added_text(&added),
            [
                ("x-forwarded-for", "10.0.0.9".to_string()),
                ("x-forwarded-proto", "http".into()),
                ("x-forwarded-host", "b.example".into()),
                ("x-request-id", "0190163d-8694-739b-aea5-966c26f8ad91".into()),
                ("via", "1.1 gw".into())
            ]
        );
        assert_eq!(h, map(&[("accept", "*/*"), ("via", "1.1 edge")]), "the client's own removed, its Via kept");

        // A trusted hop's values stay (its list, every line, appended to).
        let mut h = map(&[sent[0], ("x-forwarded-for", "5.6.7.8"), sent[1], sent[2]]);
        let added = forwarded(&mut h, origin(true, false, Some("b.example")), None, &via);
        assert_eq!(
            added_text(&added),
            [("x-forwarded-for", "1.2.3.4, 5.6.7.8, 10.0.0.9".to_string()), ("via", "1.1 gw".into())]
        );
        assert_eq!(h, map(&[sent[1], sent[2]]));

        // A trusted hop that sent none gets this proxy's; TLS says https;
        // no authority, no X-Forwarded-Host.
        let mut h = map(&[]);
        let added = forwarded(&mut h, origin(true, true, None), None, &via);
        assert_eq!(
            added_text(&added),
            [
                ("x-forwarded-for", "10.0.0.9".to_string()),
                ("x-forwarded-proto", "https".into()),
                ("via", "1.1 gw".into())
            ]
        );
        assert!(h.is_empty());
    }

    #[test]
    fn ipv4_text_matches_display() {
        for a in 0..=255u8 {
            for ip in [[a, 0, 255, 9], [10, a, 99, 100], [1, 2, a, 250], [255, 255, 255, a]] {
                let ip = std::net::Ipv4Addr::from(ip);
                assert_eq!(Ipv4Text::new(ip).as_bytes(), ip.to_string().as_bytes());
            }
        }
    }

    #[test]
    fn only_allowed_upgrades_survive() {
        let ws = vec!["websocket".to_string()];
        let mut h = map(&[("connection", "Upgrade, HTTP2-Settings"), ("upgrade", "h2c"), ("http2-settings", "AAM")]);
        assert!(!keep_allowed_upgrades(&mut h, &ws));
        assert!(!h.contains_key("upgrade") && !h.contains_key("http2-settings"));
        let mut h = map(&[("connection", "upgrade"), ("upgrade", "h2c, WebSocket")]);
        assert!(keep_allowed_upgrades(&mut h, &ws));
        assert_eq!(h.get("upgrade").map(|v| v.as_bytes()), Some(&b"WebSocket"[..]));
        let mut h = map(&[("connection", "upgrade"), ("upgrade", "websocket")]);
        assert!(!keep_allowed_upgrades(&mut h, &[]), "a route that allows none");
        let mut h = map(&[("upgrade", "websocket")]);
        assert!(!keep_allowed_upgrades(&mut h, &ws), "no Connection: upgrade");
    }

    #[test]
    fn via_names_the_version_received() {
        let via = Via::new("gw");
        assert_eq!(via.for_version(http::Version::HTTP_2), "2 gw");
        assert_eq!(via.for_version(http::Version::HTTP_11), "1.1 gw");
        assert_eq!(via.for_version(http::Version::HTTP_10), "1.0 gw");
    }

    #[test]
    fn messages_without_hop_by_hop_headers_are_untouched() {
        let mut h = map(&[("host", "a"), ("x-request-id", "r"), ("accept", "*/*"), ("accept", "text/plain")]);
        let before = h.clone();
        remove_hop_by_hop(&mut h, false);
        assert_eq!(h, before);
    }

    /// Every field this module and the mesh drop, add or own is one the
    /// table may not name for an id, a country list or a minted id (the
    /// config keeps its own list, since it sits below the proxy).
    #[test]
    fn the_table_may_not_name_a_field_the_proxy_owns() {
        let owned = HOP_BY_HOP.into_iter().chain([
            header::TRAILER,
            header::HOST,
            header::CONTENT_LENGTH,
            header::VIA,
            X_REQUEST_ID,
            X_FORWARDED_FOR,
            X_FORWARDED_PROTO,
            X_FORWARDED_HOST,
            crate::mesh::HOPS,
            crate::mesh::FAILOVER,
            crate::mesh::LEG,
            crate::mesh::FORWARDED,
        ]);
        for name in owned {
            assert!(crate::config::validate::proxy_owned(&name).is_some(), "{name} is allowed");
        }
        for name in ["x-entity-id", "x-country", "x-countries", "x-shardgate", "accept", "x-via"] {
            let name = HeaderName::from_static(name);
            assert!(crate::config::validate::proxy_owned(&name).is_none(), "{name} is refused");
        }
    }
}
