//! The dashboard in a real browser: headless Chromium driven over
//! WebDriver (Debian's `chromium` and `chromium-driver`), against a running
//! instance with a 256-country table and thousands of overrides.
//!
//! Without `chromedriver` the browser test says so and passes; with
//! `SHARDGATE_REQUIRE_BROWSER=1` (as `.ci/run` sets, after installing
//! both) a missing browser is a failure, so CI never skips it silently.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use http::Request;
use http_body_util::Full;
use serde_json::{json, Value};
use shardgate::app::Instance;
use shardgate::ids::Iuid;
use tokio::net::TcpListener;

use crate::support::{send, three_backends, BoxError, TestResult};

/// A running `chromedriver`, stopped when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find_chromedriver() -> Option<String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("chromedriver"))
        .chain([std::path::PathBuf::from("/usr/lib/chromium/chromedriver")])
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

/// `chromedriver` on a free loopback port, or `None` (with the reason
/// printed) where it is not installed and not required.
async fn driver() -> Result<Option<Driver>, BoxError> {
    let Some(bin) = find_chromedriver() else {
        let why = "no chromedriver on this machine (Debian: apt-get install chromium chromium-driver)";
        if std::env::var_os("SHARDGATE_REQUIRE_BROWSER").is_some() {
            return Err(format!("SHARDGATE_REQUIRE_BROWSER is set but there is {why}").into());
        }
        eprintln!("dashboard browser test skipped: {why}");
        return Ok(None);
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = Command::new(&bin)
        .arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {bin}: {e}"))?;
    let driver = Driver { child, url: format!("http://127.0.0.1:{port}") };
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Ok(Some(driver));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("{bin} did not listen on port {port} within 10 s").into())
}

async fn browser(driver: &Driver) -> Result<Client, BoxError> {
    let mut options = json!({
        "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1800"]
    });
    if std::path::Path::new("/usr/bin/chromium").is_file() {
        options["binary"] = json!("/usr/bin/chromium");
    }
    let caps =
        json!({ "browserName": "chrome", "goog:chromeOptions": options, "goog:loggingPrefs": { "browser": "ALL" } });
    let Value::Object(caps) = caps else { return Err("capabilities".into()) };
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await?;
    Ok(client)
}

/// chromedriver's log of the page's console (`POST /session/{id}/se/log`).
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or("")))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(json!({ "type": "browser" }).to_string()))
    }
}

/// A table of 256 countries (KZ is 7, in kz) over three regions, 12
/// entities and an override for every pair: 3,072.
fn big_table(be: [SocketAddr; 3]) -> String {
    let regions = ["eu", "kz", "us"];
    let mut countries = String::new();
    let mut names = Vec::new();
    let letters: Vec<char> = ('A'..='Z').collect();
    let mut filler = letters.iter().flat_map(|a| letters.iter().map(move |b| format!("{a}{b}"))).filter(|n| n != "KZ");
    for id in 0..=255u16 {
        let name = if id == 7 { "KZ".to_string() } else { filler.next().unwrap_or_default() };
        let region = if id == 7 { "kz" } else { regions[usize::from(id) % 3] };
        countries.push_str(&format!("  {name}: {{ id: {id}, region: {region} }}\n"));
        names.push(name);
    }
    let entities: Vec<String> = (1..=12).map(|i| format!("Entity{i}")).collect();
    let entity_map: Vec<String> = entities.iter().enumerate().map(|(i, e)| format!("{e}: {}", i + 1)).collect();
    let mut overrides = String::new();
    for (i, country) in names.iter().enumerate() {
        for (j, entity) in entities.iter().enumerate() {
            let region = regions[(i + j + 1) % 3];
            overrides.push_str(&format!("  - {{ country: {country}, entity: {entity}, region: {region} }}\n"));
        }
    }
    format!(
        r#"version: 1
regions:
  eu: {{ upstreams: ["http://{}"] }}
  kz: {{ upstreams: ["http://{}"] }}
  us: {{ upstreams: ["http://{}"] }}
countries:
{countries}entities: {{ {} }}
overrides:
{overrides}routes:
  - name: orders
    match: {{ path: "/v1/orders/{{id}}", methods: [GET] }}
    id: {{ path_param: id, formats: [iuid] }}
"#,
        be[0],
        be[1],
        be[2],
        entity_map.join(", ")
    )
}

async fn text(c: &Client, css: &str) -> Result<String, BoxError> {
    Ok(c.find(Locator::Css(css)).await?.text().await?)
}

