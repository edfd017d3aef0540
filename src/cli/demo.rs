//! `shardgate demo`: three in-process regional backends, the embedded demo
//! table pointed at them, the proxy, and ready-to-paste curl commands: for
//! every region of the table, one id of each routable kind that the table
//! places there, found by asking the compiled table itself (so the examples
//! stay right when the demo table changes).

use std::io;
use std::net::SocketAddr;

use http::Method;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{self, Config};
use crate::ids::{self, Decoded, Format, Iuid, LocalityUuid, ManualClock, SystemClock, UniqidMinter};
use crate::routing::Table;
use crate::routing::{IdRule, IdSource, Route, Rule, To};

/// The demo table, embedded in the binary.
pub const DEMO_TABLE: &str = include_str!("../../config/demo.yaml");

/// `shardgate demo`: serves until Ctrl-C (exit 130) or SIGTERM (0).
pub async fn run(listen: SocketAddr) -> io::Result<i32> {
    let mut text = DEMO_TABLE.to_string();
    let mut backends = Vec::new();
    let (stop_tx, stop_rx) = watch::channel(false);
    for (region, placeholder) in [("eu", "127.0.0.1:18081"), ("kz", "127.0.0.1:18082"), ("us", "127.0.0.1:18083")] {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("cannot start the {region} demo backend: {e}")))?;
        let addr = listener.local_addr()?.to_string();
        text = text.replace(placeholder, &addr);
        let mut stop = stop_rx.clone();
        tokio::spawn(super::backend::serve(listener, region.to_string(), async move {
            let _ = stop.wait_for(|s| *s).await;
        }));
        backends.push((region, addr));
    }
    let cfg = config::load_str(&text, "demo.yaml")
        .map_err(|e| io::Error::other(format!("the embedded demo table is invalid (a bug):\n{e}")))?;
    let listener = TcpListener::bind(listen).await.map_err(|e| {
        io::Error::new(e.kind(), format!("cannot listen on {listen}: {e} (choose another address with --listen)"))
    })?;
    // The dashboard, where the table says (a busy port costs only the dashboard).
    let admin = match TcpListener::bind(cfg.settings.restart.admin).await {
        Ok(l) => Some(l),
        Err(e) => {
            eprintln!("shardgate demo: no dashboard: cannot listen on {}: {e}", cfg.settings.restart.admin);
            None
        }
    };
    let table = Table::compile(&cfg);
    let mut intro = format!("shardgate demo: proxy on http://{listen}\n");
    if admin.is_some() {
        let admin = cfg.settings.restart.admin;
        intro.push_str(&format!("  dashboard  on http://{admin}/ (admin endpoints: /metrics, /explain?id=…)\n"));
    }
    for (region, addr) in &backends {
        intro.push_str(&format!("  backend {region:<3} on http://{addr}\n"));
    }
    intro.push('\n');
    for line in curl_examples(&table, &cfg, listen) {
        intro.push_str(&line);
        intro.push('\n');
    }
    intro.push_str("\nPress Ctrl-C to stop.\n");
    // A reader that has gone (`demo | head`) is no reason to stop serving.
    {
        use std::io::Write;
        let mut out = io::stdout().lock();
        let _ = out.write_all(intro.as_bytes()).and_then(|()| out.flush());
    }
    let exit = crate::app::until_signal(|stop| async move {
        let (_, serving) = crate::app::spawn_proxy(&cfg, &text, listener, admin, stop)?;
        let result = serving.await.map_err(io::Error::other).and_then(|served| served.map(drop));
        let _ = stop_tx.send(true);
        result
    })
    .await?;
    Ok(super::stopped(exit))
}

/// One example request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Example {
    /// Region the table places the id in (`None` for the bad-id example).
    pub region: Option<String>,
    /// The override that placed it there, when one did (`override KZ/WalletAccount`).
    pub by_override: Option<String>,
    /// The id's format.
    pub format: Format,
    /// The curl command line.
    pub curl: String,
}

/// Builds the examples: an iUID, a uniqid id and a Locality id per region
/// (where the table has a GET route and an owner for them), an iUID an
/// override places, and a bad id.
pub fn examples(table: &Table, cfg: &Config, listen: SocketAddr) -> Vec<Example> {
    let now = ids::Clock::unix_millis(&SystemClock);
    let mut out = Vec::new();
    let mut bad_done = false;
    for route in &cfg.routes {
        let Some(rule) = &route.id else { continue };
        if !route.allows(&Method::GET) {
            continue;
        }
        for &format in &rule.formats {
            let mut seen = std::collections::BTreeSet::new();
            for id in candidate_ids(format, cfg, now) {
                let Some(path) = path_for(route, rule, &id.to_string()) else { continue };
                let Some(m) = table.match_route(&Method::GET, &path) else { continue };
                let Ok(p) = table.place(&id, m.route.strategy) else { continue };
                let region = table.region(p.region).name.clone();
                let by_override = matches!(p.rule, Rule::Override { .. }).then(|| table.explain(p.rule).to_string());
                if seen.insert((region.clone(), by_override.is_some())) {
                    out.push(Example {
                        region: Some(region),
                        by_override,
                        format,
                        curl: curl_for(rule, &id.to_string(), &path, listen),
                    });
                }
            }
        }
        let first_is_iuid = rule.formats.first() == Some(&Format::Iuid);
        if !bad_done && first_is_iuid && matches!(rule.source, IdSource::PathParam(_)) {
            if let Some(path) = path_for(route, rule, "not-an-id") {
                out.push(Example {
                    region: None,
                    by_override: None,
                    format: Format::Iuid,
                    curl: curl_for(rule, "not-an-id", &path, listen),
                });
                bad_done = true;
            }
        }
    }
    out
}

