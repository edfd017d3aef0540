//! One GET on a connection of its own (opened, used once, closed): what the
//! active health checks send to every endpoint and peer, and what
//! `shardgate probe` sends. The proxy's requests go through the pool
//! ([`super::pool`]) instead.

use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, StatusCode, Uri};
use http_body_util::Empty;
use hyper::client::conn::http1;
use tower_service::Service;

use super::connect::Connector;

/// GETs `uri` through `connector` with `user_agent`; the status, or why there
/// is none (the whole cause chain, e.g. "tcp connect error: Connection
/// refused"), within `timeout`.
pub async fn get(
    connector: &Connector,
    uri: Uri,
    user_agent: &'static str,
    timeout: Duration,
) -> Result<StatusCode, String> {
    let exchange = async {
        let mut connector = connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx)).await.map_err(|e| chain(e.as_ref()))?;
        let io = connector.call(uri.clone()).await.map_err(|e| chain(e.as_ref()))?;
        let (mut sender, conn) = http1::handshake(io).await.map_err(|e| chain(&e))?;
        let target = uri.path_and_query().map_or("/", |p| p.as_str());
        let host = uri.authority().map_or("", |a| a.as_str());
        let req = Request::get(target)
            .header(header::HOST, host)
            .header(header::USER_AGENT, user_agent)
            .header(header::CONNECTION, "close")
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        // The connection is driven here, beside the request: it ends with it.
        let resp = sender.send_request(req);
        tokio::pin!(resp, conn);
        let resp = tokio::select! {
            resp = &mut resp => resp,
            ended = &mut conn => match ended {
                Ok(()) => resp.await,
                Err(e) => return Err(chain(&e)),
            },
        };
        resp.map(|r| r.status()).map_err(|e| chain(&e))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}

/// An error and its sources, joined: "client error (Connect): tcp connect error: …".
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut message = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        message.push_str(": ");
        message.push_str(&c.to_string());
        cause = c.source();
    }
    message
}
