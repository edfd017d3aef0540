//! `shardgate probe URL`: one HTTP GET, for health checks in the container
//! image, which has no shell and no curl. Exit 0 when the answer is 2xx,
//! 1 otherwise (with the reason on standard error).
//!
//! It resolves host names and connects exactly as the proxy does (hyper's
//! `HttpConnector`, glibc's resolver), so a probe of a service name also
//! checks name resolution inside the container.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, Uri};
use http_body_util::Empty;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::exit;

/// GETs `uri` (plain `http://` only) and returns the status, within `timeout`.
pub async fn get_status(uri: Uri, timeout: Duration) -> Result<StatusCode, String> {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(timeout));
    let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let req = Request::get(uri).header(http::header::USER_AGENT, "shardgate-probe").body(Empty::new());
    let req = req.map_err(|e| e.to_string())?;
    match tokio::time::timeout(timeout, client.request(req)).await {
        Ok(Ok(resp)) => Ok(resp.status()),
        Ok(Err(e)) => {
            // The whole chain: "client error (Connect): tcp connect error: Connection refused …".
            let mut message = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                message.push_str(": ");
                message.push_str(&c.to_string());
                cause = c.source();
            }
            Err(message)
        }
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}

/// `shardgate probe [--timeout D] URL`: returns the process exit code.
pub fn run(url: &str, timeout: Duration) -> i32 {
    let uri: Uri = match url.parse() {
        Ok(u) => u,
        Err(e) => {
            eprintln!("shardgate probe: not a URL: {url:?}: {e}");
            return exit::USAGE;
        }
    };
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        eprintln!("shardgate probe: give an http://host[:port]/path URL, not {url:?}");
        return exit::USAGE;
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("shardgate probe: {e}");
            return exit::FAILURE;
        }
    };
    match rt.block_on(get_status(uri, timeout)) {
        Ok(status) if status.is_success() => exit::OK,
        Ok(status) => {
            eprintln!("shardgate probe: {url}: {status}");
            exit::FAILURE
        }
        Err(e) => {
            eprintln!("shardgate probe: {url}: {e}");
            exit::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    #[tokio::test]
    async fn answers_the_status_of_a_live_server() -> TestResult {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(crate::cli::backend::serve(listener, "eu".into(), async move {
            let _ = stop_rx.await;
        }));
        let uri: Uri = format!("http://localhost:{}/healthz", addr.port()).parse()?;
        let status = get_status(uri, Duration::from_secs(5)).await?;
        assert_eq!(status, StatusCode::OK);
        let _ = stop_tx.send(());
        server.await??;
        Ok(())
    }

    #[tokio::test]
    async fn a_closed_port_is_an_error_naming_the_cause() -> TestResult {
        let addr = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
        let uri: Uri = format!("http://{addr}/ready").parse()?;
        let Err(e) = get_status(uri, Duration::from_secs(5)).await else {
            return Err("a closed port answered".into());
        };
        assert!(e.contains("tcp connect error"), "{e}");
        Ok(())
    }

    #[test]
    fn only_plain_http_urls() {
        assert_eq!(run("not a url", Duration::from_secs(1)), exit::USAGE);
        assert_eq!(run("https://127.0.0.1:1/", Duration::from_secs(1)), exit::USAGE);
        assert_eq!(run("/ready", Duration::from_secs(1)), exit::USAGE);
    }
}
