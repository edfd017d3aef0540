//! The admin listener: a separate HTTP server (loopback by default, `admin:`
//! in the table, restart-only) for probes, metrics, the active table, reload,
//! drain and `explain`.
//!
//! | endpoint | method | answer |
//! |---|---|---|
//! | `/live`, `/livez` | GET | 200 while the process runs |
//! | `/ready`, `/readyz`, `/healthz` | GET | 200 with a table loaded and not draining, else 503 |
//! | `/metrics` | GET | Prometheus metrics (OpenMetrics text) |
//! | `/config` | GET | the active table's text, sha256, load time and version |
//! | `/reload` | POST | reload the table file now: 200 with the outcome (the units that moved, the fences given up), 422 with every error |
//! | `/reload?dry_run=1` | POST | the plan of the table in the body (or of the file, with an empty body) against the running one, with each unit's traffic; nothing applied |
//! | `/fleet` | GET | every instance following the same etcd key: the revision each runs, since when, what it rejected, who is behind (a table file: this instance alone) |
//! | `/placement` | GET | the requests each placement unit placed over the last five minutes (what `plan` reads) |
//! | `/drain` | POST | start the graceful drain (as SIGTERM does): 202 |
//! | `/explain?id=…[&route=…]` | GET | decoded fields, every valid format, region and rule, the link that fetches it (a search route: where the id was found; a fan-out route: its regions) |
//! | `/` (and `/dashboard.js`, `/dashboard.css`) | GET | the dashboard: table, health, traffic, reloads, id lookup |
//! | `/dashboard.json` | GET | what the dashboard shows |
//!
//! When the environment variable [`TOKEN_ENV`] is set (and not empty), every
//! endpoint except the probes (`/live*`, `/ready*`, `/healthz`) requires
//! `Authorization: Bearer <token>`; the token stays out of the routing table
//! so the table can be shared and logged. For a browser, `GET` and `HEAD`
//! also take HTTP Basic credentials whose password is the token (any user
//! name; a 401 asks for them); `POST` takes only the bearer token, so a page
//! elsewhere cannot drain or reload with credentials the browser remembers.
//! Without a token, what a page on another site could make a browser send
//! is refused with 403: a `Host` other than the listener's own address or a
//! loopback name (DNS rebinding), and a `POST` that is cross-site (`Origin`,
//! `Sec-Fetch-Site`) or a form. At its connection cap the listener closes
//! the oldest connection that has sent nothing to make room for a new one,
//! so silent sockets cannot starve the probes. Errors are problem+json: 401,
//! 403, 404 for an unknown path, 405 (with `Allow`) for a wrong method.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

mod dashboard;
mod error;
mod explain;
pub mod traffic;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::metrics::{self, ScrapeInputs};
use crate::problem::{http1_answer, Problem};
use crate::proxy::Shared;
use crate::routing::shared::iso_time;
use crate::routing::{Provenance, ReloadError, Reloader, SharedTable};
use crate::server::accept::Acceptor;
use crate::server::idle::{until_idle, Watched};
use crate::server::{Refused, ServerOptions};
pub use error::AdminError;

/// The environment variable holding the admin bearer token.
pub const TOKEN_ENV: &str = "SHARDGATE_ADMIN_TOKEN";

/// The admin token from [`TOKEN_ENV`]; `None` when unset or empty.
pub fn token_from_env() -> Option<String> {
    std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty())
}

/// What the admin endpoints read and act on.
#[derive(Debug)]
pub struct AdminState {
    shared: Shared,
    reloader: Option<Arc<Reloader>>,
    token: Option<String>,
    traffic: traffic::Traffic,
    view: dashboard::TableView,
    fleet: std::sync::OnceLock<Arc<crate::source::fleet::Fleet>>,
}

impl AdminState {
    /// State over what the proxy shares (its table, metrics, health, drain
    /// and upstream counters); `reloader` is the table file's reloader
    /// (`None`: `/reload` answers 409).
    pub fn new(shared: Shared, reloader: Option<Arc<Reloader>>) -> AdminState {
        AdminState {
            shared,
            reloader,
            token: None,
            traffic: Default::default(),
            view: Default::default(),
            fleet: Default::default(),
        }
    }

