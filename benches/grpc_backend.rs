//! A gRPC backend for the gRPC load comparison (`benches/load/grpc.py`):
//! HTTP/2 with prior knowledge on each port given, every call answered
//! with one message (the port's region name) and `grpc-status: 0` in
//! trailers, after the whole request was read. What the proxies in front
//! of it do is what is measured; this is as cheap as hyper makes it.
//!
//! `cargo bench --bench grpc_backend -- REGION=PORT...`
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};

type Answer = StreamBody<frames::Frames>;

/// Two frames, as a gRPC answer has them: one message, then the trailers.
mod frames {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    pub(crate) struct Frames(pub(crate) Vec<Frame<Bytes>>);

    impl futures_core::Stream for Frames {
        type Item = Result<Frame<Bytes>, Infallible>;
        fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            Poll::Ready(if self.0.is_empty() { None } else { Some(Ok(self.0.remove(0))) })
        }
    }
}

async fn answer(req: Request<Incoming>, region: &'static str) -> Result<Response<Answer>, Infallible> {
    let _ = req.into_body().collect().await;
    let mut message = vec![0u8];
    message.extend_from_slice(&(region.len() as u32).to_be_bytes());
    message.extend_from_slice(region.as_bytes());
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let frames = frames::Frames(vec![Frame::data(Bytes::from(message)), Frame::trailers(trailers)]);
    let mut resp = Response::new(StreamBody::new(frames));
    resp.headers_mut().insert("content-type", HeaderValue::from_static("application/grpc"));
    Ok(resp)
}

fn main() {
    let args: Vec<(&'static str, u16)> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .filter_map(|a| {
            let (region, port) = a.split_once('=')?;
            Some((&*Box::leak(region.to_string().into_boxed_str()), port.parse().ok()?))
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let mut serving = Vec::new();
        for (region, port) in args {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
            serving.push(tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else { continue };
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(async move {
                        let svc = service_fn(move |req| answer(req, region));
                        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
            }));
        }
        for s in serving {
            let _ = s.await;
        }
    });
}
