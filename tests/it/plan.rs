//! `shardgate plan`, `POST /reload?dry_run=1` and the audit trail, on the
//! real binary: the moves of a new table with the traffic a running
//! instance under load carried, the exit codes, and a trail that fails to
//! verify with one byte changed.

use std::process::Command;

use super::support::binary::{spawn_serving, spawn_table};
use super::support::{get, iuid, table, three_backends, BoxError};

type TestResult = Result<(), BoxError>;

fn plan(args: &[&str]) -> Result<(i32, String, String), BoxError> {
    let out = Command::new(env!("CARGO_BIN_EXE_shardgate"))
        .arg("plan")
        .args(args)
        .env_remove("SHARDGATE_ADMIN_TOKEN")
        .output()?;
    Ok((out.status.code().unwrap_or(-1), String::from_utf8(out.stdout)?, String::from_utf8(out.stderr)?))
}

#[tokio::test]
async fn plan_lists_each_moved_unit_with_the_traffic_a_running_instance_carried() -> TestResult {
    let [eu, kz, us] = three_backends().await?;
    let dir = tempfile::tempdir()?;
    let extra = r#"key_ranges: [{ start: "0000000000000000", region: eu }, { start: "8000000000000000", region: kz }]"#;
    let old = table(eu.addr, kz.addr, us.addr, extra);
    let (_child, port, admin) = spawn_table(dir.path(), &old, None, None).await?;
    // 30 requests for KZ, 10 for DE, 10 by shard 7 (uniqid), under way before the plan.
    for (country, n) in [(7u8, 30), (49, 10)] {
        for _ in 0..n {
            let r = get(&format!("http://127.0.0.1:{port}/v1/orders/{}", iuid(country))).await?;
            assert_eq!(r.status, 200);
        }
    }
    let shard7 = shardgate::ids::UniqidShard::from_fields(7, 0x123, 1_700_000_000, 1234).ok_or("uniqid")?.to_string();
    for _ in 0..10 {
        assert_eq!(get(&format!("http://127.0.0.1:{port}/v1/orders/{shard7}")).await?.status, 200);
    }
    // A moved country, an override, a shard range split, a key-range split and a hash weight change.
    let new = old
        .replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: us }")
        .replace(
            "{ country: KZ, entity: WalletAccount, region: eu }",
            "{ country: KZ, entity: WalletAccount, region: kz }",
        )
        .replace(r#"eu: "0-5", kz: "6-10""#, r#"eu: "0-7", kz: "8-10""#)
        .replace(
            r#"{ start: "8000000000000000", region: kz }]"#,
            r#"{ start: "8000000000000000", region: kz }, { start: "c000000000000000", region: us }]"#,
        )
        .replace("hash: { regions: [eu, kz, us] }", "hash: { regions: [eu, kz, us], weights: { eu: 2 } }");
    let new_file = dir.path().join("new.yaml");
    std::fs::write(&new_file, &new)?;
    let admin_url = format!("http://127.0.0.1:{admin}");
    let (code, out, err) = plan(&["--admin", &admin_url, new_file.to_str().ok_or("path")?])?;
    assert_eq!(code, 1, "{out}{err}");
    for line in [
        "country KZ",
        "kz -> us",
        "override KZ:WalletAccount",
        "shards 6-7",
        "key_range c000000000000000..end",
        "key space 25.00%",
        "hash",
        "placed requests",
    ] {
        assert!(out.contains(line), "{line:?} not in:\n{out}");
    }
    let (code, json, _) = plan(&["--admin", &admin_url, "--json", new_file.to_str().ok_or("path")?])?;
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&json)?;
    let moves = v["moves"].as_array().ok_or("no moves")?;
    let find = |unit: &str| moves.iter().find(|m| m["unit"] == unit).cloned().unwrap_or_default();
    assert_eq!(v["window"]["total"], 50, "{json}");
    assert_eq!(find("country KZ")["traffic"]["requests"], 30.0, "{json}");
    assert_eq!(find("country KZ")["traffic"]["share"], 0.6, "{json}");
    assert_eq!(find("country KZ")["traffic"]["measure"], "exact");
    // Shards 6-7 are two of the five of "shards 6-10", which carried 10.
    assert_eq!(find("shards 6-7")["traffic"]["requests"], 4.0, "{json}");
    assert_eq!(find("shards 6-7")["traffic"]["measure"], "estimated");
    let hash_share: f64 = moves.iter().filter(|m| m["unit"] == "hash").filter_map(|m| m["key_share"].as_f64()).sum();
    assert!((hash_share - 1.0 / 6.0).abs() < 0.01, "{json}");
    assert_eq!(moves.len(), 6, "{json}");

    // The same plan from the instance itself, nothing applied.
    let dry = reqwest_post(&format!("{admin_url}/reload?dry_run=1"), new.clone()).await?;
    assert_eq!(dry.0, 200, "{}", dry.1);
    let v: serde_json::Value = serde_json::from_str(&dry.1)?;
    assert_eq!(v["moves"], 6, "{}", dry.1);
    // The new table's listeners are the table's own, not the running ones: they wait for a restart.
    assert_eq!(v["needs_restart"], serde_json::json!(["listen", "admin"]), "{}", dry.1);
    let config = get(&format!("{admin_url}/config")).await?.json()?;
    assert_eq!(config["version"], 1, "a dry run applied the table");
    let bad = reqwest_post(&format!("{admin_url}/reload?dry_run=1"), "version: 1\nbogus: 1\n".into()).await?;
    assert_eq!(bad.0, 422, "{}", bad.1);
    // A query it does not read is refused, never taken for a reload of the file.
    for query in ["dry_run=yes", "dry-run=1", "dryrun"] {
        let typo = reqwest_post(&format!("{admin_url}/reload?{query}"), new.clone()).await?;
        assert_eq!(typo.0, 400, "{query}: {}", typo.1);
        assert!(typo.1.contains("\"bad_query\""), "{query}: {}", typo.1);
    }
    let large = reqwest_post(&format!("{admin_url}/reload?dry_run"), "#".repeat(9 << 20)).await?;
    assert_eq!(large.0, 413, "{}", large.1);
    let config = get(&format!("{admin_url}/config")).await?.json()?;
    assert_eq!(config["version"], 1, "a refused dry run applied the table");

    // Exit codes without an instance: nothing moves 0, invalid 78, no running table 2.
    let old_file = dir.path().join("table.yaml");
    let (code, out, _) = plan(&["--running", old_file.to_str().ok_or("path")?, old_file.to_str().ok_or("path")?])?;
    assert_eq!((code, out.trim()), (0, "nothing moves: every placement unit keeps its owner"));
    let invalid = dir.path().join("invalid.yaml");
    std::fs::write(&invalid, "version: 1\nregions: {}\n")?;
    let (code, _, err) = plan(&["--running", old_file.to_str().ok_or("path")?, invalid.to_str().ok_or("path")?])?;
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("invalid.yaml:"), "{err}");
    assert_eq!(plan(&[new_file.to_str().ok_or("path")?])?.0, 2);
    let (closed, _) = super::support::binary::free_ports()?;
    let nobody = format!("http://127.0.0.1:{closed}");
    assert_eq!(plan(&["--admin", &nobody, new_file.to_str().ok_or("path")?])?.0, 69);
    Ok(())
}