    /// Requires `Authorization: Bearer <token>` on every non-probe endpoint.
    pub fn with_token(mut self, token: Option<String>) -> AdminState {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// Answers `/fleet` from `fleet` (the table follows etcd).
    pub fn set_fleet(&self, fleet: Arc<crate::source::fleet::Fleet>) {
        let _ = self.fleet.set(fleet);
    }

    async fn fleet(&self) -> Value {
        match self.fleet.get() {
            Some(f) => f.view().await,
            None => {
                let snap = self.table().snapshot();
                let settings = &snap.table.settings().restart;
                json!({
                    "source": self.reloader.as_ref().map(|r| r.source().to_string()),
                    "reachable": true,
                    "instances": [{
                        "instance": settings.instance,
                        "region": settings.region,
                        "version": snap.version,
                        "sha256": snap.sha256,
                        "applied_at": iso_time(snap.loaded_at, 3),
                    }],
                    "note": "tables from a file: each instance runs its own; follow an etcd key (serve --source etcd://...) for a fleet view",
                })
            }
        }
    }

    fn table(&self) -> &Arc<SharedTable> {
        &self.shared.table
    }

    /// Whether `/ready` answers 200: a table is loaded and the drain has not started.
    pub fn ready(&self) -> bool {
        self.table().snapshot().version > 0 && !self.shared.drain.is_draining()
    }

    /// Reads the request totals for the dashboard's traffic (the admin
    /// listener does every [`traffic::INTERVAL`]).
    pub fn sample_traffic(&self) {
        let sample = traffic::Sample::read(&self.render_metrics(), traffic::now());
        self.traffic.push(sample);
    }

    /// The requests each placement unit placed over the last minutes.
    pub fn placement_window(&self) -> crate::routing::plan::Window {
        let now = traffic::Sample::read(&self.render_metrics(), traffic::now());
        self.traffic.window(&now)
    }

    /// The `/metrics` body.
    pub fn render_metrics(&self) -> String {
        let s = &self.shared;
        let endpoints = s.health.report().into_iter().map(|(region, uri, up, ejected)| (region, uri, up && !ejected));
        let inputs = ScrapeInputs {
            reloads: self.reloader.as_ref().map(|r| (r.successes(), r.failures())),
            retries: s.upstreams.retries(),
            connects: s.upstreams.connects(),
            budget_exhausted: s.upstreams.budget_exhausted(),
            endpoints: Some(endpoints.collect()),
            found: s.found.stats(),
            log_dropped: crate::telemetry::dropped_lines(),
            spans: s.traces.as_ref().map(|t| {
                let n = t.totals();
                (n.exported, n.dropped, n.failed)
            }),
            dns: {
                let d = &s.dns;
                let read = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
                (read(&d.answered), read(&d.failed), read(&d.changed))
            },
            source: self.fleet.get().map(|f| {
                let status = f.status();
                (status.revision(), status.stale_seconds(), status.apply_seconds())
            }),
        };
        s.metrics.refresh(&self.table().snapshot(), &inputs);
        s.metrics.render()
    }
}

/// The admin response body.
pub type AdminBody = Full<Bytes>;

/// Serves the admin endpoints on `listener` until `shutdown` resolves. The
/// listener has the proxy's header-read and idle timeouts and a connection
/// limit of its own (`opts.admin_max_connections`), so idle sockets to it
/// cannot use up the process's file descriptors.
pub async fn serve_admin(
    listener: TcpListener,
    state: Arc<AdminState>,
    opts: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(opts.header_read_timeout);
    let graceful = GracefulShutdown::new();
    let metrics = Arc::clone(&state.shared.metrics);
    let refused = Refused::TooManyConnections { limit: opts.admin_max_connections, listener: "admin" };
    let refusal: Arc<[u8]> = http1_answer(&refused, "shardgate-admin").into();
    let mut acceptor =
        Acceptor::new(listener, "admin", opts.admin_max_connections, refusal, Arc::clone(&metrics)).making_room();
    let sampler = tokio::spawn(sample_traffic(Arc::downgrade(&state)));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer, slot) = tokio::select! {
            accepted = acceptor.accept() => accepted,
            () = &mut shutdown => break,
        };
        let state = Arc::clone(&state);
        let open = metrics.connection_opened("admin");
        let local = stream.local_addr().ok();
        let service = service_fn(move |req| {
            let state = Arc::clone(&state);
            async move { Ok::<_, Infallible>(handle(&state, req, local).await) }
        });
        let stream = Watched::new(stream);
        let activity = Arc::clone(&stream.activity);
        slot.watch(&activity);
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service).into_owned());
        tokio::spawn(async move {
            // At the limit, the oldest connection that has sent nothing
            // makes room for the new one (a probe, say).
            tokio::select! {
                () = until_idle(conn, &activity, opts, peer) => {}
                () = slot.closed_for_room() => {}
            }
            drop(open);
            drop(slot);
        });
    }
    drop(acceptor);
    sampler.abort();
    let _ = tokio::time::timeout(Duration::from_secs(2), graceful.shutdown()).await;
    Ok(())
}

