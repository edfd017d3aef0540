//! The dashboard: one page on the admin listener (`GET /`), its script and
//! style, served from the binary (no CDN, no build step), and the data it
//! shows (`GET /dashboard.json`): the active table, every endpoint's
//! health, the traffic of the last minutes, the reload history and the
//! traces' counters. The id lookup is `GET /explain`.
//!
//! The page writes everything it shows as text (`textContent`, never
//! markup), and its `Content-Security-Policy` allows only its own script
//! and style, so a hostile id, route or region name stays text.

use std::sync::Mutex;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};

use super::{iso_time, json_response, AdminBody, AdminState};
use crate::config::instance::InstanceFlags;
use crate::routing::{Loaded, ReloadError};

const PAGE: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

/// The page's policy: its own script, style and data, nothing else.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; \
                   base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One of the dashboard's static files, by path.
pub(super) fn asset(path: &str) -> Option<Response<AdminBody>> {
    let (body, content_type) = match path {
        "/" => (PAGE, "text/html; charset=utf-8"),
        "/dashboard.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "/dashboard.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return None,
    };
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    Some(resp)
}

/// The table as the file wrote it (defaults filled in), kept per version:
/// a table of thousands of overrides is read once, not per page refresh.
#[derive(Debug, Default)]
pub(super) struct TableView {
    cached: Mutex<Option<(u64, Value)>>,
}

impl TableView {
    fn get(&self, snap: &Loaded, flags: &InstanceFlags) -> Value {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((version, view)) = cached.as_ref() {
            if *version == snap.version {
                return view.clone();
            }
        }
        let view = table_view(snap, flags);
        *cached = Some((snap.version, view.clone()));
        view
    }
}

/// The parts of the table the page shows. The running table was valid
/// when loaded with this instance's `flags`, so its text loads again.
fn table_view(snap: &Loaded, flags: &InstanceFlags) -> Value {
    let file = match crate::config::as_written(&snap.source_text, "active table", flags) {
        Ok(file) => serde_json::to_value(&file).unwrap_or(Value::Null),
        Err(_) => Value::Null,
    };
    let routes: Vec<Value> = snap
        .table
        .routes()
        .iter()
        .map(|r| {
            let kind = r.kind();
            let methods = r.methods.as_ref().map(|m| m.iter().map(|m| m.as_str().to_string()).collect::<Vec<_>>());
            let formats = r.id.as_ref().map(|id| id.formats.iter().map(|f| f.name()).collect::<Vec<_>>());
            json!({ "name": r.name, "template": r.template, "methods": methods, "placement": kind, "formats": formats })
        })
        .collect();
    let pick = |key: &str| file.get(key).cloned().unwrap_or(Value::Null);
    json!({
        "regions": pick("regions"),
        "countries": pick("countries"),
        "entities": pick("entities"),
        "overrides": pick("overrides"),
        "shards": pick("shards"),
        "routes": routes,
    })
}

/// `GET /dashboard.json`.
pub(super) fn data(state: &AdminState) -> Response<AdminBody> {
    let snap = state.table().snapshot();
    let settings = snap.table.settings();
    let health: Vec<Value> = state
        .shared
        .health
        .report()
        .into_iter()
        .map(|(region, uri, up, ejected)| json!({ "region": region, "endpoint": uri, "up": up, "ejected": ejected }))
        .collect();
    let reloads: Vec<Value> =
        state.reloader.as_ref().map(|r| r.history()).unwrap_or_default().iter().map(reload).collect();
    let traces = state.shared.traces.as_ref().map(|t| {
        let (s, n) = (t.settings(), t.totals());
        json!({ "endpoint": s.endpoint, "sample_ratio": s.sample_ratio, "service_name": s.service_name,
                "exported": n.exported, "dropped": n.dropped, "failed": n.failed })
    });
    let local = snap.table.local_region().map(|r| snap.table.region(r).name.clone());
    let no_flags = InstanceFlags::default();
    json_response(
        StatusCode::OK,
        &json!({
            "instance": settings.restart.instance,
            "local_region": local,
            "proxy": { "port": settings.restart.listen.port(), "tls": settings.restart.server_tls.is_some() },
            "table": {
                "version": snap.version,
                "sha256": snap.sha256,
                "loaded_at": iso_time(snap.loaded_at, 0),
                "path": state.reloader.as_ref().map(|r| r.source().to_string()),
            },
            "view": state.view.get(&snap, state.reloader.as_ref().map_or(&no_flags, |r| r.flags())),
            "health": health,
            "traffic": state.traffic.rates(),
            "reloads": reloads,
            "draining": state.shared.drain.is_draining(),
            "traces": traces,
        }),
    )
}

fn reload(r: &crate::routing::reload::ReloadRecord) -> Value {
    let when = iso_time(r.at, 0);
    match &r.result {
        Ok(o) => json!({ "at": when, "result": "success", "version": o.version, "sha256": o.sha256,
                         "needs_restart": o.needs_restart, "unfenced": o.unfenced }),
        Err(ReloadError::Invalid(errors)) => {
            let list: Vec<Value> = errors
                .errors
                .iter()
                .map(|e| json!({ "path": e.path, "line": e.line, "column": e.col, "message": e.message, "hint": e.hint }))
                .collect();
            json!({ "at": when, "result": "rejected", "errors": list })
        }
        Err(ReloadError::NeedsRestart(detail)) => {
            json!({ "at": when, "result": "rejected", "errors": [{ "message": detail }] })
        }
    }
}