#[tokio::test]
async fn plan_loads_a_shared_table_in_the_region_the_instance_serves() -> TestResult {
    let [eu, kz, us] = three_backends().await?;
    let dir = tempfile::tempdir()?;
    // A fleet's table: no `region:`, a route to `local`; the instance names its region.
    let old = table(eu.addr, kz.addr, us.addr, "")
        .replace("routes:\n", "routes:\n  - { name: health, match: { path: /v1/health }, to: local }\n");
    let (_child, _, admin) = spawn_serving(dir.path(), &old, None, None, &["--region", "kz"]).await?;
    let admin_url = format!("http://127.0.0.1:{admin}");
    let config = get(&format!("{admin_url}/config")).await?.json()?;
    assert_eq!(config["region"], "kz", "{config}");
    let new_file = dir.path().join("new.yaml");
    std::fs::write(&new_file, old.replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: us }"))?;
    let new = new_file.to_str().ok_or("path")?;
    let (code, out, err) = plan(&["--admin", &admin_url, new])?;
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("country KZ") && out.contains("kz -> us"), "{out}");
    // Against a file, the region is given.
    let old_file = dir.path().join("table.yaml");
    let old_file = old_file.to_str().ok_or("path")?;
    let (code, _, err) = plan(&["--running", old_file, new])?;
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("sends to the local region"), "{err}");
    let (code, out, err) = plan(&["--running", old_file, "--region", "eu", new])?;
    assert_eq!(code, 1, "{out}{err}");
    Ok(())
}