/// Waits (10 s at most) until the text of `css` contains `want`.
async fn until_text(c: &Client, css: &str, want: &str) -> Result<String, BoxError> {
    let mut seen = String::new();
    for _ in 0..100 {
        if let Ok(t) = text(c, css).await {
            if t.contains(want) {
                return Ok(t);
            }
            seen = t;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("{css} never showed {want:?}; last: {seen:?}").into())
}

async fn count(c: &Client, css: &str) -> Result<usize, BoxError> {
    Ok(c.find_all(Locator::Css(css)).await?.len())
}

#[tokio::test]
async fn the_dashboard_shows_the_table_finds_an_id_keeps_hostile_text_text_and_lists_reloads_rejected_and_unfencing(
) -> TestResult {
    let Some(driver) = driver().await? else { return Ok(()) };
    let backends = three_backends().await?;
    let be = [backends[0].addr, backends[1].addr, backends[2].addr];
    let yaml = big_table(be);
    let (inst, proxy, admin, dir) = instance(&yaml, None).await?;
    // Three samples of traffic, a few requests apart: two rates to draw.
    for _ in 0..3 {
        inst.admin.sample_traffic();
        let id = Iuid::from_fields(1_700_000_000_000, 7, 3, 1);
        send(Request::get(format!("http://{proxy}/v1/orders/{id}")).body(Full::new(Bytes::new()))?).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let c = browser(&driver).await?;
    let result = drive(&c, admin, &dir.path().join(TABLE_FILE), &yaml, be).await;
    let _ = c.close().await;
    inst.start_drain();
    result
}

async fn drive(c: &Client, admin: SocketAddr, path: &std::path::Path, yaml: &str, be: [SocketAddr; 3]) -> TestResult {
    c.goto(&format!("http://{admin}/")).await?;
    // Every region, with its endpoint and its health.
    let regions = until_text(c, "#regions", "kz").await?;
    for (name, addr) in ["eu", "kz", "us"].iter().zip(be) {
        assert!(regions.contains(name) && regions.contains(&addr.to_string()), "{regions}");
    }
    assert_eq!(count(c, "#regions .badge.up").await?, 3, "{regions}");
    // Long lists stay usable: counted, cut at 200 rows, filterable.
    assert_eq!(text(c, "#countries-count").await?, "256 in the table");
    assert_eq!(text(c, "#overrides-count").await?, "3072 in the table");
    assert_eq!(count(c, "#overrides tbody tr").await?, 200);
    c.find(Locator::Css("#overrides-filter")).await?.send_keys("AB").await?;
    assert_eq!(count(c, "#overrides tbody tr").await?, 12);

    // The fleet panel: a table file's instance alone, on its version.
    let fleet = until_text(c, "#fleet", "current").await?;
    assert!(fleet.contains("version 1") && fleet.contains("tables from a file"), "{fleet}");

    // The title names the instance and its role once.
    let title = c.title().await?;
    assert_eq!(title, "shardgate · front door");
    assert_eq!(text(c, "h1").await?, "shardgate front door");
    // Headers and endpoints never break inside a word, at 1,400 px.
    let nowrap = c
        .execute(
            "return [...document.querySelectorAll('th, .endpoint, .when')].every(e => getComputedStyle(e).whiteSpace === 'nowrap')",
            vec![],
        )
        .await?;
    assert_eq!(nowrap, json!(true));
    // Two rates in a ten-minute window: the line starts near the right edge.
    let first_x = c
        .execute(
            "const p = document.querySelector('#traffic svg.spark polyline'); \
             return p ? parseFloat(p.getAttribute('points').split(' ')[0].split(',')[0]) : null",
            vec![],
        )
        .await?;
    assert!(first_x.as_f64().is_some_and(|x| x > 90.0), "the first minute spans the line: x = {first_x}");

    // The id lookup of a KZ iUID: when it was made, its country and entity
    // by name, its fields, and where the route sends it.
    let id = Iuid::from_fields(1_700_000_000_000, 7, 3, 42).to_string();
    c.find(Locator::Css("#lookup-id")).await?.send_keys(&id).await?;
    c.find(Locator::Css("#lookup button")).await?.click().await?;
    until_text(c, "#lookup-routes", "orders").await?;
    assert_eq!(text(c, "#lookup-result .country").await?, "KZ (region kz)");
    assert_eq!(text(c, "#lookup-result .entity").await?, "Entity3 (3)");
    assert_eq!(text(c, "#lookup-result .time").await?, "2023-11-14T22:13:20.000Z");
    if let Some(file) = std::env::var_os("SHARDGATE_SCREENSHOT") {
        let mut lookup = std::path::PathBuf::from(file);
        lookup.set_extension("lookup.png");
        std::fs::write(lookup, c.screenshot().await?)?;
    }
    assert_eq!(text(c, "#lookup-routes .route-region").await?, "kz");
    let link = c.find(Locator::Css("#lookup-routes a")).await?.attr("href").await?.unwrap_or_default();
    assert!(link.ends_with(&format!("/v1/orders/{id}")), "{link}");

    // A hostile id is shown as the text it is, and runs nothing.
    let hostile = r#"<script>window.pwned=1</script><img src=x onerror="window.pwned=2">"#;
    let input = c.find(Locator::Css("#lookup-id")).await?;
    input.clear().await?;
    input.send_keys(hostile).await?;
    c.find(Locator::Css("#lookup button")).await?.click().await?;
    until_text(c, "#lookup-result", "not a valid id").await?;
    assert_eq!(text(c, "#lookup-result .lookup-input").await?, hostile);
    // Each format says why it refused the input.
    assert_eq!(count(c, "#lookup-result .rejected li").await?, 7);
    assert!(text(c, "#lookup-result .rejected").await?.contains("iuid: "));
    let clean = c
        .execute(
            "return window.pwned === undefined && document.querySelectorAll('#lookup-result script, #lookup-result img').length === 0",
            vec![],
        )
        .await?;
    assert_eq!(clean, json!(true), "the hostile id became markup");

    // A bad table, reloaded three times: rejected, listed once with its
    // error's line and how often.
    std::fs::write(path, yaml.replace("region: kz }\n", "region: mars }\n"))?;
    for _ in 0..3 {
        let req = Request::post(format!("http://{admin}/reload")).body(Full::new(Bytes::new()))?;
        assert_eq!(send(req).await?.status, 422);
    }
    c.refresh().await?;
    let reloads = until_text(c, "#reloads", "rejected").await?;
    assert!(reloads.contains("mars") && reloads.contains("line"), "{reloads}");
    assert_eq!(count(c, "#reloads tbody tr").await?, 1, "{reloads}");
    assert!(reloads.contains("×3") && reloads.contains("more (POST /reload lists them all)"), "{reloads}");
    // A table that records a switch, then one without it: the fence it
    // gave up is shown on the second.
    let switched = format!("{yaml}moves: [{{ unit: \"country KZ\", to: kz, phase: switch, epoch: 2 }}]\n");
    for table in [switched.as_str(), yaml] {
        std::fs::write(path, table)?;
        let req = Request::post(format!("http://{admin}/reload")).body(Full::new(Bytes::new()))?;
        assert_eq!(send(req).await?.status, 200);
    }
    c.refresh().await?;
    let reloads = until_text(c, "#reloads .unfenced", "fences given up").await?;
    assert!(reloads.contains("country KZ at epoch 2 (switch): its move is removed"), "{reloads}");
    // The switch back, then an override split out of the switched country
    // without its move: shown with the unit it came out of.
    let line = "  - { country: KZ, entity: Entity1, region: us }\n";
    let without = switched.replace(line, "");
    assert_ne!(without, switched);
    for table in [without.as_str(), switched.as_str()] {
        std::fs::write(path, table)?;
        let req = Request::post(format!("http://{admin}/reload")).body(Full::new(Bytes::new()))?;
        assert_eq!(send(req).await?.status, 200);
    }
    c.refresh().await?;
    let reloads = until_text(c, "#reloads", "split out of").await?;
    let split = "override KZ:Entity1, split out of country KZ at epoch 2 (switch): it has no move";
    assert!(reloads.contains(split), "{reloads}");
    // A picture of it all, to look at (`SHARDGATE_SCREENSHOT=path`).
    if let Some(file) = std::env::var_os("SHARDGATE_SCREENSHOT") {
        std::fs::write(file, c.screenshot().await?)?;
    }

    // And no errors on the console all along.
    let log = c.issue_cmd(BrowserLog).await?;
    let severe: Vec<&Value> = log.as_array().into_iter().flatten().filter(|e| e["level"] == "SEVERE").collect();
    assert!(severe.is_empty(), "console errors: {severe:#?}");
    Ok(())
}

/// The table file's name in an [`instance`]'s directory.
const TABLE_FILE: &str = "table.yaml";

/// An instance of `yaml` (from the file [`TABLE_FILE`] in the returned
/// directory, with admin token `token`) serving on loopback: its proxy and
/// admin addresses.
async fn instance(
    yaml: &str,
    token: Option<&str>,
) -> Result<(Arc<Instance>, SocketAddr, SocketAddr, tempfile::TempDir), BoxError> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join(TABLE_FILE);
    std::fs::write(&path, yaml)?;
    let cfg = shardgate::config::load_str(yaml, TABLE_FILE).map_err(|e| format!("test table invalid:\n{e}"))?;
    let inst = Arc::new(Instance::new(&cfg, yaml, Some(path), token.map(str::to_string)));
    let (proxy_l, admin_l) = (TcpListener::bind("127.0.0.1:0").await?, TcpListener::bind("127.0.0.1:0").await?);
    let (proxy, admin) = (proxy_l.local_addr()?, admin_l.local_addr()?);
    let opts = shardgate::app::server_options(&cfg);
    let running = Arc::clone(&inst);
    tokio::spawn(async move { running.run(proxy_l, Some(admin_l), opts).await });
    Ok((inst, proxy, admin, dir))
}

fn admin_req(method: &str, url: String, auth: Option<String>) -> Result<Request<Full<Bytes>>, BoxError> {
    let mut req = Request::builder().method(method).uri(url);
    if let Some(auth) = auth {
        req = req.header("authorization", auth);
    }
    Ok(req.body(Full::new(Bytes::new()))?)
}

#[tokio::test]
async fn the_dashboard_takes_the_admin_token_its_data_has_rates_per_region_and_lookups_link_to_the_proxy() -> TestResult
{
    use base64::Engine as _;
    let backends = three_backends().await?;
    let yaml = crate::support::table(backends[0].addr, backends[1].addr, backends[2].addr, "");
    let (inst, proxy, admin, _dir) = instance(&yaml, Some("s3cret")).await?;
    let basic = |user_pass: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(user_pass));

    // A browser is asked for credentials; the token works as a Basic password for reading.
    let got = send(admin_req("GET", format!("http://{admin}/"), None)?).await?;
    assert_eq!(got.status, 401);
    assert!(
        got.header("www-authenticate").is_some_and(|v| v.contains("Basic")),
        "{:?}",
        got.header("www-authenticate")
    );
    let got = send(admin_req("GET", format!("http://{admin}/"), Some(basic("ops:wrong")))?).await?;
    assert_eq!(got.status, 401);
    let got = send(admin_req("GET", format!("http://{admin}/"), Some(basic("ops:s3cret")))?).await?;
    assert_eq!(got.status, 200);
    assert_eq!(got.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(got.header("content-security-policy").is_some_and(|v| v.contains("script-src 'self'")));
    assert!(String::from_utf8_lossy(&got.body).contains("/dashboard.js"));
    // Writes take the bearer token only: remembered browser credentials cannot drain.
    let got = send(admin_req("POST", format!("http://{admin}/drain"), Some(basic("ops:s3cret")))?).await?;
    assert_eq!(got.status, 401);
    assert!(!inst.drain().is_draining());
    let bearer = Some("Bearer s3cret".to_string());
    assert_eq!(send(admin_req("POST", format!("http://{admin}/reload"), bearer.clone())?).await?.status, 200);

    // Traffic: two samples around some requests give each region's rates.
    inst.admin.sample_traffic();
    let ids = [(7, "kz"), (49, "eu"), (49, "eu")];
    for (country, _) in ids {
        let id = Iuid::from_fields(1_700_000_000_000, country, 3, 1);
        let got = send(admin_req("GET", format!("http://{proxy}/v1/orders/{id}"), None)?).await?;
        assert_eq!(got.status, 200);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    inst.admin.sample_traffic();
    let got = send(admin_req("GET", format!("http://{admin}/dashboard.json"), bearer.clone())?).await?;
    let data = got.json()?;
    let point = data["traffic"]["points"].as_array().and_then(|p| p.last()).ok_or("no traffic point")?;
    let rps = |region: &str| point["regions"][region]["rps"].as_f64().unwrap_or(0.0);
    assert!(rps("eu") > 0.0 && rps("kz") > 0.0 && rps("eu") > rps("kz"), "{point}");
    assert_eq!(point["outcomes"]["proxied"]["eps"].as_f64(), Some(0.0));
    assert_eq!(data["reloads"][0]["result"], "success");
    assert_eq!(data["view"]["countries"]["KZ"]["id"], 7);
    assert_eq!(data["health"].as_array().map(Vec::len), Some(3));

    // The lookup's link fetches the id through the proxy.
    let id = Iuid::from_fields(1_700_000_000_000, 7, 3, 1).to_string();
    let got = send(admin_req("GET", format!("http://{admin}/explain?id={id}"), bearer)?).await?;
    let explained = got.json()?;
    let orders =
        explained["routes"].as_array().and_then(|r| r.iter().find(|r| r["route"] == "orders")).ok_or("no orders")?;
    assert_eq!(orders["link"], format!("/v1/orders/{id}"));
    assert_eq!(orders["id_in"], "path parameter id");
    let got = send(admin_req("GET", format!("http://{proxy}{}", orders["link"].as_str().unwrap_or("")), None)?).await?;
    assert_eq!((got.status.as_u16(), got.header("x-backend-region")), (200, Some("kz")));
    inst.start_drain();
    Ok(())
}
