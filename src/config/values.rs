//! Values with a syntax of their own, each parsed by its own `Deserialize`
//! so a bad one is reported at its exact path: shard ranges, key-range
//! starts, times, upstream URLs and networks (durations: [`super::duration`]).

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::show;

/// Inclusive ranges written as `N`, `"A-B"` or a list of those.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeList(pub Vec<(u64, u64)>);

/// Parses `N` or `A-B` (decimal, no spaces, `A <= B`).
pub fn parse_range(text: &str) -> Result<(u64, u64), String> {
    let num = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (a, b) = match text.split_once('-') {
        Some((a, b)) => (num(a), num(b)),
        None => {
            let n = num(text);
            (n, n)
        }
    };
    match (a, b) {
        (Some(a), Some(b)) if a <= b => Ok((a, b)),
        (Some(_), Some(_)) => Err(format!("invalid range {}: start is after end", show(text))),
        _ => Err(format!("invalid range {}: expected N or A-B with decimal numbers", show(text))),
    }
}

impl<'de> Deserialize<'de> for RangeList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RangeList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a range such as \"0-7\", a number, or a list of those")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RangeList, E> {
                Ok(RangeList(vec![(v, v)]))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RangeList, E> {
                parse_range(v).map(|r| RangeList(vec![r])).map_err(E::custom)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<RangeList, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<RangeList>()? {
                    out.extend(item.0);
                }
                Ok(RangeList(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for RangeList {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let texts: Vec<String> =
            self.0.iter().map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
        texts.serialize(s)
    }
}

/// A key-hash split point written as exactly 16 hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KeyStart(pub u64);

impl<'de> Deserialize<'de> for KeyStart {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = KeyStart;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quoted string of 16 hex digits")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<KeyStart, E> {
                Err(E::custom(format!("key range start {v} is a number; write it as a quoted string of 16 hex digits")))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<KeyStart, E> {
                Err(E::custom(format!("key range start {v} is a number; write it as a quoted string of 16 hex digits")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<KeyStart, E> {
                if v.len() != 16 || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(E::custom(format!("invalid key range start {}: expected 16 hex digits", show(v))));
                }
                u64::from_str_radix(v, 16).map(KeyStart).map_err(|_| E::custom("invalid key range start"))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for KeyStart {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{:016x}", self.0))
    }
}

/// A point in time: RFC 3339 (`2024-01-01T00:00:00Z`, offsets allowed) or Unix milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimeSpec(pub u64);

impl<'de> Deserialize<'de> for TimeSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = TimeSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 time such as \"2024-01-01T00:00:00Z\" or Unix milliseconds")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<TimeSpec, E> {
                Ok(TimeSpec(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<TimeSpec, E> {
                crate::ids::clock::parse_rfc3339(v).map(TimeSpec).ok_or_else(|| {
                    E::custom(format!("invalid time {}: expected RFC 3339 such as 2024-01-01T00:00:00Z", show(v)))
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for TimeSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

/// An upstream or peer endpoint: its URL, `http(s)://host:port` (no
/// path, query or userinfo), with what every request to it needs made
/// once here: the `Host` it carries and the key of its kept connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    /// The URL.
    pub uri: http::Uri,
    /// `Host` for requests to it: the host, and the port unless it is the
    /// scheme's default (what an HTTP client would send).
    pub host: http::HeaderValue,
    /// The same as `host`, as an HTTP/2 request's `:authority` takes it
    /// (parsed once here, not for every request).
    pub authority: http::uri::Authority,
    /// `scheme://authority` (with ` name` for an address of a name): the
    /// key its kept connections are listed under (shared: an HTTP/2 stream
    /// names its connection list by it). Two names on one address keep
    /// connections apart: TLS asked each for its own name.
    pub pool_key: Arc<str>,
    /// The name it was found by, when the URL holds one of its addresses
    /// (DNS discovery): TLS asks for this name, not the address.
    pub server_name: Option<std::sync::Arc<str>>,
}

impl Upstream {
    /// The host as a resolver or TLS takes it (`[::1]` is `::1`).
    pub fn bare_host(&self) -> &str {
        self.uri.host().unwrap_or("").trim_start_matches('[').trim_end_matches(']')
    }

    /// How reports name it: its URL, then the name it was found by, if any.
    pub fn shown(&self) -> String {
        match &self.server_name {
            Some(name) => format!("{} ({name})", self.uri),
            None => self.uri.to_string(),
        }
    }

    /// Whether it names its host, rather than giving an address.
    pub fn is_named(&self) -> bool {
        self.server_name.is_none() && self.bare_host().parse::<IpAddr>().is_err()
    }

    /// The endpoint at `ip`, one of the addresses its name resolved to: the
    /// same `Host`, TLS by the name, connections of its own.
    pub fn at(&self, ip: IpAddr) -> Option<Upstream> {
        let scheme = self.uri.scheme_str().unwrap_or("http");
        let port = self.uri.port_u16().unwrap_or(default_port(scheme));
        let authority = match ip {
            IpAddr::V4(v4) => format!("{v4}:{port}"),
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
        };
        let uri: http::Uri = format!("{scheme}://{authority}").parse().ok()?;
        let pool_key = Arc::from(format!("{} {}", base(&uri), self.bare_host()));
        Some(Upstream {
            uri,
            host: self.host.clone(),
            authority: self.authority.clone(),
            pool_key,
            server_name: Some(self.bare_host().into()),
        })
    }

    /// Parses an upstream URL.
    pub fn parse(text: &str) -> Result<Upstream, String> {
        let uri = parse_upstream_url(text)?;
        let host = match (uri.scheme_str(), uri.authority()) {
            (Some(scheme), Some(auth)) => match auth.port_u16() {
                Some(port) if port != default_port(scheme) => format!("{}:{port}", auth.host()),
                _ => auth.host().to_string(),
            },
            _ => return Err(format!("invalid upstream url {}: missing host", show(text))),
        };
        let unsendable = || format!("invalid upstream url {}: its host cannot be sent as Host", show(text));
        let authority = http::uri::Authority::try_from(host.as_str()).map_err(|_| unsendable())?;
        let host = http::HeaderValue::from_str(&host).map_err(|_| unsendable())?;
        let pool_key = Arc::from(base(&uri));
        Ok(Upstream { uri, host, authority, pool_key, server_name: None })
    }
}

/// The port a scheme's URL means without one.
fn default_port(scheme: &str) -> u16 {
    if matches!(scheme, "https" | "h2") {
        443
    } else {
        80
    }
}

/// Whether endpoints named with `scheme` speak HTTP/2: `h2c://` (prior
/// knowledge) and `h2://` (TLS, ALPN `h2`).
pub fn is_h2(scheme: Option<&str>) -> bool {
    matches!(scheme, Some("h2c" | "h2"))
}

/// `scheme://authority` of an upstream URL.
fn base(uri: &http::Uri) -> String {
    let scheme = uri.scheme_str().unwrap_or("http");
    let auth = uri.authority().map(|a| a.as_str()).unwrap_or("");
    format!("{scheme}://{auth}")
}

/// Parses an upstream URL's syntax.
fn parse_upstream_url(text: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = text.parse().map_err(|_| format!("invalid upstream url {}: not a url", show(text)))?;
    match uri.scheme_str() {
        Some("http" | "https" | "h2c" | "h2") => {}
        _ => return Err(format!("invalid upstream url {}: scheme must be http, https, h2c or h2", show(text))),
    }
    let Some(auth) = uri.authority() else {
        return Err(format!("invalid upstream url {}: missing host", show(text)));
    };
    if auth.as_str().contains('@') {
        return Err(format!("invalid upstream url {}: credentials are not allowed", show(text)));
    }
    if auth.host().is_empty() {
        return Err(format!("invalid upstream url {}: missing host", show(text)));
    }
    if auth.port_u16().is_none() {
        return Err(format!("invalid upstream url {}: missing port", show(text)));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!("invalid upstream url {}: path and query are not allowed", show(text)));
    }
    Ok(uri)
}

impl<'de> Deserialize<'de> for Upstream {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Upstream::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Upstream {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.pool_key)
    }
}

/// An IP network such as `10.0.0.0/8` or `::1/128` (a bare address means a single host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    /// Network address.
    pub addr: IpAddr,
    /// Prefix length.
    pub prefix: u8,
}

impl Cidr {
    /// Whether `ip` is inside this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(text: &str) -> Result<Cidr, String> {
        let bad = || format!("invalid network {}: expected an address or address/prefix", show(text));
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) if !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u8>().map_err(|_| bad())?
            }
            Some(_) => return Err(bad()),
        };
        if prefix > max {
            return Err(format!("invalid network {}: prefix longer than {max}", show(text)));
        }
        Ok(Cidr { addr, prefix })
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for Cidr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{}/{}", self.addr, self.prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_header_leaves_out_the_default_port() -> Result<(), String> {
        for (uri, host) in [
            ("http://a.example:80", "a.example"),
            ("https://a.example:443", "a.example"),
            ("http://a.example:443", "a.example:443"),
            ("http://127.0.0.1:8080", "127.0.0.1:8080"),
            ("https://[::1]:8443", "[::1]:8443"),
        ] {
            let url = Upstream::parse(uri)?;
            assert_eq!(url.host, http::HeaderValue::from_static(host), "{uri}");
            assert_eq!(url.authority.as_str(), host, "{uri}: HTTP/2's :authority is the Host");
            assert_eq!(&*url.pool_key, uri, "{uri}");
        }
        Ok(())
    }

    #[test]
    fn an_address_found_by_name_keeps_the_names_host() -> Result<(), String> {
        let named = Upstream::parse("h2://grpc.example:50051")?;
        let at = named.at("10.0.0.7".parse().map_err(|e| format!("{e}"))?).ok_or("no endpoint at the address")?;
        assert_eq!(at.uri.authority().map(|a| a.as_str()), Some("10.0.0.7:50051"));
        let name = "grpc.example:50051";
        assert_eq!((at.host.to_str().ok(), at.authority.as_str()), (Some(name), name));
        Ok(())
    }
}
