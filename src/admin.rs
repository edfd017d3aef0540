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
//! | `/reload` | POST | reload the table file now: 200 with the outcome, 422 with every error |
//! | `/drain` | POST | start the graceful drain (as SIGTERM does): 202 |
//! | `/explain?id=…[&route=…]` | GET | decoded fields, every valid format, region and rule |
//!
//! When the environment variable [`TOKEN_ENV`] is set (and not empty), every
//! endpoint except the probes (`/live*`, `/ready*`, `/healthz`) requires
//! `Authorization: Bearer <token>`; the token stays out of the routing table
//! so the table can be shared and logged. Errors are problem+json: 401, 404
//! for an unknown path, 405 (with `Allow`) for a wrong method.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;

use crate::ids::{self, clock::iso8601, Field, Format};
use crate::metrics::{self, ScrapeInputs};
use crate::proxy::extract::{percent_decode, query_param};
use crate::proxy::server::{until_idle, Acceptor, ServerOptions, Watched};
use crate::proxy::Proxy;
use crate::routing::{ReloadError, Reloader, Route, SharedTable, Table};

/// The environment variable holding the admin bearer token.
pub const TOKEN_ENV: &str = "SHARDGATE_ADMIN_TOKEN";

/// The admin token from [`TOKEN_ENV`]; `None` when unset or empty.
pub fn token_from_env() -> Option<String> {
    std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty())
}

/// What the admin endpoints read and act on.
#[derive(Debug)]
pub struct AdminState {
    proxy: Arc<Proxy>,
    reloader: Option<Arc<Reloader>>,
    token: Option<String>,
}

impl AdminState {
    /// State for `proxy` (its table, metrics, drain and upstream counters);
    /// `reloader` is the table file's reloader (`None`: `/reload` answers 409).
    pub fn new(proxy: Arc<Proxy>, reloader: Option<Arc<Reloader>>) -> AdminState {
        AdminState { proxy, reloader, token: None }
    }

    /// Requires `Authorization: Bearer <token>` on every non-probe endpoint.
    pub fn with_token(mut self, token: Option<String>) -> AdminState {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    fn shared(&self) -> &Arc<SharedTable> {
        self.proxy.shared()
    }

    /// Whether `/ready` answers 200: a table is loaded and the drain has not started.
    pub fn ready(&self) -> bool {
        self.shared().snapshot().version > 0 && !self.proxy.drain().is_draining()
    }

    /// The `/metrics` body.
    pub fn render_metrics(&self) -> String {
        let m = self.proxy.metrics();
        let (retries, budget_exhausted) = self.proxy.retry_counts();
        let endpoints =
            self.proxy.health().report().into_iter().map(|(region, uri, up, ejected)| (region, uri, up && !ejected));
        let inputs = ScrapeInputs {
            reloads: self.reloader.as_ref().map(|r| (r.successes(), r.failures())),
            retries,
            budget_exhausted,
            endpoints: Some(endpoints.collect()),
        };
        m.refresh(&self.shared().snapshot(), &inputs);
        m.render()
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
    let metrics = Arc::clone(state.proxy.metrics());
    let refusal = problem_from(
        StatusCode::SERVICE_UNAVAILABLE,
        problem_body(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_connections",
            &format!("the admin listener already has {} open connections", opts.admin_max_connections),
        ),
    );
    let refusal: Arc<[u8]> = crate::proxy::error::http1_bytes(refusal).into();
    let mut acceptor = Acceptor::new(listener, "admin", opts.admin_max_connections, refusal, Arc::clone(&metrics));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer, slot) = tokio::select! {
            accepted = acceptor.accept() => accepted,
            () = &mut shutdown => break,
        };
        let state = Arc::clone(&state);
        let open = metrics.connection_opened("admin");
        let service = service_fn(move |req| {
            let state = Arc::clone(&state);
            async move { Ok::<_, Infallible>(handle(&state, req).await) }
        });
        let stream = Watched::new(stream);
        let activity = Arc::clone(&stream.activity);
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service).into_owned());
        tokio::spawn(async move {
            until_idle(conn, &activity, opts, peer).await;
            drop(open);
            drop(slot);
        });
    }
    drop(acceptor);
    let _ = tokio::time::timeout(Duration::from_secs(2), graceful.shutdown()).await;
    Ok(())
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