/// Reads the traffic totals every [`traffic::INTERVAL`] while the admin state lives.
async fn sample_traffic(state: std::sync::Weak<AdminState>) {
    let mut tick = tokio::time::interval(traffic::INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(state) = state.upgrade() else { return };
        state.sample_traffic();
    }
}

/// Which endpoint a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endpoint {
    Live,
    Ready,
    Metrics,
    Config,
    Reload,
    Drain,
    Explain,
    Placement,
    Fleet,
    Dashboard,
    DashboardData,
}

impl Endpoint {
    fn from_path(path: &str) -> Option<Endpoint> {
        Some(match path {
            "/live" | "/livez" => Endpoint::Live,
            "/ready" | "/readyz" | "/healthz" => Endpoint::Ready,
            "/metrics" => Endpoint::Metrics,
            "/config" => Endpoint::Config,
            "/reload" => Endpoint::Reload,
            "/drain" => Endpoint::Drain,
            "/explain" => Endpoint::Explain,
            "/placement" => Endpoint::Placement,
            "/fleet" => Endpoint::Fleet,
            "/" | "/dashboard.js" | "/dashboard.css" => Endpoint::Dashboard,
            "/dashboard.json" => Endpoint::DashboardData,
            _ => return None,
        })
    }

    fn is_probe(self) -> bool {
        matches!(self, Endpoint::Live | Endpoint::Ready)
    }

    fn is_post(self) -> bool {
        matches!(self, Endpoint::Reload | Endpoint::Drain)
    }
}

/// Answers one admin request that reached the listener's address `local`.
pub async fn handle(state: &AdminState, req: Request<Incoming>, local: Option<SocketAddr>) -> Response<AdminBody> {
    let path = req.uri().path();
    let Some(endpoint) = Endpoint::from_path(path) else {
        return problem(&AdminError::NoEndpoint { path: path.to_string() }, path);
    };
    let basic_ok = !endpoint.is_post();
    if !endpoint.is_probe() && !authorized(state.token.as_deref(), req.headers(), basic_ok) {
        return problem(&AdminError::Unauthorized { basic: basic_ok }, path);
    }
    if state.token.is_none() && !endpoint.is_probe() {
        if let Err(detail) = same_site(&req, endpoint.is_post(), local) {
            return problem(&AdminError::Forbidden { detail }, path);
        }
    }
    let allowed = if endpoint.is_post() {
        *req.method() == Method::POST
    } else {
        matches!(*req.method(), Method::GET | Method::HEAD)
    };
    if !allowed {
        let allow = if endpoint.is_post() { "POST" } else { "GET, HEAD" };
        let err = AdminError::MethodNotAllowed { path: path.to_string(), method: req.method().to_string(), allow };
        return problem(&err, path);
    }
    match endpoint {
        Endpoint::Live => json_response(StatusCode::OK, &json!({ "status": "live" })),
        Endpoint::Ready => ready(state),
        Endpoint::Metrics => {
            let mut resp = Response::new(Full::new(Bytes::from(state.render_metrics())));
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(metrics::CONTENT_TYPE));
            resp
        }
        Endpoint::Config => config(state),
        Endpoint::Reload => match dry_run_asked(req.uri().query()) {
            Ok(true) => dry_run(state, req).await,
            Ok(false) => reload(state).await,
            Err(e) => problem(&e, path),
        },
        Endpoint::Placement => json_response(StatusCode::OK, &json!(state.placement_window())),
        Endpoint::Fleet => json_response(StatusCode::OK, &state.fleet().await),
        Endpoint::Drain => drain(state),
        Endpoint::Explain => {
            explain::explain(&state.table().snapshot(), &state.shared.found, req.uri().query().unwrap_or(""))
        }
        Endpoint::Dashboard => match dashboard::asset(path) {
            Some(resp) => resp,
            None => problem(&AdminError::NoEndpoint { path: path.to_string() }, path),
        },
        Endpoint::DashboardData => dashboard::data(state),
    }
}

