//! One balancing decision, this crate's against tower's: `least_request`
//! (two endpoints picked at random, the one with fewer requests waiting
//! taken, the request counted while it waits) with `upstream::balance`, and
//! the same with tower's `p2c::Balance` over `PendingRequests`-measured
//! services, each polled ready and called as tower requires. The services
//! answer at once, so what is counted is the balancing and what it costs a
//! request to go through it.
//!
//! Run under callgrind, the difference of two request counts is the cost of
//! one request (`benches/balance_instructions.sh`):
//! `cargo bench --bench balance -- ours|tower REQUESTS`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::convert::Infallible;
use std::future::{poll_fn, ready};
use std::hint::black_box;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use shardgate::config::model::Balance;
use shardgate::routing::Upstream;
use shardgate::upstream::balance::{pick, Candidates, Waiting};
use shardgate::upstream::health::Health;
use tower::balance::p2c::Balance as P2c;
use tower::discover::ServiceList;
use tower::load::{CompleteOnResponse, PendingRequests};
use tower::service_fn;
use tower::Service;

const ENDPOINTS: usize = 3;

fn ours(requests: u64) {
    let endpoints: Vec<Upstream> =
        (0..ENDPOINTS).map(|i| Upstream::parse(&format!("http://10.0.0.{i}:8080")).unwrap()).collect();
    let loads: Vec<Arc<AtomicUsize>> = (0..ENDPOINTS).map(|_| Arc::default()).collect();
    let (cursor, health) = (AtomicUsize::new(0), Health::default());
    let (weights, balance, turn) = (&[], Balance::LeastRequest, &cursor);
    let c = Candidates { endpoints: &endpoints, weights, loads: &loads, balance, turn };
    for _ in 0..requests {
        let (i, endpoint, _) = pick(c, &[], &health).unwrap();
        let waiting = Waiting::on(Some(&loads[i]));
        black_box(endpoint);
        drop(waiting);
    }
}

async fn tower(requests: u64) {
    let services = (0..ENDPOINTS).map(|i| {
        let answer = service_fn(move |_: ()| ready(Ok::<usize, Infallible>(i)));
        PendingRequests::new(answer, CompleteOnResponse::default())
    });
    let mut balance = P2c::new(ServiceList::new(services.collect::<Vec<_>>()));
    for _ in 0..requests {
        poll_fn(|cx| balance.poll_ready(cx)).await.unwrap();
        black_box(balance.call(()).await.unwrap());
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let requests: u64 = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(1_000_000);
    match args.first().map(String::as_str) {
        Some("tower") => {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(tower(requests));
        }
        Some("ours") => ours(requests),
        _ => eprintln!("usage: balance ours|tower [REQUESTS]"),
    }
}
