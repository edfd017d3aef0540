//! Integration tests, compiled into one binary.

mod cli;
mod ids_props;
mod vectors;