/// Without a token, what a browser could be made to send from another site
/// is refused: a request whose `Host` is not this listener's own address or
/// a loopback name (a page on a name rebound to this address, DNS
/// rebinding), and a state-changing request that is cross-site (`Origin`
/// of another host, `Sec-Fetch-Site` other than same-origin or none) or
/// that a plain HTML form can send (form and plain-text bodies).
fn same_site(req: &Request<Incoming>, changes: bool, local: Option<SocketAddr>) -> Result<(), &'static str> {
    let h = req.headers();
    let host = req.uri().authority().map(|a| a.as_str()).or_else(|| h.get(header::HOST)?.to_str().ok());
    if let Some(host) = host {
        if !own_host(host, local) {
            return Err("this admin listener has no token and answers only requests for its own address \
                        or a loopback name (Host); set SHARDGATE_ADMIN_TOKEN to reach it by another name");
        }
    }
    if !changes {
        return Ok(());
    }
    let field = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_ascii_lowercase);
    if let Some(origin) = field("origin") {
        let own =
            origin.split_once("://").is_some_and(|(_, rest)| host.is_some_and(|h| rest == h.to_ascii_lowercase()));
        if !own {
            return Err("a cross-site request may not change this admin listener (Origin is another site's)");
        }
    }
    if field("sec-fetch-site").is_some_and(|s| s != "same-origin" && s != "none") {
        return Err("a cross-site request may not change this admin listener (Sec-Fetch-Site)");
    }
    let form = ["application/x-www-form-urlencoded", "multipart/form-data", "text/plain"];
    if field("content-type").is_some_and(|t| form.iter().any(|f| t.starts_with(f))) {
        return Err("a form may not change this admin listener: send POST without a form body");
    }
    Ok(())
}

/// Whether `host` (a `Host` value, port optional) names the listener: a
/// loopback name, or an IP address the listener answered on or a loopback one.
fn own_host(host: &str, local: Option<SocketAddr>) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host
            .rsplit_once(':')
            .map_or(host, |(n, port)| if port.bytes().all(|b| b.is_ascii_digit()) { n } else { host }),
    };
    let name = name.to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    match name.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback() || local.is_some_and(|l| l.ip() == ip),
        Err(_) => false,
    }
}

/// Whether the `Authorization` header carries the token: `Bearer <token>`
/// (the scheme name is case-insensitive, RFC 9110 §11.1) or, when
/// `basic_ok`, HTTP Basic with the token as the password. Compared in
/// constant time.
fn authorized(token: Option<&str>, headers: &http::HeaderMap, basic_ok: bool) -> bool {
    let Some(token) = token else { return true };
    let Some(given) = headers.get(header::AUTHORIZATION).map(HeaderValue::as_bytes) else { return false };
    let Some(split) = given.iter().position(|&b| b == b' ') else { return false };
    let (scheme, credentials) = (&given[..split], given[split + 1..].trim_ascii());
    if scheme.eq_ignore_ascii_case(b"Bearer") {
        return same(credentials, token.as_bytes());
    }
    if basic_ok && scheme.eq_ignore_ascii_case(b"Basic") {
        use base64::Engine as _;
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(credentials) else { return false };
        let Some(colon) = decoded.iter().position(|&b| b == b':') else { return false };
        return same(&decoded[colon + 1..], token.as_bytes());
    }
    false
}

/// `given == want`, in time that depends on `want`'s length alone.
fn same(given: &[u8], want: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != want.len());
    for (i, &w) in want.iter().enumerate() {
        diff |= w ^ given.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

fn ready(state: &AdminState) -> Response<AdminBody> {
    let snap = state.table().snapshot();
    if state.ready() {
        json_response(StatusCode::OK, &json!({ "status": "ready", "version": snap.version }))
    } else {
        let status = if state.shared.drain.is_draining() { "draining" } else { "no_table" };
        let mut resp = json_response(StatusCode::SERVICE_UNAVAILABLE, &json!({ "status": status }));
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        resp
    }
}

fn config(state: &AdminState) -> Response<AdminBody> {
    let snap = state.table().snapshot();
    let at = metrics::unix_seconds(snap.loaded_at);
    let iso = iso_time(snap.loaded_at, 3);
    json_response(
        StatusCode::OK,
        &json!({
            "version": snap.version,
            "sha256": snap.sha256,
            "loaded_at": iso,
            "loaded_at_unix_s": at,
            "path": state.reloader.as_ref().map(|r| r.source().to_string()),
            "summary": snap.table.summary(),
            "region": snap.table.local_region().map(|id| snap.table.region(id).name.as_str()),
            "source": snap.source_text,
        }),
    )
}

/// Whether `POST /reload`'s query asks for a dry run: `dry_run`,
/// `dry_run=1` or `=true` yes, `=0` or `=false` (or no query) no; anything
/// else is refused, never read as a reload.
fn dry_run_asked(query: Option<&str>) -> Result<bool, AdminError> {
    let mut asked = false;
    for part in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = part.split_once('=').unwrap_or((part, "1"));
        asked = match (key, value) {
            ("dry_run", "1" | "true" | "") => true,
            ("dry_run", "0" | "false") => false,
            _ => {
                let detail = format!(
                    "POST /reload takes only dry_run (=1, =true, =0 or =false), not {}",
                    crate::problem::quote(part)
                );
                return Err(AdminError::BadQuery { detail });
            }
        };
    }
    Ok(asked)
}

