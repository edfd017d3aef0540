//! Tables from a real etcd: a three-member cluster on loopback, started by
//! the test (Debian's `etcd-server`), written to with etcd's own `etcdctl`,
//! and three `shardgate` binaries following one key.
//!
//! Skipped with a message where `etcd` or `etcdctl` is not installed;
//! `SHARDGATE_REQUIRE_ETCD` (set by `.ci/run`, which installs them) makes
//! that a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::support::binary::{free_ports, Child};
use super::support::{get, iuid, table, three_backends, BoxError};

type TestResult = Result<(), BoxError>;

pub(crate) const KEY: &str = "/shardgate/table";

/// Whether etcd is here; `Err` when it must be and is not.
pub(crate) fn etcd_installed() -> Result<bool, BoxError> {
    let found = [("etcd", "--version"), ("etcdctl", "version")].iter().all(|(b, arg)| {
        Command::new(b).arg(arg).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    });
    if !found && std::env::var_os("SHARDGATE_REQUIRE_ETCD").is_some() {
        return Err("SHARDGATE_REQUIRE_ETCD is set but etcd or etcdctl is not installed".into());
    }
    if !found {
        eprintln!("SKIPPED: etcd and etcdctl are not installed (Debian: apt-get install etcd-server etcd-client)");
    }
    Ok(found)
}

struct Member {
    name: String,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

/// A three-member etcd cluster on loopback.
pub(crate) struct Cluster {
    dir: PathBuf,
    members: Vec<Member>,
}

impl Cluster {
    pub(crate) async fn start(dir: &Path) -> Result<Cluster, BoxError> {
        let mut members = Vec::new();
        for i in 0..3 {
            let (client, peer) = free_ports()?;
            members.push(Member { name: format!("m{i}"), client, peer, child: None });
        }
        let mut cluster = Cluster { dir: dir.to_path_buf(), members };
        for i in 0..3 {
            cluster.run(i, "new")?;
        }
        cluster.wait_healthy(Duration::from_secs(20)).await?;
        Ok(cluster)
    }

