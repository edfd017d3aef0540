//! Integration tests, compiled into one binary.

mod vectors;
