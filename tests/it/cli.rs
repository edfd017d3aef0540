//! The `decode` and `mint` commands, run as a user runs them: the built
//! binary, its exit code, its standard output and standard error.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{Map, Value};
use shardgate::ids::{Iuid, LocalityUuid, UniqidShard, Uuid7};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn shardgate() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shardgate"));
    // A panic would print its backtrace: make sure none does.
    cmd.env("RUST_BACKTRACE", "1").env_remove("RUST_LOG");
    cmd
}

fn run(args: &[&str]) -> Result<Output, Box<dyn std::error::Error>> {
    Ok(shardgate().args(args).stdin(Stdio::null()).output()?)
}

/// Runs with `input` on standard input (written from another thread, so a
/// large input cannot deadlock against a full stdout pipe).
fn run_with_stdin(args: &[&str], input: String) -> Result<Output, Box<dyn std::error::Error>> {
    let mut child =
        shardgate().args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output()?;
    writer.join().map_err(|_| "stdin writer panicked")??;
    Ok(out)
}

fn text(bytes: &[u8]) -> Result<&str, std::str::Utf8Error> {
    std::str::from_utf8(bytes)
}

fn assert_no_panic_text(stderr: &str) {
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE", "stack backtrace", "thread 'main'"] {
        assert!(!stderr.contains(bad), "stderr shows a panic: {stderr:?}");
    }
}

fn json_lines(stdout: &str) -> Result<Vec<Map<String, Value>>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for line in stdout.lines() {
        match serde_json::from_str(line)? {
            Value::Object(m) => out.push(m),
            other => return Err(format!("not a JSON object: {other}").into()),
        }
    }
    Ok(out)
}

/// Mints `n` ids with `args` and returns them, checking exit code and count.
fn mint(args: &[&str], n: usize) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let count = n.to_string();
    let mut all = vec!["mint", "-n", &count];
    all.extend_from_slice(args);
    let out = run(&all)?;
    let stderr = text(&out.stderr)?;
    assert_eq!(out.status.code(), Some(0), "mint {args:?}: {stderr}");
    assert_no_panic_text(stderr);
    let ids: Vec<String> = text(&out.stdout)?.lines().map(str::to_owned).collect();
    assert_eq!(ids.len(), n, "mint {args:?} printed {} ids", ids.len());
    Ok(ids)
}

#[test]
fn decode_of_a_bad_id_exits_1_with_one_line_and_no_backtrace() -> TestResult {
    for (args, code) in [
        (&["decode", "not-an-id"][..], "bad_length"),
        (&["decode", "--format", "iuid", "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"][..], "version_not_8"),
        (&["decode", "--format", "iuid", "017f22e2-79b0-81c3-98c4-dc0c0c07398f"][..], "unsupported_ver1"),
        (&["decode", "--format", "snowflake", "+5"][..], "not_canonical_decimal"),
        (&["decode", "--format", "uniqid", "--total-shards", "4", "36a016b019df3543ac"][..], "shard_prefix_mismatch"),
        (&["decode", "--format", "uuidv7", "\u{ff10}17f22e2-79b0-7cc3-98c4-dc0c0c07398f"][..], "bad_length"),
    ] {
        let out = run(args)?;
        let stdout = text(&out.stdout)?;
        let stderr = text(&out.stderr)?;
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stdout}{stderr}");
        assert_no_panic_text(stderr);
        let report = format!("{stdout}{stderr}");
        assert_eq!(report.lines().count(), 1, "{args:?}: one line expected, got {report:?}");
        assert!(report.contains(code), "{args:?}: {report:?} lacks {code}");
        assert!(report.contains("invalid"), "{args:?}: {report:?}");
    }
    Ok(())
}

#[test]
fn decode_of_a_good_id_exits_0_and_shows_the_fields() -> TestResult {
    let out = run(&["decode", "--format", "iuid", "018E4282-D0BF-8007-8C3A-5D2E9B1F0A47"])?;
    let stdout = text(&out.stdout)?;
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("018e4282-d0bf-8007-8c3a-5d2e9b1f0a47"), "{stdout}");
    assert!(stdout.contains("country                7"), "{stdout}");
    assert!(stdout.contains("2024-03-15T"), "ISO-8601 time: {stdout}");
    // one bad id among good ones still exits 1, and every id gets its report
    let out = run(&["decode", "--format", "iuid", "018e4282-d0bf-8007-8c3a-5d2e9b1f0a47", "x"])?;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout)?.contains("x: invalid (iuid: bad_length)"));
    Ok(())
}

