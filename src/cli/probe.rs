//! `shardgate probe URL`: one HTTP GET, for health checks in the container
//! image, which has no shell and no curl. Exit 0 when the answer is 2xx,
//! 1 otherwise (with the reason on standard error).

use std::time::Duration;

use http::{StatusCode, Uri};

use super::exit;
use crate::upstream::{connector, ClientSettings};

/// GETs `uri` (plain `http://` only) and returns the status, within
/// `timeout`, with the proxy's own client: its connector resolves names and
/// connects exactly as the proxy does (glibc's resolver), so a probe of a
/// service name also checks name resolution inside the container.
pub async fn get_status(uri: Uri, timeout: Duration) -> Result<StatusCode, String> {
    let settings = ClientSettings { connect_timeout: timeout, pool_idle_timeout: timeout, tls: None };
    crate::upstream::client::get(&connector(&settings), uri, "shardgate-probe", timeout).await
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
