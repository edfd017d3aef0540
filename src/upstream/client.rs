//! One GET on a connection of its own (opened, used once, closed): what the
//! active health checks send to every endpoint and peer, and what
//! `shardgate probe` sends. The proxy's requests go through the pool
//! ([`super::pool`]) instead.

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
}

impl From<Uri> for Get {
    fn from(uri: Uri) -> Get {
        Get { uri, host: None, server_name: None }
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
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}