#[test]
fn decode_json_lines_carry_the_documented_keys() -> TestResult {
    let out = run(&[
        "decode",
        "--json",
        "018e4282-d0bf-8007-8c3a-5d2e9b1f0a47",
        "20be0ffc-314a-bd53-7a50-013a65ca76d2",
        "36a016b019df3543ab",
        "1050118621198921728",
        "bad \"id\"\n",
        "017F22E2-79B0-7CC3-98C4-DC0C0C07398F",
    ])?;
    assert_eq!(out.status.code(), Some(1), "one id is invalid");
    let lines = json_lines(text(&out.stdout)?)?;
    assert_eq!(lines.len(), 6);
    let key = |m: &Map<String, Value>, k: &str| m.get(k).cloned().unwrap_or(Value::Null);

    let iuid = &lines[0];
    assert_eq!(key(iuid, "input"), "018e4282-d0bf-8007-8c3a-5d2e9b1f0a47");
    assert_eq!(key(iuid, "valid"), true);
    assert_eq!(key(iuid, "format"), "iuid");
    for k in ["country", "service_entity", "unix_ts_ms", "ver1", "rand", "timestamp_iso", "canonical"] {
        assert!(iuid.contains_key(k), "iuid line lacks {k}: {iuid:?}");
    }
    assert_eq!(key(iuid, "country"), 7);

    let loc = &lines[1];
    assert_eq!(key(loc, "format"), "locality");
    assert_eq!((key(loc, "pid"), key(loc, "mac_fragment_hex")), (Value::from(12_618), Value::from("d537a50")));
    assert_eq!(key(loc, "timestamp_ms"), 1_350_327_498_450u64);

    let uniq = &lines[2];
    assert_eq!(key(uniq, "format"), "uniqid");
    assert_eq!(
        (key(uniq, "shard"), key(uniq, "timestamp_us")),
        (Value::from(3), Value::from(1_795_268_083_345_003u64))
    );

    // a 19-digit decimal string is valid in all three 64-bit formats, and
    // (spec §0.2) also as a uniqid whose 17 hex characters happen to be
    // digits: the first format in order is reported, the others under
    // also_valid_as
    let sf = &lines[3];
    assert_eq!(key(sf, "format"), "uniqid");
    let also = key(sf, "also_valid_as");
    let also = also.as_array().ok_or("also_valid_as is not an array")?;
    let formats: Vec<Value> = also.iter().map(|d| d.get("format").cloned().unwrap_or(Value::Null)).collect();
    assert_eq!(formats, vec![Value::from("snowflake"), Value::from("sonyflake"), Value::from("instagram")]);
    assert_eq!(
        (also[0].get("datacenter_id"), also[0].get("worker_id")),
        (Some(&Value::from(10)), Some(&Value::from(27)))
    );

    let bad = &lines[4];
    assert_eq!(key(bad, "input"), "bad \"id\"\n", "input echoed exactly, escaped as JSON");
    assert_eq!(key(bad, "valid"), false);
    assert_eq!((key(bad, "format"), key(bad, "reason")), (Value::from("iuid"), Value::from("bad_length")));
    assert!(bad.get("reasons").and_then(Value::as_object).is_some_and(|r| r.len() == 7), "{bad:?}");

    let v7 = &lines[5];
    assert_eq!(key(v7, "format"), "uuidv7");
    assert_eq!(key(v7, "canonical"), "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
    assert_eq!(key(v7, "unix_ts_ms"), 1_645_557_742_000u64);
    Ok(())
}

#[test]
fn decode_reads_many_lines_from_stdin() -> TestResult {
    let ids = mint(&["--format", "iuid", "--country", "42", "--entity", "9"], 20_000)?;
    let mut input = ids.join("\n");
    input.push_str("\r\nnot an id\n\n 018e4282-d0bf-8007-8c3a-5d2e9b1f0a47\n018e4282-d0bf-8007-8c3a-5d2e9b1f0a47");
    let out = run_with_stdin(&["decode", "--format", "iuid", "--json"], input)?;
    assert_eq!(out.status.code(), Some(1), "three lines are invalid");
    assert_no_panic_text(text(&out.stderr)?);
    let lines = json_lines(text(&out.stdout)?)?;
    assert_eq!(lines.len(), ids.len() + 4, "one JSON line per input line");
    for (line, id) in lines.iter().zip(&ids) {
        assert_eq!(line.get("input").and_then(Value::as_str), Some(id.as_str()));
        assert_eq!(line.get("country"), Some(&Value::from(42)));
        assert_eq!(line.get("service_entity"), Some(&Value::from(9)));
    }
    let tail: Vec<(Option<&str>, Option<&Value>)> =
        lines[ids.len()..].iter().map(|l| (l.get("input").and_then(Value::as_str), l.get("valid"))).collect();
    assert_eq!(
        tail,
        vec![
            (Some("not an id"), Some(&Value::Bool(false))),
            (Some(""), Some(&Value::Bool(false))),
            // never trimmed
            (Some(" 018e4282-d0bf-8007-8c3a-5d2e9b1f0a47"), Some(&Value::Bool(false))),
            // the last line needs no newline
            (Some("018e4282-d0bf-8007-8c3a-5d2e9b1f0a47"), Some(&Value::Bool(true))),
        ]
    );
    // and the human table the same way
    let out = run_with_stdin(&["decode"], "20be0ffc-314a-bd53-7a50-013a65ca76d2\n".repeat(500))?;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout)?.matches("format                 locality").count(), 500);
    // Blank lines at the end (an editor's last newline, `echo >>`) are no ids.
    let out = run_with_stdin(&["decode", "--json"], "018e4282-d0bf-8007-8c3a-5d2e9b1f0a47\n\n\r\n".into())?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout)?);
    assert_eq!(json_lines(text(&out.stdout)?)?.len(), 1);
    Ok(())
}

