//! Config loader fuzz target: no input may make `config::load_str` panic or
//! hang (deep nesting, aliases and oversized documents included). Valid
//! tables must also compile and answer a route lookup.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardgate::config;
use shardgate::routing::Table;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match config::load_str(text, "fuzz.yaml") {
        Ok(cfg) => {
            let table = Table::compile(&cfg);
            let _ = table.match_route(&http::Method::GET, "/v1/orders/x");
            let _ = table.summary();
        }
        Err(errors) => {
            // Every problem has a position and renders on one line.
            for e in &errors.errors {
                assert!(e.line >= 1 && e.col >= 1);
            }
            let _ = errors.to_string();
        }
    }
});
