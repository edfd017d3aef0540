//! Config loader: one fixture per validation error class, each asserting the
//! exact YAML path and line of every problem it contains, and a file with
//! many problems reported in one run.
//!
//! Fixtures mark each expected problem with a trailing `# error: <path>`
//! comment on the line where it must be reported; the test asserts that the
//! set of (path, line) pairs reported is exactly the set marked.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use shardgate::cli::check::run as run_check;
use shardgate::config::{self, ConfigErrors};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config").join(name)
}

/// (path, line) pairs marked in a fixture.
fn marked(text: &str) -> BTreeSet<(String, usize)> {
    text.lines()
        .enumerate()
        .filter_map(|(n, l)| l.split_once("# error:").map(|(_, p)| (p.trim().to_owned(), n + 1)))
        .collect()
}

fn reported(errors: &ConfigErrors) -> BTreeSet<(String, usize)> {
    errors.errors.iter().map(|e| (e.path.clone(), e.line)).collect()
}

fn check_fixture(name: &str) -> Result<ConfigErrors, String> {
    let path = fixture(name);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{name}: {e}"))?;
    let expected = marked(&text);
    assert!(!expected.is_empty(), "{name} marks no error");
    let errors = match config::load_file(&path) {
        Ok(_) => return Err(format!("{name}: accepted")),
        Err(e) => e,
    };
    assert_eq!(reported(&errors), expected, "{name}:\n{errors}");
    for e in &errors.errors {
        assert!(e.col >= 1, "{name}: column {e:?}");
        assert!(e.hint.as_deref().is_some_and(|h| !h.is_empty()), "{name}: no hint: {e:?}");
        assert!(!e.message.is_empty() && e.message.chars().next().is_some_and(|c| !c.is_uppercase()), "{name}: {e:?}");
    }
    Ok(errors)
}

macro_rules! fixtures {
    ($($test:ident => $file:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() -> Result<(), String> {
                check_fixture($file).map(|_| ())
            }
        )*
    };
}

fixtures! {
    config_unknown_key => "unknown_key.yaml",
    config_duplicate_key => "duplicate_key.yaml",
    config_bad_type => "bad_type.yaml",
    config_dangling_region => "dangling_region.yaml",
    config_dangling_country_and_entity => "dangling_country_entity.yaml",
    config_duplicate_country_id => "duplicate_country_id.yaml",
    config_country_case_clash => "country_case_clash.yaml",
    config_duplicate_entity_code => "duplicate_entity_code.yaml",
    config_id_out_of_range => "id_out_of_range.yaml",
    config_shard_overlap => "shard_overlap.yaml",
    config_shard_gap => "shard_gap.yaml",
    config_key_ranges_out_of_order => "key_ranges.yaml",
    config_time_ranges_out_of_order => "time_ranges.yaml",
    config_route_unreachable => "route_unreachable.yaml",
    config_route_conflict => "route_conflict.yaml",
    config_route_too_many_params => "route_too_many_params.yaml",
    config_route_without_rule => "route_without_rule.yaml",
    config_unknown_format => "unknown_format.yaml",
    config_mint_not_mintable => "mint_not_mintable.yaml",
    config_failover_cycle => "failover_cycle.yaml",
    config_region_without_endpoints => "region_without_endpoints.yaml",
    config_bad_upstream_url => "bad_upstream_url.yaml",
    config_unknown_local_region => "unknown_local_region.yaml",
    config_bad_duration => "bad_duration.yaml",
    config_syntax_error => "syntax_error.yaml",
    config_missing_version => "missing_version.yaml",
    config_many_errors => "many_errors.yaml",
    config_global_reads => "global_reads.yaml",
    config_telemetry => "telemetry.yaml",
    config_proxy_owned_header => "proxy_owned_header.yaml",
    config_grpc_on_fanout_and_search => "grpc_on_fanout_and_search.yaml",
    config_server_limits => "server_limits.yaml",
}