/// POSTs `body` as YAML; the status and the body.
async fn reqwest_post(url: &str, body: String) -> Result<(u16, String), BoxError> {
    let req = http::Request::post(url)
        .header("content-type", "application/yaml")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))?;
    let got = super::support::send(req).await?;
    Ok((got.status.as_u16(), String::from_utf8_lossy(&got.body).into_owned()))
}

#[tokio::test]
async fn the_audit_trail_records_each_change_and_the_fences_it_gives_up_and_fails_to_verify_with_one_byte_changed(
) -> TestResult {
    let [eu, kz, us] = three_backends().await?;
    let dir = tempfile::tempdir()?;
    let trail = dir.path().join("audit.jsonl");
    let text = table(eu.addr, kz.addr, us.addr, "");
    let (port, admin) = super::support::binary::free_ports()?;
    let text = text
        .replace("127.0.0.1:18080", &format!("127.0.0.1:{port}"))
        .replace("127.0.0.1:19901", &format!("127.0.0.1:{admin}"));
    let file = dir.path().join("table.yaml");
    std::fs::write(&file, &text)?;
    let child = Command::new(env!("CARGO_BIN_EXE_shardgate"))
        .args(["serve", "-c", file.to_str().ok_or("path")?, "--audit-log", trail.to_str().ok_or("path")?])
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let _child = super::support::binary::Child(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while get(&format!("http://127.0.0.1:{admin}/ready")).await.map(|r| r.status.as_u16()).unwrap_or(0) != 200 {
        if std::time::Instant::now() > deadline {
            return Err("the binary did not become ready".into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let reload = |body: String| {
        std::fs::write(&file, body)?;
        Ok::<_, BoxError>(())
    };
    let url = format!("http://127.0.0.1:{admin}/reload");
    let post = |_: ()| reqwest_post(&url, String::new());
    reload(text.replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: eu }"))?;
    assert_eq!(post(()).await?.0, 200);
    let moving = text.replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: eu }")
        + "moves:\n  - { unit: \"country DE\", to: us, phase: hold, epoch: 1 }\n";
    reload(moving)?;
    assert_eq!(post(()).await?.0, 200);
    // The move switched, then left out of the next table: the fence it
    // gives up is in the answer, in the trail, and in `plan`'s exit code.
    let switched = text
        .replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: eu }")
        .replace("DE: { id: 49, region: eu }", "DE: { id: 49, region: us }");
    let with_switch = format!("{switched}moves:\n  - {{ unit: \"country DE\", to: us, phase: switch, epoch: 2 }}\n");
    reload(with_switch.clone())?;
    assert_eq!(post(()).await?.0, 200);
    reload(switched.clone())?;
    let dropped = post(()).await?;
    assert_eq!(dropped.0, 200, "{}", dropped.1);
    let answer: serde_json::Value = serde_json::from_str(&dropped.1)?;
    let given_up = serde_json::json!([{ "unit": "country DE", "phase": "switch", "epoch": 2, "next": null }]);
    assert_eq!(answer["unfenced"], given_up, "{answer}");
    let (before, after) = (dir.path().join("switched.yaml"), dir.path().join("dropped.yaml"));
    std::fs::write(&before, &with_switch)?;
    std::fs::write(&after, &switched)?;
    let (code, out, err) = plan(&["--running", before.to_str().ok_or("path")?, after.to_str().ok_or("path")?])?;
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.starts_with("fences given up:") && out.contains("nothing moves"), "{out}");
    // The switch kept, but an override split out of the moved country
    // without it: the same warning, naming the unit it came out of.
    reload(with_switch.clone())?;
    assert_eq!(post(()).await?.0, 200);
    let split = with_switch.replace(
        "  - { country: KZ, entity: WalletAccount, region: eu }",
        "  - { country: KZ, entity: WalletAccount, region: eu }\n  - { country: DE, entity: IntercityOrder, region: us }",
    );
    reload(split.clone())?;
    let answer: serde_json::Value = serde_json::from_str(&post(()).await?.1)?;
    let split_out = serde_json::json!([{ "unit": "override DE:IntercityOrder", "within": "country DE",
        "phase": "switch", "epoch": 2, "next": null }]);
    assert_eq!(answer["unfenced"], split_out, "{answer}");
    let overridden = dir.path().join("split.yaml");
    std::fs::write(&overridden, &split)?;
    let (code, out, err) = plan(&["--running", before.to_str().ok_or("path")?, overridden.to_str().ok_or("path")?])?;
    assert_eq!(code, 1, "{out}{err}");
    let line = "  override DE:IntercityOrder, split out of country DE at epoch 2 (switch): it has no move\n";
    assert!(out.starts_with("fences given up:") && out.contains(line), "{out}");
    reload(text.replace("version: 1", "version: 1\nbogus: 2"))?;
    assert_eq!(post(()).await?.0, 422);
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&trail)?.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
    assert!(lines.len() >= 2, "{lines:?}");
    let applied =
        lines.iter().find(|l| l["event"] == "applied" && l["who"] == "POST /reload").ok_or("no applied entry")?;
    assert_eq!(applied["moves"][0]["unit"], "country KZ", "{applied}");
    assert_eq!((applied["moves"][0]["from"].as_str(), applied["moves"][0]["to"].as_str()), (Some("kz"), Some("eu")));
    let phases = lines.iter().find(|l| !l["phases"].is_null()).ok_or("no entry with the move's phase")?;
    assert_eq!(phases["phases"][0]["phase"], "hold", "{phases}");
    assert_eq!(phases["phases"][0]["unit"], "country DE", "{phases}");
    let unfenced = lines.iter().find(|l| !l["unfenced"].is_null()).ok_or("no entry with a fence given up")?;
    assert_eq!(unfenced["unfenced"], given_up, "{unfenced}");
    let split_entry = lines.iter().find(|l| l["unfenced"][0]["within"] == "country DE").ok_or("no split-out entry")?;
    assert_eq!(split_entry["unfenced"], split_out, "{split_entry}");
    let rejected = lines.iter().find(|l| l["event"] == "rejected").ok_or("no rejected entry")?;
    assert!(rejected["errors"][0].as_str().is_some_and(|e| e.contains("table.yaml:2:1")), "{rejected}");
    let verify = |path: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_shardgate")).args(["audit", "verify"]).arg(path).output()
    };
    let ok = verify(&trail)?;
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    // The last line cut off: the chain left holds, but not to the head the log recorded.
    let text = std::fs::read_to_string(&trail)?;
    let head = lines.last().and_then(|l| l["hash"].as_str()).ok_or("no hash")?.to_string();
    let cut = dir.path().join("cut.jsonl");
    let kept: Vec<&str> = text.lines().collect();
    std::fs::write(&cut, format!("{}\n", kept[..kept.len() - 1].join("\n")))?;
    assert_eq!(verify(&cut)?.status.code(), Some(0));
    let with_head = |path: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_shardgate")).args(["audit", "verify", "--head", &head]).arg(path).output()
    };
    assert_eq!(with_head(&trail)?.status.code(), Some(0));
    assert_eq!(with_head(&cut)?.status.code(), Some(1));
    // One byte changed: the "kz" of the first move becomes "kx".
    let text = std::fs::read_to_string(&trail)?;
    let changed = dir.path().join("changed.jsonl");
    std::fs::write(&changed, text.replacen("\"from\":\"kz\"", "\"from\":\"kx\"", 1))?;
    let broken = verify(&changed)?;
    assert_eq!(broken.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&broken.stderr).contains("chain broken"),
        "{}",
        String::from_utf8_lossy(&broken.stderr)
    );
    Ok(())
}
