//! gRPC calls: what the proxy answers a gRPC client itself is a gRPC
//! status in a Trailers-Only answer, never an HTTP error page it cannot
//! read. The calls are made over HTTP/2 with prior knowledge (h2c), as
//! gRPC clients do in plain text.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::support::{self, iuid, proxy, table, three_backends, BoxError, TestResult};

/// A unary call's head: the path, `application/grpc`, a 5-byte empty message.
async fn call(url: &str) -> Result<Response<Incoming>, BoxError> {
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Full<Bytes>>();
    let req = Request::post(url)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))?;
    Ok(client.request(req).await?)
}

fn field<'r>(resp: &'r Response<Incoming>, name: &str) -> Option<&'r str> {
    resp.headers().get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn the_proxys_own_failures_are_grpc_statuses_to_a_grpc_client() -> TestResult {
    // kz's backend is an address nothing listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let [eu, _kz, us] = three_backends().await?;
    let p = proxy(&table(eu.addr, dead, us.addr, "")).await?;
    let cases = [
        ("/v1/orders/not-an-id", "3", "bad_length"),
        (&format!("/v1/orders/{}", iuid(7)) as &str, "14", "upstream_connect_failed"),
        ("/no/such/route", "12", "no_route"),
    ];
    for (path, status, reason) in cases {
        let resp = call(&p.url(path)).await?;
        assert_eq!(resp.version(), http::Version::HTTP_2);
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(field(&resp, "content-type"), Some("application/grpc"));
        assert_eq!(field(&resp, "grpc-status"), Some(status), "{path}");
        let message = field(&resp, "grpc-message").unwrap_or_default().to_string();
        assert!(message.starts_with(&format!("{reason}: ")), "{path}: {message}");
        assert!(field(&resp, "proxy-status").is_some_and(|s| s.contains(reason)), "{path}");
        let body = resp.into_body().collect().await?.to_bytes();
        assert!(body.is_empty(), "{path}: a Trailers-Only answer has no body");
    }
    // The same failure to a client that is not gRPC is problem+json, and so
    // is one over HTTP/1.1, which never carries gRPC.
    let plain = support::get(&p.url("/v1/orders/not-an-id")).await?;
    assert_eq!(plain.status, 400);
    assert_eq!(plain.header("content-type"), Some("application/problem+json"));
    let req = Request::post(p.url("/v1/orders/not-an-id"))
        .header("content-type", "application/grpc")
        .body(Full::new(Bytes::new()))?;
    let h1 = support::send(req).await?;
    assert_eq!(h1.status, 400);
    assert_eq!(h1.header("content-type"), Some("application/problem+json"));
    Ok(())
}
