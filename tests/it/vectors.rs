//! `shardgate decode --json` reports every golden vector input as the
//! `entity-ids` library decodes it (the library's own tests check the
//! vectors' recorded fields; crates/entity-ids/tests/vectors.rs).

use serde_json::Value;
use shardgate::cli::decode::{self, DecodeOptions};
use shardgate::ids::{self, Format, Params};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[test]
fn decode_json_reports_what_the_library_decodes() -> TestResult {
    let dir = format!("{}/crates/entity-ids/tests/data", env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for file in [
        "iuid.jsonl",
        "uuidv7.jsonl",
        "uniqid-shard.jsonl",
        "snowflake.jsonl",
        "sonyflake.jsonl",
        "locality-uuid.jsonl",
    ] {
        for line in std::fs::read_to_string(format!("{dir}/{file}"))?.lines() {
            let v: Value = serde_json::from_str(line)?;
            let input = v["input"].as_str().ok_or("input is not a string")?;
            let opts = DecodeOptions { formats: Vec::new(), json: true, params: Params::default() };
            let mut buf = Vec::new();
            let valid = decode::write_report(input, &opts, &mut buf)?;
            let ours: Value = serde_json::from_slice(&buf)?;
            let decoded: Vec<ids::Decoded> =
                Format::ALL.iter().filter_map(|&f| ids::parse(f, input, &Params::default()).ok()).collect();
            assert_eq!(valid, !decoded.is_empty(), "{input:?}");
            assert_eq!(ours["valid"], Value::Bool(valid), "{input:?}");
            if let Some(first) = decoded.first() {
                assert_eq!(ours["format"], first.format().name(), "{input:?}");
                let mut fields = b"{".to_vec();
                ids::json::write_field_pairs(first, false, &mut fields)?;
                fields.push(b'}');
                let fields: Value = serde_json::from_slice(&fields)?;
                for (key, value) in fields.as_object().ok_or("fields")? {
                    assert_eq!(&ours[key], value, "{input:?}: {key}");
                }
            }
            checked += 1;
        }
    }
    assert!(checked > 300, "only {checked} vectors");
    Ok(())
}
