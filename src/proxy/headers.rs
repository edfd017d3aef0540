//! Header hygiene on every leg (RFC 9110 §7.6): hop-by-hop removal,
//! `X-Forwarded-*`, `Via`, request ids.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Headers that describe one connection, never forwarded (RFC 9110 §7.6.1),
/// plus the non-standard ones proxies conventionally drop.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
];

/// The request-id header name.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// `X-Forwarded-For`.
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`.
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`.
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Whether the request asks for a protocol upgrade (`Connection: upgrade`
/// and an `Upgrade` header).
pub fn is_upgrade_request(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE) && connection_has(headers, "upgrade")
}

fn connection_has(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Removes hop-by-hop headers, including every header named in
/// `Connection`. With `keep_upgrade`, `Upgrade` and `Connection: upgrade`
/// survive (a real upgrade is being tunnelled).
pub fn remove_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    if headers.contains_key(header::CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
            .collect();
        for name in named {
            if !(keep_upgrade && name == header::UPGRADE) {
                headers.remove(name);
            }
        }
    }
    let upgrade = if keep_upgrade { headers.remove(header::UPGRADE) } else { None };
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
    if let Some(u) = upgrade {
        headers.insert(header::UPGRADE, u);
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

/// Sets `X-Forwarded-For/Proto/Host` for a request received from `peer`.
/// Incoming values are kept (and appended to) only when `peer_trusted`;
/// otherwise they are replaced, so a client cannot forge its origin.
pub fn set_forwarded(headers: &mut HeaderMap, peer: IpAddr, peer_trusted: bool, host: Option<&HeaderValue>) {
    use std::io::Write as _;
    // The common case (no trusted incoming value) costs one allocation: the
    // address is written on the stack and copied once into the header value.
    let mut buf = [0u8; 64];
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    let value = match headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(prev) if peer_trusted && !prev.is_empty() => HeaderValue::from_str(&format!("{prev}, {peer}")).ok(),
        _ => match write!(cursor, "{peer}") {
            Ok(()) => {
                let n = cursor.position() as usize;
                HeaderValue::from_bytes(&buf[..n]).ok()
            }
            Err(_) => HeaderValue::from_str(&peer.to_string()).ok(),
        },
    };
    if let Some(v) = value {
        headers.insert(X_FORWARDED_FOR, v);
    }
    if !(peer_trusted && headers.contains_key(&X_FORWARDED_PROTO)) {
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    }
    if !(peer_trusted && headers.contains_key(&X_FORWARDED_HOST)) {
        match host {
            Some(h) => {
                headers.insert(X_FORWARDED_HOST, h.clone());
            }
            None => {
                headers.remove(X_FORWARDED_HOST);
            }
        }
    }
}

/// Appends `1.1 <name>` to `Via` (RFC 9110 §7.6.3).
pub fn append_via(headers: &mut HeaderMap, via: &HeaderValue) {
    headers.append(header::VIA, via.clone());
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
        assert!(is_upgrade_request(&h));
        remove_hop_by_hop(&mut h, true);
        assert_eq!(h.get("upgrade").map(|v| v.as_bytes()), Some(&b"websocket"[..]));
        assert_eq!(h.get("connection").map(|v| v.as_bytes()), Some(&b"upgrade"[..]));
        assert!(!h.contains_key("keep-alive"));
    }

    #[test]
    fn untrusted_forwarded_headers_are_replaced() {
        let peer: IpAddr = [10, 0, 0, 9].into();
        let mut h = map(&[("x-forwarded-for", "1.2.3.4"), ("x-forwarded-proto", "https")]);
        set_forwarded(&mut h, peer, false, None);
        assert_eq!(h.get("x-forwarded-for").map(|v| v.as_bytes()), Some(&b"10.0.0.9"[..]));
        assert_eq!(h.get("x-forwarded-proto").map(|v| v.as_bytes()), Some(&b"http"[..]));
        let mut h = map(&[("x-forwarded-for", "1.2.3.4")]);
        set_forwarded(&mut h, peer, true, None);
        assert_eq!(h.get("x-forwarded-for").map(|v| v.as_bytes()), Some(&b"1.2.3.4, 10.0.0.9"[..]));
    }
}
