//! The server side of a connection, below the proxy and the admin listener:
//! accepting under a connection limit, TLS, telling HTTP/2 from HTTP/1.1,
//! the proxy's own HTTP/1.1 server, idle and head-read deadlines, the
//! graceful drain, and the socket handed over after an upgrade. Each
//! request is handed to a [`Handler`] (the proxy) and its [`Answer`]
//! written back.
//!
//! ```text
//!  listen::serve ─► accept (limit, refusal) ─► TLS? ─► first bytes: h2 preface?
//!                                                     ├─ yes ─► h2 ─┐
//!                                                     └─ no ──► h1 ─┴─► Handler::handle ─► Answer
//! ```
//!
//! * [`listen`]: the proxy listener's accept loop and connections;
//! * [`accept`]: the connection limit every listener shares;
//! * `h1`: the HTTP/1.1 server: heads, bodies, keep-alive, pipelining,
//!   `100-continue`, upgrades, problem+json for unreadable heads;
//! * `h2`: the HTTP/2 server, on the `h2` crate: a task per stream, the
//!   answer's frames under the client's flow control, GOAWAY on shutdown;
//! * [`idle`]: whether bytes move on a connection, and closing it when they do not;
//! * [`upgrade`]: the client's side of an upgrade, from either server;
//! * [`conn`]: what a connection is to a request, and its listener's limits;
//! * [`drain`]: the "going away" flag;
//! * [`refused`]: what a listener answers on its own.

pub mod accept;
pub mod conn;
mod deadline;
pub mod drain;
mod h1;
mod h2;
pub mod idle;
pub mod listen;
pub mod refused;
pub mod upgrade;

use std::future::Future;

use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderName, HeaderValue, Response};
use http_body_util::{Either, Full};

pub use conn::{ConnInfo, ServerOptions};
pub use drain::Drain;
pub use listen::serve;
pub use refused::Refused;

use crate::http1::rules::RuleFields;
use crate::upstream::{RequestBody, ResponseBody, TakeIn};

/// An answer's body: an upstream's, streamed (its header fields still the
/// bytes they came in), or one made here.
pub type AnswerBody = Either<ResponseBody, Full<Bytes>>;

impl TakeIn for AnswerBody {
    fn take_in(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) {
        if let Either::Left(body) = self.get_mut() {
            std::pin::Pin::new(body).take_in(cx);
        }
    }
}

/// The request id's field: the answer carries the request's, and the
/// upstream leg sends it.
pub const X_REQUEST_ID: HeaderName = crate::http1::write::AddedField::RequestId.name();

/// What a request is answered with.
#[derive(Debug)]
pub struct Answer {
    /// The response.
    pub response: Response<AnswerBody>,
    /// The request's id, which the answer carries as `X-Request-Id`
    /// (replacing an upstream's); `None` for what a listener answers itself.
    pub request_id: Option<HeaderValue>,
    /// Whether it is an upstream's answer, which gets this instance's `Via`
    /// after the upstream's own.
    pub from_upstream: bool,
    /// What header rules made of the answer's fields.
    pub rules: RuleFields,
}

impl Answer {
    /// The response with every field in its map, for a server that sends
    /// maps (HTTP/2, `h2`): the upstream's fields, the header rules' edits,
    /// `via` after them, the request id replacing any the upstream sent.
    pub fn into_response(self, via: &HeaderValue) -> Response<AnswerBody> {
        let Answer { mut response, request_id, from_upstream, rules } = self;
        if let Either::Left(body) = response.body_mut() {
            let fields = std::mem::take(body.fields_mut());
            // Room for the upstream's fields, `Via` and `X-Request-Id`
            // (header rules' additions may still grow it).
            response.headers_mut().reserve(fields.len() + 2);
            fields.move_into(response.headers_mut());
        }
        rules.apply(response.headers_mut());
        if from_upstream {
            response.headers_mut().append(header::VIA, via.clone());
        }
        if let Some(id) = request_id {
            response.headers_mut().insert(X_REQUEST_ID, id);
        }
        response
    }
}

/// What a listener hands each request to: the proxy. The head is borrowed
/// (it stays where the server built it, and every stage reads it in
/// place); the body reads from the connection as it is asked for.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request from the connection `conn` describes. Never
    /// fails: failures are answers.
    fn handle<'a>(
        &'a self,
        head: &'a mut Parts,
        body: RequestBody,
        conn: ConnInfo,
    ) -> impl Future<Output = Answer> + Send + 'a;

    /// The `Via` an upstream's answer gets (after the upstream's; the
    /// upstream leg speaks HTTP/1.1).
    fn via(&self) -> &HeaderValue;

    /// This instance's name, in the listener's own answers.
    fn name(&self) -> &str;
}
