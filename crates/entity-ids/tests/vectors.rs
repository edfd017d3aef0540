//! Every line of every golden vector file (tests/data/, copied from the
//! reference implementations' runs) must decode to exactly its recorded
//! fields, or be rejected with its recorded reason. The comparison goes
//! through the crate's JSON writer, so it checks that output too.

use entity_ids::json;
use entity_ids::{
    locality, Format, LocalityMinter, LocalityMode, LocalityUuid, ManualClock, NodeIdentity, Params, SonyflakeFlavor,
};
use serde_json::{Map, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn lines(file: &str) -> Result<Vec<Map<String, Value>>, Box<dyn std::error::Error>> {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    for line in text.lines() {
        match serde_json::from_str(line)? {
            Value::Object(m) => out.push(m),
            other => return Err(format!("not an object: {other}").into()),
        }
    }
    assert!(out.len() > 10, "{file}: too few vectors");
    Ok(out)
}

/// Decodes with the crate's JSON writer and parses the line back:
/// `{"input":…,"valid":true,<fields>}` or `{"input":…,"valid":false,"reason":…}`.
fn our_json(input: &str, format: Format, params: Params) -> Result<Map<String, Value>, Box<dyn std::error::Error>> {
    let mut buf = b"{\"input\":".to_vec();
    json::write_str(input, &mut buf)?;
    match entity_ids::parse(format, input, &params) {
        Ok(d) => {
            buf.extend_from_slice(b",\"valid\":true,\"canonical\":\"");
            json::write_canonical(&d, &mut buf)?;
            buf.push(b'"');
            json::write_field_pairs(&d, true, &mut buf)?;
        }
        Err(e) => {
            buf.extend_from_slice(b",\"valid\":false,\"reason\":");
            json::write_str(e.reason.code(), &mut buf)?;
        }
    }
    buf.push(b'}');
    match serde_json::from_slice(&buf)? {
        Value::Object(m) => Ok(m),
        other => Err(format!("not an object: {other}").into()),
    }
}

/// Checks one vector line; `required` are fields that must be compared for valid lines.
fn check(v: &Map<String, Value>, format: Format, params: Params, routable: bool, required: &[&str]) -> TestResult {
    let input = v["input"].as_str().ok_or("input is not a string")?;
    let ours = our_json(input, format, params)?;
    assert_eq!(ours["input"].as_str(), Some(input), "input echoed");
    if routable {
        assert_eq!(ours["valid"], Value::Bool(true), "{input:?} should be valid: {ours:?}");
        for key in required {
            assert!(v.contains_key(*key) && ours.contains_key(*key), "{input:?}: field {key} missing");
        }
        for (key, expected) in v {
            if key == "input" || key == "valid" {
                continue;
            }
            if let Some(got) = ours.get(key) {
                assert_eq!(got, expected, "{input:?}: field {key}");
            }
        }
    } else {
        assert_eq!(ours["valid"], Value::Bool(false), "{input:?} should be rejected: {ours:?}");
        if let Some(reason) = v.get("reason") {
            assert_eq!(ours.get("reason"), Some(reason), "{input:?}: reason");
        }
    }
    Ok(())
}

fn is_valid(v: &Map<String, Value>) -> bool {
    v.get("valid") == Some(&Value::Bool(true))
}

#[test]
fn iuid_vectors() -> TestResult {
    let req = ["canonical", "unix_ts_ms", "ver1", "country", "service_entity", "rand", "timestamp_iso"];
    for v in lines("iuid.jsonl")? {
        check(&v, Format::Iuid, Params::default(), is_valid(&v), &req)?;
    }
    Ok(())
}

#[test]
fn uuidv7_vectors() -> TestResult {
    let req = ["canonical", "unix_ts_ms", "rand_a", "rand_b", "timestamp_iso"];
    for v in lines("uuidv7.jsonl")? {
        check(&v, Format::Uuidv7, Params::default(), is_valid(&v), &req)?;
    }
    Ok(())
}

#[test]
fn uniqid_vectors_strict() -> TestResult {
    let req = ["shard", "random_prefix", "unix_seconds", "microseconds"];
    for v in lines("uniqid-shard.jsonl")? {
        let total = v["total_shards"].as_u64().and_then(|n| u32::try_from(n).ok()).ok_or("total_shards")?;
        let params = Params { uniqid_total_shards: Some(total), ..Params::default() };
        check(&v, Format::Uniqid, params, is_valid(&v), &req)?;
    }
    Ok(())
}

#[test]
fn uniqid_lenient_mode_routes_on_the_prefix() -> TestResult {
    // Without the shard count, rules 5-6 are off: re-sharded ids still route.
    for v in lines("uniqid-shard.jsonl")? {
        let reason = v.get("reason").and_then(Value::as_str);
        if matches!(reason, Some("shard_out_of_range" | "shard_prefix_mismatch")) {
            let input = v["input"].as_str().ok_or("input")?;
            let ours = our_json(input, Format::Uniqid, Params::default())?;
            assert_eq!(ours["valid"], Value::Bool(true), "{input}");
            assert_eq!(ours["shard"], v["shard"], "{input}");
        }
    }
    Ok(())
}

#[test]
fn snowflake_vectors() -> TestResult {
    let req = ["id", "unix_ts_ms", "datacenter_id", "worker_id", "sequence", "timestamp_iso"];
    for v in lines("snowflake.jsonl")? {
        check(&v, Format::Snowflake, Params::default(), is_valid(&v), &req)?;
    }
    Ok(())
}

#[test]
fn sonyflake_vectors() -> TestResult {
    let req = ["id", "time_units_10ms", "sequence", "machine_id", "unix_ts_ms_floor", "timestamp_iso"];
    for v in lines("sonyflake.jsonl")? {
        let flavor = match v.get("flavor").and_then(Value::as_str) {
            Some("v2") => SonyflakeFlavor::V2,
            _ => SonyflakeFlavor::V1,
        };
        let params = Params { sonyflake: flavor, ..Params::default() };
        check(&v, Format::Sonyflake, params, is_valid(&v), &req)?;
    }
    Ok(())
}

#[test]
fn locality_vectors_parse() -> TestResult {
    let req = ["counter_field_hex", "pid", "mac_fragment_hex", "timestamp_ms", "timestamp_iso"];
    let mut routable_count = 0;
    for v in lines("locality-uuid.jsonl")? {
        // Routable = Java isValidUUID and version b (vectors README).
        let routable = is_valid(&v) && v.get("is_vb") == Some(&Value::Bool(true));
        routable_count += usize::from(routable);
        check(&v, Format::Locality, Params::default(), routable, &req)?;
    }
    assert!(routable_count >= 70);
    Ok(())
}

fn u64_of(v: &Map<String, Value>, key: &str) -> Result<u64, String> {
    v.get(key).and_then(Value::as_u64).ok_or_else(|| format!("{key} missing"))
}

#[test]
fn locality_minting_reproduces_the_libraries_byte_for_byte() -> TestResult {
    let mut reproduced = 0;
    for v in lines("locality-uuid.jsonl")? {
        if v.get("kind").and_then(Value::as_str) != Some("generated") {
            continue;
        }
        let input = v["input"].as_str().ok_or("input")?;
        let counter = u32::try_from(u64_of(&v, "counter_internal")?)?;
        let mac = u64::from_str_radix(v["machine_mac_hex"].as_str().ok_or("mac")?, 16)?;
        let node = NodeIdentity { pid: u16::try_from(u64_of(&v, "pid")?)?, mac_fragment: (mac & 0x0fff_ffff) as u32 };
        let clock = ManualClock::from_millis(u64_of(&v, "timestamp_ms")?);
        let java = v["implementation"] == "java";
        let minter = LocalityMinter::new(&clock, node, 0).java_compat(java);
        if v["mode"] == "sequential" {
            minter.set_mode(LocalityMode::Sequential);
            minter.set_counter(counter.wrapping_sub(1));
        } else {
            minter.set_counter(counter.wrapping_sub(locality::INCREMENT));
        }
        assert_eq!(minter.mint().to_string(), input, "run {} counter {counter:#x}", v["run"]);
        // and the id parses back to what was minted
        assert_eq!(LocalityUuid::parse(input).map(|id| id.pid()), Ok(node.pid));
        reproduced += 1;
    }
    assert_eq!(reproduced, 70);
    Ok(())
}

#[test]
fn locality_sequential_seeds_match() -> TestResult {
    let mut seen = 0;
    for v in lines("locality-uuid.jsonl")? {
        if let Some(window) = v.get("sequential_seed_string").and_then(Value::as_str) {
            let seed = u64_of(&v, "sequential_seed")?;
            assert_eq!(u64::from(locality::sequential_seed_from_window(window.as_bytes())), seed, "{window}");
            seen += 1;
        }
    }
    assert!(seen >= 20);
    Ok(())
}