/// The lines `demo` prints.
pub fn curl_examples(table: &Table, cfg: &Config, listen: SocketAddr) -> Vec<String> {
    let mut lines = Vec::new();
    for e in examples(table, cfg, listen) {
        match (&e.region, &e.by_override) {
            (Some(r), Some(rule)) => lines.push(format!("# {} id owned by region {r} ({rule})", e.format)),
            (Some(r), None) => lines.push(format!("# {} id owned by region {r}", e.format)),
            (None, _) => lines.push("# a malformed id: 400 problem+json".to_string()),
        }
        lines.push(e.curl);
    }
    lines.extend(global_read_examples(cfg, listen));
    lines.extend(front_door_examples(cfg, listen));
    lines
}

/// A curl for each route without an id: where it goes, and the path the
/// backend is asked for when the route rewrites it.
pub fn front_door_examples(cfg: &Config, listen: SocketAddr) -> Vec<String> {
    let mut lines = Vec::new();
    for route in cfg.routes.iter().filter(|r| r.to.is_some()) {
        let (region, whose) = match route.to {
            Some(To::Region(i)) => (Some(i), "always region"),
            _ => (cfg.local_region.or(cfg.default_region), "the local region,"),
        };
        let Some(region) = region.and_then(|i| cfg.regions.get(i)).map(|r| r.name.as_str()) else { continue };
        let (path, note) = match route.template.strip_suffix("{*rest}") {
            Some(prefix) => (format!("{prefix}v1/things"), " (a prefix; the backend is asked for /v1/things)"),
            None => (route.template.clone(), ""),
        };
        let note = if route.rewrite.is_some() { note } else { "" };
        lines.push(format!("# route {}: no id, {whose} {region}{note}", route.name));
        let post = route.methods.as_ref().is_some_and(|m| !m.contains(&Method::GET));
        let method = if post { "-X POST " } else { "" };
        lines.push(format!("curl -s {method}http://{listen}{path}"));
    }
    lines
}

/// A curl for each fan-out route (one user's orders, from every region)
/// and each search route (a legacy id that only the last region holds).
pub fn global_read_examples(cfg: &Config, listen: SocketAddr) -> Vec<String> {
    let mut lines = Vec::new();
    for route in &cfg.routes {
        let template = &route.template;
        if route.fanout.is_some() {
            let Some(path) = fill(template, "alice") else { continue };
            lines.push(format!("# route {}: alice's orders from every region, newest first (fan-out)", route.name));
            lines.push(format!("curl -s 'http://{listen}{path}?limit=5'"));
        } else if let (Some(rule), Some(search)) = (&route.id, &route.search) {
            let Some(region) = search.regions.last().and_then(|&i| cfg.regions.get(i)) else { continue };
            let Some(id) = super::backend::legacy_ids(&region.name).into_iter().next() else { continue };
            let Some(path) = path_for(route, rule, &id) else { continue };
            lines.push(format!(
                "# route {}: a legacy id only region {} holds (searched once, then remembered)",
                route.name, region.name
            ));
            lines.push(curl_for(rule, &id, &path, listen));
        }
    }
    lines
}

/// `template` with its one parameter set to `value` (`None` with more or fewer).
fn fill(template: &str, value: &str) -> Option<String> {
    let start = template.find('{')?;
    let end = start + template[start..].find('}')?;
    let rest = &template[end + 1..];
    (!rest.contains('{')).then(|| format!("{}{value}{rest}", &template[..start]))
}

fn candidate_ids(format: Format, cfg: &Config, now: u64) -> Vec<Decoded> {
    let mut rng = rand::rng();
    match format {
        // Every country with every entity: what overrides place shows too.
        Format::Iuid => {
            let entities: Vec<u8> = match cfg.entities.is_empty() {
                true => vec![0],
                false => cfg.entities.iter().map(|e| e.code).collect(),
            };
            cfg.countries
                .iter()
                .flat_map(|c| entities.iter().map(move |&e| (c.id, e)))
                .map(|(country, entity)| Decoded::Iuid(Iuid::from_fields(now, country, entity, rand::random())))
                .collect()
        }
        Format::Uniqid => {
            let total = cfg.shards.as_ref().map_or(16, |s| s.count).max(1);
            let clock = ManualClock::from_millis(now);
            let m = UniqidMinter::new(&clock, total);
            (0..total).filter_map(|s| m.mint_for_shard(s, &mut rng)).map(Decoded::Uniqid).collect()
        }
        Format::Locality => cfg
            .nodes
            .locality_mac
            .iter()
            .map(|&(mac, _)| Decoded::Locality(LocalityUuid::from_fields(rand::random(), 1, mac, now)))
            .collect(),
        _ => Vec::new(),
    }
}

/// The route's path with `id` in its id parameter (or the template itself,
/// when the id is not in the path and the template has no parameter).
fn path_for(route: &Route, rule: &IdRule, id: &str) -> Option<String> {
    let template = &route.template;
    match &rule.source {
        IdSource::PathParam(p) => Some(template.replace(&format!("{{{p}}}"), id)),
        _ if !template.contains('{') => Some(template.clone()),
        _ => None,
    }
}

fn curl_for(rule: &IdRule, id: &str, path: &str, listen: SocketAddr) -> String {
    match &rule.source {
        IdSource::Header(h) => format!("curl -s -H '{h}: {id}' http://{listen}{path}"),
        IdSource::Query(q) => format!("curl -s 'http://{listen}{path}?{q}={id}'"),
        IdSource::PathParam(_) | IdSource::GrpcField(_) => format!("curl -s http://{listen}{path}"),
    }
}