#[test]
fn minted_iuids_decode_to_the_requested_country_and_entity() -> TestResult {
    let ids = mint(&["--format", "iuid", "--country", "7", "--entity", "3"], 1000)?;
    let mut last = None;
    for s in &ids {
        let id = Iuid::parse(s)?;
        assert_eq!((id.country(), id.service_entity()), (7, 3), "{s}");
        assert_eq!(&id.to_string(), s, "printed canonical");
        assert!(last < Some(id), "strictly increasing");
        last = Some(id);
    }
    // and through the binary's own decoder
    let out = run_with_stdin(&["decode", "--format", "iuid", "--json"], ids.join("\n"))?;
    assert_eq!(out.status.code(), Some(0));
    let lines = json_lines(text(&out.stdout)?)?;
    assert!(lines.iter().all(|l| l.get("country") == Some(&Value::from(7))));
    assert_eq!(lines.len(), 1000);
    Ok(())
}

#[test]
fn minted_uuid7s_decode_and_increase() -> TestResult {
    let ids = mint(&["--format", "uuidv7"], 1000)?;
    let parsed = ids.iter().map(|s| Uuid7::parse(s)).collect::<Result<Vec<_>, _>>()?;
    assert!(parsed.windows(2).all(|w| w[0] < w[1]));
    Ok(())
}

#[test]
fn minted_uniqids_land_in_the_requested_shard() -> TestResult {
    for s in mint(&["--format", "uniqid", "--shard-count", "16", "--shard", "5"], 500)? {
        let id = UniqidShard::parse_with(&s, Some(16))?;
        assert_eq!(id.shard(), 5, "{s}");
    }
    // without --shard: shard = microseconds % count, so the strict check passes
    let mut last = 0;
    for s in mint(&["--format", "uniqid", "--shard-count", "3"], 500)? {
        let id = UniqidShard::parse_with(&s, Some(3))?;
        assert!(id.timestamp_us() > last);
        last = id.timestamp_us();
    }
    let out = run(&["mint", "--format", "uniqid", "--shard-count", "4", "--shard", "4"])?;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr)?.contains("--shard 4 is not below --shard-count 4"));
    Ok(())
}

#[test]
fn minted_locality_ids_carry_the_node() -> TestResult {
    for mode in [&[][..], &["--sequential"][..]] {
        let mut args = vec!["--format", "locality", "--pid", "4464", "--mac-fragment", "C110002"];
        args.extend_from_slice(mode);
        let ids = mint(&args, 300)?;
        for s in &ids {
            let id = LocalityUuid::parse(s)?;
            assert_eq!((id.pid(), id.mac_fragment()), (4464, 0x0c11_0002), "{s}");
        }
        let distinct: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "{mode:?}: duplicate id");
    }
    Ok(())
}