/// Inputs the config fuzz target crashed on (`tests/fixtures/config/fuzz/`):
/// each must be rejected with errors, not a panic.
#[test]
fn config_fuzz_crashes_are_rejected_not_panics() -> Result<(), String> {
    let dir = fixture("fuzz");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut seen = 0;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let text = String::from_utf8_lossy(&bytes);
        match config::load_str(&text, "fuzz.yaml") {
            Ok(_) => return Err(format!("{}: accepted", path.display())),
            Err(errors) => assert!(!errors.errors.is_empty(), "{}", path.display()),
        }
        seen += 1;
    }
    assert!(seen >= 1, "no fuzz regression inputs in {}", dir.display());
    Ok(())
}

#[test]
fn config_messages_name_the_offending_value() -> Result<(), String> {
    let errors = check_fixture("unknown_format.yaml")?;
    let e = &errors.errors[0];
    assert_eq!(e.message, "unknown id format \"uuid7\"");
    assert_eq!(e.hint.as_deref(), Some("did you mean `uuidv7`?"));
    let errors = check_fixture("unknown_key.yaml")?;
    assert_eq!(errors.errors[0].hint.as_deref(), Some("did you mean `failover`?"));
    let errors = check_fixture("failover_cycle.yaml")?;
    assert_eq!(errors.errors[0].message, "failover cycle: eu -> kz -> us -> eu");
    let errors = check_fixture("proxy_owned_header.yaml")?;
    assert_eq!(errors.errors[0].message, "header \"X-Request-Id\" is one the proxy writes itself");
    assert_eq!(errors.errors[0].hint.as_deref(), Some("name a field of the application's own, such as X-Entity-Id"));
    Ok(())
}

#[test]
fn config_check_command_exit_codes() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_check(&fixture("many_errors.yaml"), &Default::default(), false, &mut out, &mut err);
    assert_eq!(code, 78);
    let err = String::from_utf8_lossy(&err);
    let first = err.lines().next().unwrap_or("");
    assert!(first.contains("many_errors.yaml:4:1: admn: unknown key \"admn\" (hint: "), "{err}");
    assert!(out.is_empty());

    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/example.yaml");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_check(&example, &Default::default(), false, &mut out, &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    let summary = String::from_utf8_lossy(&out);
    assert!(summary.contains(": ok: 3 regions, 4 countries"), "{summary}");
    // --print: the effective table alone on standard output (so `> file`
    // makes a table), defaults filled in; it loads again. The verdict goes to stderr.
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_check(&example, &Default::default(), true, &mut out, &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    let printed = String::from_utf8_lossy(&out);
    assert!(String::from_utf8_lossy(&err).contains(": ok: 3 regions"));
    assert!(printed.starts_with("version: 1"), "{printed}");
    assert!(printed.contains("request_timeout: 15s"), "{printed}");
    assert!(printed.contains("instance: gw-eu-1"), "{printed}");
    let again = config::load_str(&printed, "printed.yaml");
    assert!(again.is_ok(), "{:?}", again.err().map(|e| e.to_string()));
}

#[test]
fn config_check_warns_of_a_mesh_peer_that_trusts_no_peer() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let table = |trusted: &str| {
        format!(
            "version: 1\nregion: eu\nmesh: {{ trusted_peers: [{trusted}] }}\nregions:\n  \
             eu: {{ upstreams: [\"http://127.0.0.1:1\"] }}\n  kz: {{ peer: \"http://127.0.0.1:2\" }}\nroutes: []\n"
        )
    };
    for (trusted, warned) in [("", true), ("\"10.0.0.0/8\"", false)] {
        let file = dir.path().join("t.yaml");
        std::fs::write(&file, table(trusted))?;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(run_check(&file, &Default::default(), false, &mut out, &mut err), 0);
        let err = String::from_utf8_lossy(&err);
        assert_eq!(err.contains("warning: mesh.trusted_peers is empty"), warned, "{trusted}: {err}");
    }
    Ok(())
}

