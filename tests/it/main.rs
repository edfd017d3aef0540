//! Integration tests, compiled into one binary: one module per behaviour,
//! the fixtures they share in `support`.

mod support;

mod admin;
mod balance;
mod cli;
mod config;
mod dashboard;
mod differential;
mod dns;
mod docs;
mod drain;
mod etcd;
mod explain;
mod faults;
mod frontdoor;
mod global;
mod grpc;
mod h2_server;
mod h2_streams;
mod h2_upstream;
mod health;
mod hostile;
mod http1;
mod isolation;
mod logs;
mod mesh;
mod metrics;
mod plan;
mod proxy;
mod rehoming;
mod reload;
mod routing;
mod saturation;
mod search;
mod structure;
mod tls;
mod tls_settings;
mod traces;
mod vectors;