#[test]
fn mint_refuses_read_only_formats_and_missing_flags() -> TestResult {
    // `mint --help` offers only the formats it can mint.
    let help = run(&["mint", "--help"])?;
    let help = text(&help.stdout)?;
    for format in ["iuid", "locality", "uniqid", "uuidv7"] {
        assert!(help.contains(format), "{format} missing from:\n{help}");
    }
    for format in ["snowflake", "sonyflake", "instagram"] {
        assert!(!help.contains(format), "mint --help offers {format}:\n{help}");
        let out = run(&["mint", "--format", format, "-n", "3"])?;
        let stderr = text(&out.stderr)?;
        assert_eq!(out.status.code(), Some(2), "{format}: {stderr}");
        assert!(out.stdout.is_empty(), "{format}: nothing minted");
        assert!(stderr.contains(&format!("invalid value '{format}'")), "{format}: {stderr}");
        assert!(stderr.contains("possible values: iuid, locality, uniqid, uuidv7"), "{format}: {stderr}");
        assert_no_panic_text(stderr);
    }
    for (args, needs) in [
        (&["mint", "--format", "iuid", "--country", "7"][..], "--entity"),
        (&["mint", "--format", "uniqid"][..], "--shard-count"),
        (&["mint", "--format", "locality"][..], "--mac-fragment or --pid"),
    ] {
        let out = run(args)?;
        let stderr = text(&out.stderr)?;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needs), "{args:?}: {stderr}");
    }
    // Options of another format are refused, not silently ignored.
    for (args, stray) in [
        (&["mint", "--format", "iuid", "--country", "7", "--entity", "3", "--shard-count", "4"][..], "--shard-count"),
        (&["mint", "--format", "uuidv7", "--country", "7"][..], "--country"),
        (&["mint", "--format", "uniqid", "--shard-count", "4", "--sequential"][..], "--sequential"),
        (&["mint", "--format", "locality", "--shard", "1", "--entity", "2"][..], "--entity, --shard"),
    ] {
        let out = run(args)?;
        let stderr = text(&out.stderr)?;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing minted");
        assert!(stderr.contains(&format!("does not take {stray}")), "{args:?}: {stderr}");
    }
    // clap's own usage errors are exit 2 too, without a panic
    let out = run(&["mint", "--format", "iuid", "--country", "256", "--entity", "1"])?;
    assert_eq!(out.status.code(), Some(2));
    assert_no_panic_text(text(&out.stderr)?);
    Ok(())
}

#[test]
fn check_judges_a_shared_table_by_the_region_given() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("shared.yaml");
    let table = "version: 1\nregions:\n  eu: { upstreams: [\"http://127.0.0.1:1\"] }\n  kz: { upstreams: [\"http://127.0.0.1:2\"] }\nroutes:\n  - { name: all, match: { prefix: / }, to: local }\n";
    std::fs::write(&path, table)?;
    let file = path.to_str().ok_or("path")?;
    let check = |region: Option<&str>| {
        let mut cmd = shardgate();
        cmd.args(["check", "-c", file]).env_remove("SHARDGATE_REGION");
        if let Some(r) = region {
            cmd.args(["--region", r]);
        }
        cmd.output()
    };
    let out = check(None)?;
    let stderr = text(&out.stderr)?;
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(stderr.contains("sends to the local region, and this table names none"), "{stderr}");
    let out = check(Some("kz"))?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr)?);
    assert!(text(&out.stdout)?.contains(": ok: 2 regions"), "{}", text(&out.stdout)?);
    let out = check(Some("mars"))?;
    let stderr = text(&out.stderr)?;
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains(&format!("{file}: --region mars: the table has no such region (it has eu, kz)")),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn check_expands_environment_variables_and_locates_a_missing_one() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("env.yaml");
    let table = "version: 1\nregions:\n  eu: { upstreams: [\"${EU_BACKEND}\"] }\n  kz: { upstreams: [\"http://127.0.0.1:2\"], failover: ${KZ_FAILOVER:-eu} }\ndefault_region: eu\nroutes:\n  - { name: all, match: { prefix: / }, to: local }\n";
    std::fs::write(&path, table)?;
    let file = path.to_str().ok_or("path")?;
    let out = shardgate().args(["check", "-c", file]).env("EU_BACKEND", "http://127.0.0.1:1").output()?;
    let stdout = text(&out.stdout)?;
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr)?);
    assert!(stdout.contains("environment variables read: EU_BACKEND, KZ_FAILOVER"), "{stdout}");
    let out = shardgate().args(["check", "-c", file]).env_remove("EU_BACKEND").output()?;
    let stderr = text(&out.stderr)?;
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains(&format!("{file}:3:22: (document): environment variable EU_BACKEND is not set")),
        "{stderr}"
    );
    Ok(())
}