#[test]
fn config_check_warns_of_a_pool_that_keeps_connections_a_peer_closes_first() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let table = |settings: &str, scheme: &str| {
        format!(
            "version: 1\nregion: eu\nmesh: {{ trusted_peers: [\"10.0.0.0/8\"] }}\n{settings}regions:\n  \
             eu: {{ upstreams: [\"http://127.0.0.1:1\"] }}\n  kz: {{ peer: \"{scheme}://127.0.0.1:2\" }}\nroutes: []\n"
        )
    };
    // The defaults, a pool kept as long as a peer waits, one kept longer,
    // one shorter, and an HTTP/2 peer (whose connections are in no pool).
    let cases = [
        ("", "http", false),
        ("upstream: { pool_idle_timeout: 10s }\n", "http", true),
        ("upstream: { pool_idle_timeout: 90s }\nserver: { header_read_timeout: 30s }\n", "https", true),
        ("upstream: { pool_idle_timeout: 20s }\nserver: { header_read_timeout: 30s }\n", "http", false),
        ("upstream: { pool_idle_timeout: 90s }\n", "h2c", false),
    ];
    for (settings, scheme, warned) in cases {
        let file = dir.path().join("t.yaml");
        std::fs::write(&file, table(settings, scheme))?;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(run_check(&file, &Default::default(), false, &mut out, &mut err), 0, "{settings} {scheme}");
        let err = String::from_utf8_lossy(&err);
        let said = err.contains("warning: upstream.pool_idle_timeout");
        assert_eq!(said, warned, "{settings} {scheme}: {err}");
    }
    Ok(())
}

#[test]
fn config_hostile_inputs_are_rejected_quickly() {
    let mut laughs = String::from("version: 1\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        laughs
            .push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"));
    }
    assert!(config::load_str(&laughs, "laughs.yaml").is_err());
    let deep = format!("version: 1\nregions: {}{}\n", "{a: ".repeat(5000), "}".repeat(5000));
    assert!(config::load_str(&deep, "deep.yaml").is_err());
    let big = "#".repeat(5 << 20);
    let e = config::load_str(&big, "big.yaml").err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("more than the limit"), "{e}");
    for weird in [
        "",
        "---",
        "[]",
        "42",
        "version: 1\n---\nversion: 1\n",
        "!!map {}",
        "? [a]\n: b\n",
        "version: &v 1\nlisten: *v\n",
    ] {
        assert!(config::load_str(weird, "weird.yaml").is_err(), "{weird:?}");
    }
}

/// A cheap stand-in for the fuzz target that runs with the test suite:
/// thousands of byte-level mutations of the example table must never panic,
/// and every error must carry a position.
#[test]
fn config_mutated_tables_never_panic() {
    let base = include_str!("../../config/example.yaml").as_bytes().to_vec();
    let pieces: [&[u8]; 10] = [b"{", b"}", b"[", b"]", b": ", b"\n  ", b"&a ", b"*a", b"- ", b"\"\\u0000"];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..1000 {
        let mut text = base.clone();
        for _ in 0..(1 + next() % 4) {
            let at = (next() as usize) % text.len().max(1);
            match next() % 4 {
                0 => {
                    text.remove(at);
                }
                1 => {
                    let p = pieces[(next() as usize) % pieces.len()];
                    text.splice(at..at, p.iter().copied());
                }
                2 => {
                    let len = ((next() % 40) as usize).min(text.len() - at);
                    let chunk: Vec<u8> = text[at..at + len].to_vec();
                    text.splice(at..at, chunk);
                }
                _ => text[at] = b"x:-# 0\"'"[(next() % 8) as usize],
            }
        }
        let Ok(text) = String::from_utf8(text) else { continue };
        if let Err(errors) = config::load_str(&text, "mutated.yaml") {
            assert!(errors.errors.iter().all(|e| e.line >= 1 && e.col >= 1), "{errors}");
        }
    }
}
