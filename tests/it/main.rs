//! Integration tests, compiled into one binary.

mod admin;
mod cli;
mod config;
mod dashboard;
mod differential;
mod docs;
mod vectors;

#[path = "../support/mod.rs"]
mod support;

mod faults;
mod global;
mod health;
mod hostile;
mod http1;
mod isolation;
mod mesh;
mod ops;
mod proxy;
mod reload;
mod routing;
mod saturation;
mod search;
mod structure;
mod tls;
mod traces;