/// The largest table text `POST /reload?dry_run=1` reads.
const MAX_TABLE_BYTES: usize = 8 << 20;

async fn dry_run(state: &AdminState, req: Request<Incoming>) -> Response<AdminBody> {
    use http_body_util::BodyExt;
    let Some(reloader) = state.reloader.clone() else {
        return problem(&AdminError::NoTableFile, "/reload");
    };
    let body = match http_body_util::Limited::new(req.into_body(), MAX_TABLE_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return problem(&AdminError::TableTooLarge { max: MAX_TABLE_BYTES }, "/reload")
        }
        Err(_) => {
            let detail = "the table could not be read from the request";
            return problem(&AdminError::BadTableBody { detail }, "/reload");
        }
    };
    let text = match String::from_utf8(body.to_vec()) {
        Ok(t) if t.trim().is_empty() => None,
        Ok(t) => Some(t),
        Err(_) => return problem(&AdminError::BadTableBody { detail: "the table is not UTF-8 text" }, "/reload"),
    };
    let window = state.placement_window();
    let plan = tokio::task::spawn_blocking(move || reloader.dry_run(text, Some(&window))).await;
    match plan {
        Ok(Ok((plan, needs_restart))) => json_response(
            StatusCode::OK,
            &json!({ "result": "dry_run", "moves": plan.moves.len(), "unfenced": plan.unfenced.len(),
                     "needs_restart": needs_restart, "plan": plan }),
        ),
        Ok(Err(ReloadError::Invalid(errors))) => problem(&AdminError::InvalidTable { errors }, "/reload"),
        Ok(Err(ReloadError::NeedsRestart(detail))) => problem(&AdminError::NeedsRestart { detail }, "/reload"),
        Err(e) => problem(&AdminError::ReloadFailed { detail: e.to_string() }, "/reload"),
    }
}

async fn reload(state: &AdminState) -> Response<AdminBody> {
    let Some(reloader) = state.reloader.clone().filter(|r| r.path().is_some()) else {
        return problem(&AdminError::NoTableFile, "/reload");
    };
    let by = Provenance::by(if state.token.is_some() { "POST /reload (admin token)" } else { "POST /reload" });
    // File I/O and compilation stay off the async workers.
    let outcome = match tokio::task::spawn_blocking(move || reloader.reload_now(&by)).await {
        Ok(outcome) => outcome,
        Err(e) => return problem(&AdminError::ReloadFailed { detail: e.to_string() }, "/reload"),
    };
    match outcome {
        Ok(o) => json_response(
            StatusCode::OK,
            &json!({
                "result": "success",
                "version": o.version,
                "sha256": o.sha256,
                "needs_restart": o.needs_restart,
                "moves": o.moves,
                "unfenced": o.unfenced,
            }),
        ),
        Err(ReloadError::Invalid(errors)) => problem(&AdminError::InvalidTable { errors }, "/reload"),
        Err(ReloadError::NeedsRestart(detail)) => problem(&AdminError::NeedsRestart { detail }, "/reload"),
    }
}

fn drain(state: &AdminState) -> Response<AdminBody> {
    let started = state.shared.drain.start();
    if started {
        tracing::info!("drain started by POST /drain");
    }
    let snap = state.table().snapshot();
    let server = &snap.table.settings().server;
    json_response(
        StatusCode::ACCEPTED,
        &json!({
            "draining": true,
            "already_draining": !started,
            "drain_delay_s": server.drain_delay.as_secs_f64(),
            "shutdown_timeout_s": server.shutdown_timeout.as_secs_f64(),
        }),
    )
}

pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response<AdminBody> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(bytes)));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The problem+json answer for `err` at `path`, from the one error table.
fn problem(err: &dyn Problem, path: &str) -> Response<AdminBody> {
    crate::problem::response(err, path, "-", "shardgate-admin")
}