/// Answers one admin request.
pub async fn handle(state: &AdminState, req: Request<Incoming>) -> Response<AdminBody> {
    let path = req.uri().path();
    let Some(endpoint) = Endpoint::from_path(path) else {
        return problem(StatusCode::NOT_FOUND, "not_found", &format!("no admin endpoint at {}", shown(path)));
    };
    if !endpoint.is_probe() && !authorized(state.token.as_deref(), req.headers()) {
        let mut resp = problem(StatusCode::UNAUTHORIZED, "unauthorized", "this endpoint needs the admin bearer token");
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"shardgate\""));
        return resp;
    }
    let allowed = if endpoint.is_post() {
        *req.method() == Method::POST
    } else {
        matches!(*req.method(), Method::GET | Method::HEAD)
    };
    if !allowed {
        let allow = if endpoint.is_post() { "POST" } else { "GET, HEAD" };
        let mut resp = problem(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            &format!("{} takes {allow}, not {}", path, shown(req.method().as_str())),
        );
        resp.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
        return resp;
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
        Endpoint::Reload => reload(state).await,
        Endpoint::Drain => drain(state),
        Endpoint::Explain => explain(state, req.uri().query().unwrap_or("")),
    }
}

/// Constant-time comparison of the `Authorization` header with `Bearer
/// <token>` (the scheme name is case-insensitive, RFC 9110 §11.1).
fn authorized(token: Option<&str>, headers: &http::HeaderMap) -> bool {
    let Some(token) = token else { return true };
    let Some(given) = headers.get(header::AUTHORIZATION).map(HeaderValue::as_bytes) else { return false };
    let Some((scheme, given)) = given.split_at_checked(7) else { return false };
    if !scheme.eq_ignore_ascii_case(b"Bearer ") {
        return false;
    }
    let want = token.as_bytes();
    let mut diff = u8::from(given.len() != want.len());
    for (i, &w) in want.iter().enumerate() {
        diff |= w ^ given.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

fn ready(state: &AdminState) -> Response<AdminBody> {
    let snap = state.shared().snapshot();
    if state.ready() {
        json_response(StatusCode::OK, &json!({ "status": "ready", "version": snap.version }))
    } else {
        let status = if state.proxy.drain().is_draining() { "draining" } else { "no_table" };
        let mut resp = json_response(StatusCode::SERVICE_UNAVAILABLE, &json!({ "status": status }));
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        resp
    }
}

fn config(state: &AdminState) -> Response<AdminBody> {
    let snap = state.shared().snapshot();
    let at = metrics::unix_seconds(snap.loaded_at);
    let iso = iso8601((at * 1_000_000.0) as u64, 3).map(|t| t.to_string());
    json_response(
        StatusCode::OK,
        &json!({
            "version": snap.version,
            "sha256": snap.sha256,
            "loaded_at": iso,
            "loaded_at_unix_s": at,
            "path": state.reloader.as_ref().map(|r| r.path().display().to_string()),
            "summary": snap.table.summary(),
            "source": snap.source_text,
        }),
    )
}

async fn reload(state: &AdminState) -> Response<AdminBody> {
    let Some(reloader) = state.reloader.clone() else {
        return problem(StatusCode::CONFLICT, "no_file", "this instance was not started from a table file");
    };
    // File I/O and compilation stay off the async workers.
    let outcome = match tokio::task::spawn_blocking(move || reloader.reload_now()).await {
        Ok(outcome) => outcome,
        Err(e) => {
            return problem(StatusCode::INTERNAL_SERVER_ERROR, "reload_failed", &format!("the reload task failed: {e}"))
        }
    };
    match outcome {
        Ok(o) => json_response(
            StatusCode::OK,
            &json!({
                "result": "success",
                "version": o.version,
                "sha256": o.sha256,
                "needs_restart": o.needs_restart,
            }),
        ),
        Err(ReloadError::Invalid(errs)) => {
            let errors: Vec<Value> = errs
                .errors
                .iter()
                .map(|e| json!({ "path": e.path, "line": e.line, "col": e.col, "message": e.message, "hint": e.hint }))
                .collect();
            let detail = format!("{} problem(s) in {}; the running table is kept", errs.len(), errs.source_name);
            let mut body = problem_body(StatusCode::UNPROCESSABLE_ENTITY, "invalid_config", &detail);
            body.insert("result".into(), "failure".into());
            body.insert("errors".into(), Value::Array(errors));
            problem_from(StatusCode::UNPROCESSABLE_ENTITY, body)
        }
        Err(ReloadError::NeedsRestart(m)) => problem(StatusCode::CONFLICT, "needs_restart", &m),
    }
}

fn drain(state: &AdminState) -> Response<AdminBody> {
    let started = state.proxy.drain().start();
    if started {
        tracing::info!("drain started by POST /drain");
    }
    let snap = state.shared().snapshot();
    let server = &snap.table.settings().server;
    json_response(
        StatusCode::ACCEPTED,
        &json!({
            "draining": true,
            "already_draining": !started,
            "drain_delay_s": server.drain_delay.0.as_secs_f64(),
            "shutdown_timeout_s": server.shutdown_timeout.0.as_secs_f64(),
        }),
    )
}

/// `GET /explain?id=…[&route=…]`.
fn explain(state: &AdminState, query: &str) -> Response<AdminBody> {
    let Some(id) = query_param(query, "id").map(percent_decode).filter(|s| !s.is_empty()) else {
        return problem(StatusCode::BAD_REQUEST, "missing_id", "give the id to explain as ?id=…");
    };
    let route_name = query_param(query, "route").map(percent_decode);
    let snap = state.shared().snapshot();
    let table = &snap.table;
    let routes: Vec<&Route> = match &route_name {
        Some(name) => match table.routes().iter().find(|r| r.name == **name) {
            Some(r) => vec![r],
            None => return problem(StatusCode::NOT_FOUND, "unknown_route", &format!("no route named {}", shown(name))),
        },
        None => table.routes().iter().filter(|r| r.id.is_some()).collect(),
    };
    let mut valid_as = Vec::new();
    let mut invalid_as = Map::new();
    for format in Format::ALL {
        match ids::parse(format, &id, table.id_params()) {
            Ok(d) => valid_as.push(decoded_json(&d)),
            Err(e) => {
                invalid_as.insert(format.name().into(), e.reason.code().into());
            }
        }
    }
    let mut placed = Vec::new();
    for route in routes {
        if let Some(entry) = explain_route(table, route, &id, route_name.is_some()) {
            placed.push(entry);
        }
    }
    json_response(
        StatusCode::OK,
        &json!({
            "input": ids::escape_for_display(&id, 128),
            "table_version": snap.version,
            "valid_as": valid_as,
            "invalid_as": invalid_as,
            "routes": placed,
        }),
    )
}

/// How `route` would place `id`; `None` when the route does not accept it
/// and was not asked for by name.
fn explain_route(table: &Table, route: &Route, id: &str, named: bool) -> Option<Value> {
    let mut entry = Map::new();
    entry.insert("route".into(), route.name.clone().into());
    entry.insert("template".into(), route.template.clone().into());
    entry.insert("placement".into(), route.strategy.name().into());
    let Some(rule) = &route.id else {
        entry.insert("error".into(), "this route mints its ids; it does not read one".into());
        return named.then_some(Value::Object(entry));
    };
    entry.insert("formats".into(), rule.formats.iter().map(|f| f.name()).collect::<Vec<_>>().into());
    let decoded = match ids::parse_any(&rule.formats, id, table.id_params()) {
        Ok(d) => d,
        Err(e) => {
            if !named {
                return None;
            }
            entry.insert("error".into(), e.to_string().into());
            entry.insert("reason".into(), e.reason.code().into());
            return Some(Value::Object(entry));
        }
    };
    entry.insert("decoded_as".into(), decoded.format().name().into());
    let strategy = match route.strategy {
        crate::routing::Strategy::Auto => table.natural_strategy(decoded.format()),
        s => s,
    };
    entry.insert("strategy".into(), strategy.name().into());
    match table.place(&decoded, route.strategy) {
        Ok(p) => {
            entry.insert("region".into(), table.region(p.region).name.clone().into());
            entry.insert("rule".into(), table.explain(p.rule).to_string().into());
            entry.insert("rule_kind".into(), p.rule.kind().into());
        }
        Err(e) => {
            entry.insert("error".into(), e.to_string().into());
            entry.insert("reason".into(), "no_owner".into());
        }
    }
    Some(Value::Object(entry))
}

/// `{format, canonical, fields: {…}}` of a decoded id.
fn decoded_json(d: &ids::Decoded) -> Value {
    let mut fields = Map::new();
    d.for_each_field(&mut |name, value| {
        fields.insert(name.into(), field_json(value));
    });
    json!({ "format": d.format().name(), "canonical": d.to_string(), "fields": fields })
}

fn field_json(v: Field) -> Value {
    match v {
        Field::Int(n) => n.into(),
        Field::Bool(b) => b.into(),
        Field::Hex { value, width } => format!("{value:0width$x}", width = usize::from(width)).into(),
        Field::Str(s) => s.into(),
        Field::TimeMs(ms) => iso8601(ms.saturating_mul(1000), 3).map_or(Value::Null, |t| t.to_string().into()),
        Field::TimeUs(us) => iso8601(us, 6).map_or(Value::Null, |t| t.to_string().into()),
    }
}

fn shown(s: &str) -> String {
    format!("'{}'", ids::escape_for_display(s, 64))
}

fn json_response(status: StatusCode, body: &Value) -> Response<AdminBody> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(bytes)));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn problem_body(status: StatusCode, reason: &str, detail: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("type".into(), format!("https://shardgate.dev/problems/admin-{}", reason.replace('_', "-")).into());
    m.insert("title".into(), status.canonical_reason().unwrap_or("Error").into());
    m.insert("status".into(), status.as_u16().into());
    m.insert("detail".into(), detail.into());
    m.insert("reason".into(), reason.into());
    m
}

fn problem_from(status: StatusCode, body: Map<String, Value>) -> Response<AdminBody> {
    let mut resp = json_response(status, &Value::Object(body));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    resp
}

fn problem(status: StatusCode, reason: &str, detail: &str) -> Response<AdminBody> {
    problem_from(status, problem_body(status, reason, detail))
}
