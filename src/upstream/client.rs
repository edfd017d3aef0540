//! One GET on a connection of its own (opened, used once, closed): what the
//! active health checks send to every endpoint and peer, and what
//! `shardgate probe` sends. The proxy's requests go through the pool
//! ([`super::pool`]) instead. An `h2c://` or `h2://` endpoint is asked over
//! HTTP/2, and with `health.grpc`, `grpc.health.v1.Health/Check` instead.

use std::time::Duration;

use bytes::BytesMut;
use http::{Method, StatusCode, Uri};
use tokio::io::AsyncWriteExt;

use super::connect::Connector;
use super::exchange::{poll_head, HeadError};
use crate::http1::{write, HeadScan};

/// Where a GET goes: the URI, and for an endpoint found by DNS, the name
/// its `Host` and TLS carry.
#[derive(Clone, Debug)]
pub struct Get {
    /// Scheme, authority (an address, for a discovered endpoint), path and query.
    pub uri: Uri,
    /// `Host`, when not the URI's authority.
    pub host: Option<http::HeaderValue>,
    /// The TLS server name, when not the URI's host.
    pub server_name: Option<std::sync::Arc<str>>,
    /// An HTTP/2 endpoint asked `grpc.health.v1.Health/Check` instead.
    pub grpc: bool,
}

impl From<Uri> for Get {
    fn from(uri: Uri) -> Get {
        Get { uri, host: None, server_name: None, grpc: false }
    }
}

/// GETs `to` through `connector` with `user_agent`; the status, or why there
/// is none (e.g. "tcp connect error: Connection refused (os error 111)"),
/// within `timeout`. Only the head is read.
pub async fn get(
    connector: &Connector,
    to: impl Into<Get>,
    user_agent: &'static str,
    timeout: Duration,
) -> Result<StatusCode, String> {
    let to = to.into();
    if crate::config::values::is_h2(to.uri.scheme_str()) {
        return h2_get(connector, &to, user_agent, timeout).await;
    }
    let exchange = async {
        let uri = &to.uri;
        let mut io = connector.connect(uri, to.server_name.as_deref()).await?;
        let target = uri.path_and_query().map_or("/", |p| p.as_str());
        let authority = uri.authority().map_or("", |a| a.as_str());
        let host = to.host.as_ref().map_or(authority.as_bytes(), |h| h.as_bytes());
        let mut head = Vec::with_capacity(128);
        write::request_line(&mut head, &Method::GET, target);
        write::field(&mut head, "host", host);
        write::field(&mut head, "user-agent", user_agent.as_bytes());
        write::field(&mut head, "connection", b"close");
        head.extend_from_slice(b"\r\n");
        io.write_all(&head).await.map_err(|e| format!("write error: {e}"))?;
        io.flush().await.map_err(|e| format!("write error: {e}"))?;
        let (mut buf, mut scan) = (BytesMut::with_capacity(4096), HeadScan::default());
        match std::future::poll_fn(|cx| poll_head(cx, &mut io, &mut buf, &Method::GET, &mut scan)).await {
            Ok(head) => Ok(head.status),
            Err(HeadError::Io(e)) => Err(e),
            Err(HeadError::Bad(e)) => Err(format!("invalid response: {e}")),
        }
    };
    within(timeout, exchange).await
}

/// [`get`] of an HTTP/2 endpoint (`h2c://`, `h2://`): the GET over
/// HTTP/2, or with `to.grpc`, `grpc.health.v1.Health/Check` of the whole
/// server (an empty request), answered `200` for `SERVING` (`status`, field
/// 1, is 1) with `grpc-status: 0` and `503` for any other answer.
async fn h2_get(
    connector: &Connector,
    to: &Get,
    user_agent: &'static str,
    timeout: Duration,
) -> Result<StatusCode, String> {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let exchange = async {
        let io = connector.connect(&to.uri, to.server_name.as_deref()).await?;
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .map_err(|e| format!("http2 handshake error: {e}"))?;
        let conn = tokio::spawn(conn);
        let authority = to.host.as_ref().and_then(|h| h.to_str().ok()).or(to.uri.authority().map(|a| a.as_str()));
        let uri = |target: &str| super::h2::uri(&to.uri, authority.unwrap_or_default(), target);
        let req = if to.grpc {
            http::Request::post(uri("/grpc.health.v1.Health/Check"))
                .header(http::header::CONTENT_TYPE, "application/grpc")
                .header(http::header::TE, "trailers")
                .body(Full::new(bytes::Bytes::from_static(&[0, 0, 0, 0, 0])))
        } else {
            let target = to.uri.path_and_query().map_or("/", |p| p.as_str());
            http::Request::get(uri(target)).body(Full::new(bytes::Bytes::new()))
        };
        let mut req = req.map_err(|e| e.to_string())?;
        *req.version_mut() = http::Version::HTTP_2;
        req.headers_mut().insert(http::header::USER_AGENT, http::HeaderValue::from_static(user_agent));
        let resp = send.send_request(req).await.map_err(|e| format!("health check failed: {e}"))?;
        let status = resp.status();
        if !to.grpc {
            conn.abort();
            return Ok(status);
        }
        let answer = resp.into_body().collect().await.map_err(|e| format!("health check failed: {e}"))?;
        conn.abort();
        let ok = answer.trailers().and_then(|t| t.get("grpc-status")).is_some_and(|s| s == "0");
        // One message: a 5-byte prefix, then `status` as field 1 (a varint).
        let serving = answer.to_bytes().get(5..) == Some(&[0x08, 0x01][..]);
        Ok(if status.is_success() && ok && serving { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE })
    };
    within(timeout, exchange).await
}

/// A request of the control plane (an etcd gateway, a running instance's
/// admin listener) on a connection of its own, over HTTP/1.1 with hyper's
/// client: the answer's head within `timeout`, its body streaming (a
/// watch's answer never ends). `headers`: extra fields, `body`: sent whole.
pub async fn open(
    connector: &Connector,
    method: Method,
    uri: &Uri,
    headers: &[(&str, &str)],
    body: bytes::Bytes,
    timeout: Duration,
) -> Result<http::Response<hyper::body::Incoming>, String> {
    use hyper_util::rt::TokioIo;
    let exchange = async {
        let io = connector.connect(uri, None).await?;
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(|e| format!("handshake: {e}"))?;
        tokio::spawn(conn);
        let target = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut req = http::Request::builder()
            .method(method)
            .uri(target)
            .header(http::header::HOST, uri.authority().map_or("", |a| a.as_str()))
            .header(http::header::USER_AGENT, "shardgate");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req.body(http_body_util::Full::new(body)).map_err(|e| e.to_string())?;
        send.send_request(req).await.map_err(|e| format!("request failed: {e}"))
    };
    within(timeout, exchange).await
}

/// [`open`], then the whole body (within `timeout` in all).
pub async fn fetch(
    connector: &Connector,
    method: Method,
    uri: &Uri,
    headers: &[(&str, &str)],
    body: bytes::Bytes,
    timeout: Duration,
) -> Result<(StatusCode, bytes::Bytes), String> {
    use http_body_util::BodyExt;
    let whole = async {
        let resp = open(connector, method, uri, headers, body, timeout).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await.map_err(|e| format!("reading the answer: {e}"))?;
        Ok((status, body.to_bytes()))
    };
    within(timeout, whole).await
}

/// `exchange`'s result, or "no answer within …" when it takes longer than `timeout`.
async fn within<T>(
    timeout: Duration,
    exchange: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}