    fn initial(&self) -> String {
        self.members.iter().map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer)).collect::<Vec<_>>().join(",")
    }

    /// Starts member `i` (`state`: "new" the first time, "existing" after).
    fn run(&mut self, i: usize, state: &str) -> Result<(), BoxError> {
        let initial = self.initial();
        let m = &mut self.members[i];
        let data = self.dir.join(&m.name);
        let log = std::fs::File::create(self.dir.join(format!("{}.log", m.name)))?;
        let child = Command::new("etcd")
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &format!("http://127.0.0.1:{}", m.client)])
            .args(["--advertise-client-urls", &format!("http://127.0.0.1:{}", m.client)])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{}", m.peer)])
            .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{}", m.peer)])
            .args(["--initial-cluster", &initial, "--initial-cluster-state", state])
            .args(["--initial-cluster-token", "shardgate-test"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        m.child = Some(Child(child));
        Ok(())
    }

    fn kill(&mut self, i: usize) {
        self.members[i].child = None;
    }

    /// Stops every member: etcd refuses every call until [`Cluster::restart`].
    pub(crate) fn stop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }

    /// Starts every stopped member again on its data, and waits for quorum.
    pub(crate) async fn restart(&mut self) -> TestResult {
        for i in 0..self.members.len() {
            if self.members[i].child.is_none() {
                self.run(i, "existing")?;
            }
        }
        self.wait_healthy(Duration::from_secs(20)).await
    }

    pub(crate) fn endpoints(&self) -> String {
        self.members.iter().map(|m| format!("127.0.0.1:{}", m.client)).collect::<Vec<_>>().join(",")
    }

    fn live_endpoints(&self) -> String {
        let live = self.members.iter().filter(|m| m.child.is_some());
        live.map(|m| format!("127.0.0.1:{}", m.client)).collect::<Vec<_>>().join(",")
    }

    async fn wait_healthy(&self, within: Duration) -> TestResult {
        let deadline = Instant::now() + within;
        loop {
            let ok = self.etcdctl(&["endpoint", "health"], None).is_ok();
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err("etcd did not become healthy".into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `etcdctl ARGS` against the live members, `input` on its standard input.
    fn etcdctl(&self, args: &[&str], input: Option<&str>) -> Result<String, BoxError> {
        use std::io::Write;
        let mut child = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.live_endpoints(), "--command-timeout", "5s"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(input.unwrap_or("").as_bytes())?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(format!("etcdctl {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        Ok(String::from_utf8(out.stdout)?)
    }

    /// The table key's value now.
    pub(crate) fn value(&self) -> Result<String, BoxError> {
        self.etcdctl(&["get", KEY, "--print-value-only"], None)
    }

    /// Puts `text` at the table key; etcd's revision after it.
    pub(crate) fn put(&self, text: &str) -> Result<i64, BoxError> {
        // A cluster that just lost its leader answers again after an election.
        let mut tries = 0;
        while let Err(e) = self.etcdctl(&["put", KEY], Some(text)) {
            tries += 1;
            if tries == 5 {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let status = self.etcdctl(&["get", KEY, "-w", "json"], None)?;
        let v: serde_json::Value = serde_json::from_str(&status)?;
        v["header"]["revision"].as_i64().ok_or_else(|| "no revision".into())
    }
}

/// A shardgate following the key.
pub(crate) struct Instance {
    name: String,
    pub(crate) port: u16,
    admin: u16,
    pub(crate) child: Option<Child>,
    local_copy: PathBuf,
}

impl Instance {
    pub(crate) async fn start(dir: &Path, endpoints: &str, name: &str) -> Result<Instance, BoxError> {
        let (port, admin) = free_ports()?;
        let mut i =
            Instance { name: name.into(), port, admin, child: None, local_copy: dir.join(format!("{name}.json")) };
        i.run(dir, endpoints).await?;
        Ok(i)
    }

    async fn run(&mut self, dir: &Path, endpoints: &str) -> TestResult {
        let log = std::fs::File::create(dir.join(format!("{}.log", self.name)))?;
        let child = Command::new(env!("CARGO_BIN_EXE_shardgate"))
            .arg("serve")
            .args(["--source", &format!("etcd://{endpoints}{KEY}")])
            .args(["--listen", &format!("127.0.0.1:{}", self.port), "--admin", &format!("127.0.0.1:{}", self.admin)])
            .args(["--instance", &self.name, "--progress", "300ms"])
            .arg("--local-copy")
            .arg(&self.local_copy)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        self.child = Some(Child(child));
        let deadline = Instant::now() + Duration::from_secs(15);
        while get(&self.url("/ready")).await.map(|r| r.status.as_u16()).unwrap_or(0) != 200 {
            if Instant::now() > deadline {
                return Err(format!("{} did not become ready", self.name).into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin)
    }

    pub(crate) async fn sha256(&self) -> Result<String, BoxError> {
        Ok(get(&self.url("/config")).await?.json()?["sha256"].as_str().unwrap_or_default().to_string())
    }

    async fn metric(&self, name: &str) -> Result<f64, BoxError> {
        let body = get(&self.url("/metrics")).await?.body;
        let text = String::from_utf8_lossy(&body).into_owned();
        let line = text.lines().find(|l| l.starts_with(name)).ok_or_else(|| format!("no {name}"))?;
        Ok(line.rsplit(' ').next().unwrap_or("").parse()?)
    }
}

pub(crate) fn sha256(text: &str) -> String {
    shardgate::routing::shared::sha256_hex(text)
}

/// Waits until every instance runs `text`; how long it took from `since`.
async fn converged(instances: &[&Instance], text: &str, since: Instant) -> Result<Duration, BoxError> {
    let want = sha256(text);
    let deadline = since + Duration::from_secs(10);
    for i in instances {
        while i.sha256().await? != want {
            if Instant::now() > deadline {
                return Err(format!("{} did not apply the revision within 10 s", i.name).into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    Ok(since.elapsed())
}

/// `/fleet` of `at` once `done` holds of it (within 5 s).
async fn fleet_where(at: &Instance, done: impl Fn(&serde_json::Value) -> bool) -> Result<serde_json::Value, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let fleet = get(&at.url("/fleet")).await?.json()?;
        if done(&fleet) {
            return Ok(fleet);
        }
        if Instant::now() > deadline {
            return Err(format!("the fleet view did not settle: {fleet}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The table of revision `n`: the base table and one more country.
fn revision(base: &str, n: u32) -> String {
    base.replace(
        "  US: { id: 1, region: us }",
        &format!("  US: {{ id: 1, region: us }}\n  C{n}: {{ id: {}, region: eu }}", 100 + n),
    )
}

#[tokio::test]
async fn etcd_three_instances_follow_every_revision_and_the_fleet_sees_them() -> TestResult {
    if !etcd_installed()? {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let mut cluster = Cluster::start(dir.path()).await?;
    let [eu, kz, us] = three_backends().await?;
    let base = table(eu.addr, kz.addr, us.addr, "");
    cluster.put(&base)?;
    let endpoints = cluster.endpoints();
    let mut instances = Vec::new();
    for name in ["gw-1", "gw-2", "gw-3"] {
        instances.push(Instance::start(dir.path(), &endpoints, name).await?);
    }
    let all: Vec<&Instance> = instances.iter().collect();
    converged(&all, &base, Instant::now()).await?;

    // 20 successive revisions, each applied by all three.
    let mut took = Vec::new();
    for n in 0..20 {
        let text = revision(&base, n);
        let put = Instant::now();
        cluster.put(&text)?;
        took.push(converged(&all, &text, put).await?);
    }
    took.sort();
    let p99 = took[took.len() - 1];
    assert!(p99 < Duration::from_secs(2), "convergence p99 {p99:?}: {took:?}");
    eprintln!("convergence from put to the last instance: median {:?}, max {p99:?}", took[took.len() / 2]);

    // The fleet: three instances on the key's revision, none behind (each
    // publishes what it runs just after it swaps).
    let fleet = fleet_where(&instances[0], |f| f["behind"] == 0).await?;
    let listed = fleet["instances"].as_array().ok_or("no instances")?;
    assert_eq!(listed.len(), 3, "{fleet}");
    assert_eq!(fleet["behind"], 0, "{fleet}");
    assert!(listed.iter().all(|i| i["revision"] == fleet["revision"]), "{fleet}");

    // A bad revision: rejected by all three with its located errors; the last good table serves.
    let good = revision(&base, 19);
    let bad = good.replace("version: 1", "version: 1\nbogus: true");
    cluster.put(&bad)?;
    let rejected = |f: &serde_json::Value| {
        f["instances"].as_array().map_or(0, |a| a.iter().filter(|i| !i["rejected"].is_null()).count())
    };
    let fleet = fleet_where(&instances[1], |f| rejected(f) == 3).await?;
    for i in fleet["instances"].as_array().ok_or("no instances")? {
        let errors = i["rejected"]["errors"].to_string();
        assert!(errors.contains(&format!("{KEY}:2:1: bogus")), "{i}");
        assert_eq!(i["behind"], true, "{i}");
    }
    for i in &instances {
        assert_eq!(i.sha256().await?, sha256(&good), "{} changed its table", i.name);
        let r = get(&format!("http://127.0.0.1:{}/v1/orders/{}", i.port, iuid(7))).await?;
        assert_eq!(r.status, 200);
    }

    // One member killed: the others carry on, and so do the instances.
    cluster.kill(0);
    // The two left elect a leader if it was the one killed.
    cluster.wait_healthy(Duration::from_secs(20)).await?;
    let text = revision(&base, 40);
    let put = Instant::now();
    cluster.put(&text)?;
    let took = converged(&all, &text, put).await?;
    assert!(took < Duration::from_secs(5), "with a member down: {took:?}");
    let fleet = fleet_where(&instances[2], |f| f["behind"] == 0).await?;
    assert!(fleet["instances"].as_array().is_some_and(|a| a.iter().all(|i| i["rejected"].is_null())), "{fleet}");
    Ok(())
}

#[tokio::test]
async fn etcd_down_the_last_good_table_serves_a_restart_starts_from_the_local_copy_and_a_compaction_resyncs(
) -> TestResult {
    if !etcd_installed()? {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let mut cluster = Cluster::start(dir.path()).await?;
    let [eu, kz, us] = three_backends().await?;
    let base = table(eu.addr, kz.addr, us.addr, "");
    let first = revision(&base, 1);
    cluster.put(&first)?;
    let endpoints = cluster.endpoints();
    let mut a = Instance::start(dir.path(), &endpoints, "gw-a").await?;
    let mut b = Instance::start(dir.path(), &endpoints, "gw-b").await?;
    converged(&[&a, &b], &first, Instant::now()).await?;

    // Every member stopped: both keep serving; staleness grows; /fleet says so.
    for i in 0..3 {
        cluster.kill(i);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let stale = a.metric("shardgate_table_source_staleness_seconds").await?;
    assert!(stale >= 1.0, "staleness {stale}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(a.metric("shardgate_table_source_staleness_seconds").await? > stale);
    let fleet = get(&a.url("/fleet")).await?.json()?;
    assert_eq!(fleet["reachable"], false, "{fleet}");
    assert!(fleet["error"].as_str().is_some_and(|e| e.contains("etcd not reachable")), "{fleet}");
    for i in [&a, &b] {
        let r = get(&format!("http://127.0.0.1:{}/v1/orders/{}", i.port, iuid(7))).await?;
        assert_eq!((r.status.as_u16(), r.json()?["region"].as_str().map(str::to_string)), (200, Some("kz".into())));
    }

    // Restarted while etcd is down: it starts from its local copy.
    a.child = None;
    a.run(dir.path(), &endpoints).await?;
    assert_eq!(a.sha256().await?, sha256(&first));
    let fleet = get(&a.url("/fleet")).await?.json()?;
    assert_eq!(fleet["instances"][0]["from_local_copy"], true, "{fleet}");

    // etcd back; b is frozen while revisions are put and compacted past
    // what its watch has seen: on waking it reads the key again and misses nothing.
    for i in 0..3 {
        cluster.run(i, "existing")?;
    }
    cluster.wait_healthy(Duration::from_secs(20)).await?;
    let pid = b.child.as_ref().map(|c| c.0.id().to_string()).ok_or("no b")?;
    Command::new("kill").args(["-STOP", &pid]).status()?;
    let mut last = String::new();
    let mut rev = 0;
    for n in 2..6 {
        last = revision(&base, n);
        rev = cluster.put(&last)?;
    }
    cluster.etcdctl(&["compact", &rev.to_string()], None)?;
    Command::new("kill").args(["-CONT", &pid]).status()?;
    converged(&[&a, &b], &last, Instant::now()).await?;
    let stale = b.metric("shardgate_table_source_staleness_seconds").await?;
    assert!(stale < 1.0, "b still stale after etcd came back: {stale}");

    // An invalid table in etcd when an instance starts: it starts from its
    // local copy (the last good table) and reports the rejection.
    cluster.put(&last.replace("version: 1", "version: 1\nbogus: 1"))?;
    b.child = None;
    b.run(dir.path(), &endpoints).await?;
    assert_eq!(b.sha256().await?, sha256(&last));
    let fleet = fleet_where(&a, |f| {
        f["instances"].as_array().is_some_and(|l| l.iter().any(|i| i["instance"] == "gw-b" && !i["rejected"].is_null()))
    })
    .await?;
    assert!(fleet.to_string().contains("bogus"), "{fleet}");
    Ok(())
}

/// One etcd member with `extra` flags on `scheme` (http or https); its client port.
async fn single(dir: &Path, scheme: &str, extra: &[&str]) -> Result<(Child, u16), BoxError> {
    let ports = free_ports()?;
    Ok((single_on(dir, "solo", ports, scheme, extra)?, ports.0))
}

/// The member `single` starts, from data directory `data` under `dir`, on
/// the `(client, peer)` ports.
fn single_on(
    dir: &Path,
    data: &str,
    (client, peer): (u16, u16),
    scheme: &str,
    extra: &[&str],
) -> Result<Child, BoxError> {
    let log = std::fs::File::create(dir.join(format!("{data}.log")))?;
    let child = Command::new("etcd")
        .args(["--name", "solo"])
        .arg("--data-dir")
        .arg(dir.join(data))
        .args(["--listen-client-urls", &format!("{scheme}://127.0.0.1:{client}")])
        .args(["--advertise-client-urls", &format!("{scheme}://127.0.0.1:{client}")])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args(["--initial-cluster", &format!("solo=http://127.0.0.1:{peer}")])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    Ok(Child(child))
}

/// `etcdctl` against one member with `auth` flags (TLS files, user).
fn etcdctl_with(port: u16, scheme: &str, auth: &[String], args: &[&str], input: &str) -> Result<String, BoxError> {
    use std::io::Write;
    let mut child = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &format!("{scheme}://127.0.0.1:{port}"), "--command-timeout", "5s"])
        .args(auth)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(format!("etcdctl {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Retries `f` for up to 20 s (a member that just started).
async fn eventually<T>(mut f: impl FnMut() -> Result<T, BoxError>) -> Result<T, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// A shardgate following `source` with `extra` flags (and `env`); ready, and its admin port.
async fn follower(dir: &Path, source: &str, extra: &[String], env: &[(&str, &str)]) -> Result<(Child, u16), BoxError> {
    let (port, admin) = free_ports()?;
    let log = std::fs::File::create(dir.join("follower.log"))?;
    let child = Command::new(env!("CARGO_BIN_EXE_shardgate"))
        .args(["serve", "--source", source])
        .args(["--listen", &format!("127.0.0.1:{port}"), "--admin", &format!("127.0.0.1:{admin}")])
        .arg("--local-copy")
        .arg(dir.join("copy.json"))
        .args(extra)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    let mut child = Child(child);
    let deadline = Instant::now() + Duration::from_secs(15);
    while get(&format!("http://127.0.0.1:{admin}/ready")).await.map(|r| r.status.as_u16()).unwrap_or(0) != 200 {
        if let Some(status) = child.0.try_wait()? {
            let log = std::fs::read_to_string(dir.join("follower.log")).unwrap_or_default();
            return Err(format!("the follower exited ({status}):\n{log}").into());
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(dir.join("follower.log")).unwrap_or_default();
            return Err(format!("the follower did not become ready:\n{log}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((child, admin))
}

/// Waits (10 s at most) until the instance with admin port `admin` runs `text`.
async fn applies(admin: u16, text: &str, who: &str) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&format!("http://127.0.0.1:{admin}/config")).await?.json()?["sha256"] != sha256(text) {
        if Instant::now() > deadline {
            return Err(format!("{who} did not apply the new revision").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[tokio::test]
async fn etcd_over_tls_with_a_client_certificate_and_with_a_user() -> TestResult {
    if !etcd_installed()? {
        return Ok(());
    }
    let [eu, kz, us] = three_backends().await?;
    let base = table(eu.addr, kz.addr, us.addr, "");

    // TLS, the client certificate required.
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let ca = crate::tls::Ca::new("etcd test CA")?;
    let server = ca.leaf("etcd")?;
    let client = ca.leaf("shardgate")?;
    let ca_file = crate::tls::write(d, "ca.crt", &ca.pem())?;
    let (server_crt, server_key) =
        (crate::tls::write(d, "etcd.crt", &server.cert_pem)?, crate::tls::write(d, "etcd.key", &server.key_pem)?);
    let (client_crt, client_key) =
        (crate::tls::write(d, "sg.crt", &client.cert_pem)?, crate::tls::write(d, "sg.key", &client.key_pem)?);
    let tls =
        ["--cert-file", &server_crt, "--key-file", &server_key, "--client-cert-auth", "--trusted-ca-file", &ca_file];
    let (_etcd, port) = single(d, "https", &tls).await?;
    let auth: Vec<String> =
        ["--cacert", &ca_file, "--cert", &client_crt, "--key", &client_key].map(String::from).to_vec();
    eventually(|| etcdctl_with(port, "https", &auth, &["put", KEY], &base)).await?;
    let flags: Vec<String> =
        ["--etcd-ca", &ca_file, "--etcd-cert", &client_crt, "--etcd-key", &client_key].map(String::from).to_vec();
    let source = format!("etcd://127.0.0.1:{port}{KEY}");
    let (_sg, admin) = follower(d, &source, &flags, &[]).await?;
    let next = revision(&base, 7);
    etcdctl_with(port, "https", &auth, &["put", KEY], &next)?;
    applies(admin, &next, "the TLS follower").await?;
    // Without the client certificate etcd refuses it, and it does not start (no local copy).
    let other = tempfile::tempdir()?;
    let refused = follower(other.path(), &source, &["--etcd-ca".to_string(), ca_file.clone()], &[]).await;
    let why = refused.err().ok_or("started without the client certificate etcd requires")?.to_string();
    assert!(why.contains("exited") && why.contains("no local copy"), "{why}");

    // A user: authentication on, the password from the environment.
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let (_etcd, port) = single(d, "http", &[]).await?;
    eventually(|| etcdctl_with(port, "http", &[], &["user", "add", "root:rootpw"], "")).await?;
    etcdctl_with(port, "http", &[], &["auth", "enable"], "")?;
    let root = vec!["--user".to_string(), "root:rootpw".to_string()];
    etcdctl_with(port, "http", &root, &["put", KEY], &base)?;
    let source = format!("etcd://127.0.0.1:{port}{KEY}");
    let user = ["--etcd-user".to_string(), "root".to_string()];
    let (_sg, admin) = follower(d, &source, &user, &[("SHARDGATE_ETCD_PASSWORD", "rootpw")]).await?;
    let next = revision(&base, 8);
    etcdctl_with(port, "http", &root, &["put", KEY], &next)?;
    applies(admin, &next, "the authenticated follower").await?;
    // The fleet report was written with the same token.
    let fleet = get(&format!("http://127.0.0.1:{admin}/fleet")).await?.json()?;
    assert_eq!(fleet["reachable"], true, "{fleet}");
    let other = tempfile::tempdir()?;
    let wrong = follower(other.path(), &source, &user, &[("SHARDGATE_ETCD_PASSWORD", "wrong")]).await;
    let why = wrong.err().ok_or("started with a wrong etcd password")?.to_string();
    assert!(why.contains("authentication as root failed"), "{why}");
    Ok(())
}

/// etcd's revision after a put of `text` at the table key of the member on `port`.
fn put_at(port: u16, text: &str) -> Result<i64, BoxError> {
    etcdctl_with(port, "http", &[], &["put", KEY], text)?;
    let got: serde_json::Value =
        serde_json::from_str(&etcdctl_with(port, "http", &[], &["get", KEY, "-w", "json"], "")?)?;
    got["header"]["revision"].as_i64().ok_or_else(|| "no revision".into())
}

#[tokio::test]
async fn etcd_restored_from_an_older_snapshot_is_followed_from_its_own_revisions() -> TestResult {
    if !etcd_installed()? {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let ports = free_ports()?;
    let (port, peer) = ports;
    let etcd = single_on(d, "solo", ports, "http", &[])?;
    let [eu, kz, us] = three_backends().await?;
    let base = table(eu.addr, kz.addr, us.addr, "");
    eventually(|| put_at(port, &base)).await?;
    let snapshot = d.join("snapshot.db");
    let snapshot = snapshot.to_str().ok_or("path")?;
    etcdctl_with(port, "http", &[], &["snapshot", "save", snapshot], "")?;
    let source = format!("etcd://127.0.0.1:{port}{KEY}");
    let progress = ["--progress".to_string(), "300ms".to_string()];
    let (_sg, admin) = follower(d, &source, &progress, &[]).await?;
    let mut last = (String::new(), 0);
    for n in 1..8 {
        let text = revision(&base, n);
        last = (text.clone(), put_at(port, &text)?);
    }
    applies(admin, &last.0, "the follower").await?;

    // etcd restored from the snapshot: its revisions start again below
    // the one the follower runs, and its next put is one of those.
    drop(etcd);
    let restored = d.join("restored");
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["snapshot", "restore", snapshot, "--name", "solo"])
        .arg("--data-dir")
        .arg(&restored)
        .args(["--initial-cluster", &format!("solo=http://127.0.0.1:{peer}")])
        .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .output()?;
    assert!(out.status.success(), "restore: {}", String::from_utf8_lossy(&out.stderr));
    let _etcd = single_on(d, "restored", ports, "http", &[])?;
    let after = revision(&base, 20);
    let at = eventually(|| put_at(port, &after)).await?;
    assert!(at < last.1, "the restored etcd's put at revision {at} is not below {}", last.1);
    applies(admin, &after, "the follower of the restored etcd").await?;
    // And it goes on following the restored etcd's later revisions.
    let next = revision(&base, 21);
    put_at(port, &next)?;
    applies(admin, &next, "the follower of the restored etcd").await?;
    Ok(())
}
