//! The request as it goes upstream, whichever protocol carries it: the
//! HTTP/1.1 exchange ([`super::exchange`]) writes it as a head, the HTTP/2
//! one ([`super::h2`]) as a header map.

use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Method};

use crate::http1;

/// The request as it goes upstream: method, origin-form target, the
/// endpoint's `Host`, the client's header fields (their `Host` is not
/// written), and the fields the proxy adds after them.
#[derive(Debug)]
pub struct Outgoing<'a> {
    /// Method.
    pub method: &'a Method,
    /// Origin-form target (`/path?query`).
    pub target: &'a PathAndQuery,
    /// The endpoint's authority.
    pub host: &'a HeaderValue,
    /// Header fields, hop-by-hop ones removed already.
    pub headers: &'a HeaderMap,
    /// The proxy's own fields, written after `headers`.
    pub added: &'a http1::write::Added,
}
