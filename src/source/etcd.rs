//! etcd's v3 API through its JSON gateway (`/v3/kv/range`, `/v3/watch`,
//! `/v3/lease/*`, `/v3/auth/authenticate`), which every etcd server since
//! 3.4 serves on its client port beside gRPC.
//!
//! Why not the `etcd-client` crate: its build script compiles etcd's
//! `.proto` files and needs `protoc`, which a fresh machine does not have,
//! so `cargo build` of the proxy would fail for every user; the gateway is
//! etcd's own documented API for clients without gRPC, over the HTTP/1.1
//! and TLS the proxy already speaks. Keys and values travel in base64 and
//! 64-bit numbers as strings, as the gateway writes them.
//!
//! A client holds the cluster's endpoints and moves to the next one when
//! one fails; with a user it authenticates and sends the token, and
//! authenticates again when the token expires.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use http::{Method, StatusCode, Uri};
use http_body_util::BodyExt;
use serde_json::{json, Value};

use crate::upstream::client::{fetch, open};
use crate::upstream::Connector;

/// How long one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a table lives: `etcd://HOST:PORT[,HOST:PORT...]/KEY`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The cluster's client endpoints, `host:port`.
    pub endpoints: Vec<String>,
    /// The key holding the table.
    pub key: String,
}

impl Target {
    /// Parses `etcd://HOST:PORT[,HOST:PORT...]/KEY` (the key keeps its
    /// slashes: `etcd://10.0.0.1:2379/shardgate/table` is `/shardgate/table`).
    pub fn parse(text: &str) -> Result<Target, String> {
        let rest = text
            .strip_prefix("etcd://")
            .ok_or_else(|| format!("{text:?}: a table source is etcd://HOST:PORT[,HOST:PORT...]/KEY"))?;
        let (hosts, key) = rest.split_once('/').ok_or_else(|| format!("{text:?}: no key after the endpoints"))?;
        let endpoints: Vec<String> =
            hosts.split(',').map(str::trim).filter(|h| !h.is_empty()).map(String::from).collect();
        if endpoints.is_empty() || key.is_empty() {
            return Err(format!("{text:?}: give at least one HOST:PORT and a key"));
        }
        for e in &endpoints {
            if e.parse::<http::uri::Authority>().ok().and_then(|a| a.port_u16()).is_none() {
                return Err(format!("{text:?}: {e:?} is not HOST:PORT"));
            }
        }
        Ok(Target { endpoints, key: format!("/{key}") })
    }

    /// The source's name in logs, `/config` and the audit trail.
    pub fn name(&self) -> String {
        format!("etcd://{}{}", self.endpoints.join(","), self.key)
    }
}

/// A key's value at a revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    /// The key.
    pub key: String,
    /// The value (a table's text, an instance's report).
    pub value: String,
    /// The revision that last changed it.
    pub mod_revision: i64,
}

/// What a watch reports.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// The watch is in place.
    Created,
    /// The key was put.
    Put(Kv),
    /// The key was deleted at this revision.
    Deleted(i64),
    /// The revision asked for was compacted away: read the key again.
    Compacted(i64),
    /// The cluster's revision, without a change of the key (progress).
    Progress(i64),
}

/// Why a call failed.
#[derive(Debug)]
pub struct EtcdError(pub String);

impl std::error::Error for EtcdError {}

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A client of one etcd cluster.
pub struct Client {
    endpoints: Vec<Uri>,
    next: AtomicUsize,
    connector: Connector,
    user: Option<(String, String)>,
    token: Mutex<Option<String>>,
}

fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn text(v: &Value) -> String {
    v.as_str().and_then(|s| B64.decode(s).ok()).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
}

fn kv(v: &Value) -> Kv {
    Kv { key: text(&v["key"]), value: text(&v["value"]), mod_revision: int(&v["mod_revision"]) }
}

/// The key just after every key that starts with `prefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("endpoints", &self.endpoints).finish_non_exhaustive()
    }
}

impl Client {
    /// A client of `target`'s endpoints (over TLS with `tls`, else plain
    /// HTTP), authenticating as `user` when given.
    pub fn new(
        target: &Target,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
        user: Option<(String, String)>,
    ) -> Client {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let settings = crate::upstream::ClientSettings {
            connect_timeout: Duration::from_secs(3),
            pool_idle_timeout: Duration::from_secs(30),
            tls,
        };
        let connector = crate::upstream::connector(&settings);
        let endpoints = target.endpoints.iter().filter_map(|e| format!("{scheme}://{e}").parse().ok()).collect();
        Client { endpoints, next: AtomicUsize::new(0), connector, user, token: Mutex::new(None) }
    }

    fn endpoint(&self, offset: usize) -> Option<&Uri> {
        let n = self.endpoints.len();
        (n > 0).then(|| &self.endpoints[(self.next.load(Ordering::Relaxed) + offset) % n])
    }

    fn uri(base: &Uri, path: &str) -> Result<Uri, EtcdError> {
        format!("{}://{}{path}", base.scheme_str().unwrap_or("http"), base.authority().map_or("", |a| a.as_str()))
            .parse()
            .map_err(|e| EtcdError(format!("{e}")))
    }

    async fn authenticate(&self, base: &Uri) -> Result<Option<String>, EtcdError> {
        let Some((name, password)) = &self.user else { return Ok(None) };
        let body = json!({ "name": name, "password": password }).to_string();
        let uri = Client::uri(base, "/v3/auth/authenticate")?;
        let (status, answer) = fetch(&self.connector, Method::POST, &uri, &[], Bytes::from(body), CALL_TIMEOUT)
            .await
            .map_err(EtcdError)?;
        let v: Value = serde_json::from_slice(&answer).unwrap_or_default();
        match v["token"].as_str() {
            Some(t) if status == StatusCode::OK => Ok(Some(t.to_string())),
            _ => Err(EtcdError(format!("authentication as {name} failed: {status} {}", v["message"]))),
        }
    }

    async fn headers(&self, base: &Uri) -> Result<Option<String>, EtcdError> {
        let held = self.token.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match held {
            Some(t) => Ok(Some(t)),
            None => {
                let t = self.authenticate(base).await?;
                *self.token.lock().unwrap_or_else(|p| p.into_inner()) = t.clone();
                Ok(t)
            }
        }
    }

    /// One unary call, tried on each endpoint in turn from the last that answered.
    async fn call(&self, path: &str, body: Value) -> Result<Value, EtcdError> {
        let mut last = EtcdError("no etcd endpoints".into());
        for offset in 0..self.endpoints.len() {
            let Some(base) = self.endpoint(offset) else { break };
            match self.call_on(base, path, &body).await {
                Ok(v) => {
                    self.next.fetch_add(offset, Ordering::Relaxed);
                    return Ok(v);
                }
                Err(e) => last = EtcdError(format!("{base}: {e}")),
            }
        }
        Err(last)
    }

    async fn call_on(&self, base: &Uri, path: &str, body: &Value) -> Result<Value, EtcdError> {
        for _ in 0..2 {
            let token = self.headers(base).await?;
            let headers: Vec<(&str, &str)> = token.iter().map(|t| ("authorization", t.as_str())).collect();
            let uri = Client::uri(base, path)?;
            let (status, answer) =
                fetch(&self.connector, Method::POST, &uri, &headers, Bytes::from(body.to_string()), CALL_TIMEOUT)
                    .await
                    .map_err(EtcdError)?;
            let v: Value = serde_json::from_slice(&answer).unwrap_or_default();
            if status == StatusCode::OK {
                return Ok(v);
            }
            let message = v["message"].as_str().or(v["error"].as_str()).unwrap_or("").to_string();
            if (message.contains("token") || message.contains("permission denied")) && self.user.is_some() {
                // Expired or revoked: authenticate again, once.
                self.forget_token();
                continue;
            }
            return Err(EtcdError(format!("{path}: {status} {message}")));
        }
        Err(EtcdError(format!("{path}: the token was refused twice")))
    }

    /// Drops the authentication token: the next call authenticates again.
    pub fn forget_token(&self) {
        *self.token.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The key's value (`None`: no such key) and the cluster's revision.
    pub async fn get(&self, key: &str) -> Result<(Option<Kv>, i64), EtcdError> {
        let v = self.call("/v3/kv/range", json!({ "key": B64.encode(key) })).await?;
        let kv = v["kvs"].as_array().and_then(|a| a.first()).map(kv);
        Ok((kv, int(&v["header"]["revision"])))
    }

    /// Every key under `prefix`.
    pub async fn list(&self, prefix: &str) -> Result<Vec<Kv>, EtcdError> {
        let body = json!({ "key": B64.encode(prefix), "range_end": B64.encode(prefix_end(prefix)) });
        let v = self.call("/v3/kv/range", body).await?;
        Ok(v["kvs"].as_array().map(|a| a.iter().map(kv).collect()).unwrap_or_default())
    }

    /// Puts `value` at `key`, bound to `lease` (0: none); the new revision.
    pub async fn put(&self, key: &str, value: &str, lease: i64) -> Result<i64, EtcdError> {
        let mut body = json!({ "key": B64.encode(key), "value": B64.encode(value) });
        if lease != 0 {
            body["lease"] = json!(lease.to_string());
        }
        let v = self.call("/v3/kv/put", body).await?;
        Ok(int(&v["header"]["revision"]))
    }

    /// Puts `value` at `key` only if the key is still at `mod_revision`
    /// (a write between this caller's read and its put is never
    /// overwritten): `Ok` with the new revision, or `Err` with the key's
    /// revision now (0: no such key). A key that already holds `value` is
    /// this put's own, committed by a try whose answer was lost (`call`
    /// tries the next endpoint after a timeout): `Ok` with its revision.
    pub async fn put_if(&self, key: &str, value: &str, mod_revision: i64) -> Result<Result<i64, i64>, EtcdError> {
        let (key, sent) = (B64.encode(key), B64.encode(value));
        let body = json!({
            "compare": [{ "key": key, "target": "MOD", "result": "EQUAL", "mod_revision": mod_revision.to_string() }],
            "success": [{ "request_put": { "key": key, "value": sent } }],
            "failure": [{ "request_range": { "key": key } }],
        });
        let v = self.call("/v3/kv/txn", body).await?;
        if v["succeeded"].as_bool() == Some(true) {
            return Ok(Ok(int(&v["header"]["revision"])));
        }
        let now = &v["responses"][0]["response_range"]["kvs"][0];
        let revision = int(&now["mod_revision"]);
        Ok(if now["value"].as_str() == Some(sent.as_str()) { Ok(revision) } else { Err(revision) })
    }

    /// A lease of `ttl`; its id.
    pub async fn grant(&self, ttl: Duration) -> Result<i64, EtcdError> {
        let v = self.call("/v3/lease/grant", json!({ "TTL": ttl.as_secs().max(1).to_string() })).await?;
        match int(&v["ID"]) {
            0 => Err(EtcdError(format!("lease grant: no lease in {v}"))),
            id => Ok(id),
        }
    }

    /// Renews `lease`; `false` when it has expired.
    pub async fn keep_alive(&self, lease: i64) -> Result<bool, EtcdError> {
        let v = self.call("/v3/lease/keepalive", json!({ "ID": lease.to_string() })).await?;
        Ok(int(&v["result"]["TTL"]) > 0)
    }

    /// Watches `key` from `revision` on: the events as they come, until
    /// the stream ends or fails (then watch again from the last revision
    /// seen + 1).
    pub async fn watch(&self, key: &str, revision: i64) -> Result<Watch, EtcdError> {
        let mut last = EtcdError("no etcd endpoints".into());
        for offset in 0..self.endpoints.len() {
            let Some(base) = self.endpoint(offset) else { break };
            let token = self.headers(base).await?;
            let headers: Vec<(&str, &str)> = token.iter().map(|t| ("authorization", t.as_str())).collect();
            let body = json!({ "create_request": {
                "key": B64.encode(key), "start_revision": revision.to_string(), "progress_notify": true
            } });
            let uri = Client::uri(base, "/v3/watch")?;
            match open(&self.connector, Method::POST, &uri, &headers, Bytes::from(body.to_string()), CALL_TIMEOUT).await
            {
                Ok(resp) if resp.status() == StatusCode::OK => {
                    self.next.fetch_add(offset, Ordering::Relaxed);
                    return Ok(Watch { body: resp.into_body(), buf: BytesMut::new(), pending: Vec::new() });
                }
                Ok(resp) => last = EtcdError(format!("{base}: watch: {}", resp.status())),
                Err(e) => last = EtcdError(format!("{base}: watch: {e}")),
            }
        }
        Err(last)
    }
}

/// A watch's stream of answers: JSON objects one after another.
#[derive(Debug)]
pub struct Watch {
    body: hyper::body::Incoming,
    buf: BytesMut,
    pending: Vec<Event>,
}

impl Watch {
    /// The next event; `Err` when the stream ended or failed.
    pub async fn next(&mut self) -> Result<Event, EtcdError> {
        loop {
            if !self.pending.is_empty() {
                return Ok(self.pending.remove(0));
            }
            // Whole objects in the buffer first.
            let mut stream = serde_json::Deserializer::from_slice(&self.buf).into_iter::<Value>();
            let mut consumed = 0;
            let mut results = Vec::new();
            while let Some(item) = stream.next() {
                match item {
                    Ok(v) => {
                        consumed = stream.byte_offset();
                        results.push(v);
                    }
                    Err(e) if e.is_eof() => break,
                    Err(e) => return Err(EtcdError(format!("watch: not JSON: {e}"))),
                }
            }
            let _ = self.buf.split_to(consumed);
            for v in results {
                self.pending.extend(events(&v)?);
            }
            if !self.pending.is_empty() {
                continue;
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => return Err(EtcdError(format!("watch: {e}"))),
                None => return Err(EtcdError("watch: the stream ended".into())),
            }
        }
    }
}

/// The events of one watch answer.
fn events(v: &Value) -> Result<Vec<Event>, EtcdError> {
    let r = v.get("result").unwrap_or(v);
    if let Some(e) = v.get("error") {
        return Err(EtcdError(format!("watch: {e}")));
    }
    let compacted = int(&r["compact_revision"]);
    if compacted > 0 {
        return Ok(vec![Event::Compacted(compacted)]);
    }
    if r["canceled"].as_bool() == Some(true) {
        return Err(EtcdError(format!("watch canceled: {}", r["cancel_reason"])));
    }
    let mut out = Vec::new();
    if r["created"].as_bool() == Some(true) {
        out.push(Event::Created);
    }
    for e in r["events"].as_array().into_iter().flatten() {
        let kv = kv(&e["kv"]);
        if e["type"].as_str() == Some("DELETE") {
            out.push(Event::Deleted(kv.mod_revision));
        } else {
            out.push(Event::Put(kv));
        }
    }
    if out.is_empty() {
        out.push(Event::Progress(int(&r["header"]["revision"])));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = Target::parse("etcd://127.0.0.1:2379,10.0.0.2:2379/shardgate/table");
        assert_eq!(
            t,
            Ok(Target {
                endpoints: vec!["127.0.0.1:2379".into(), "10.0.0.2:2379".into()],
                key: "/shardgate/table".into()
            })
        );
        assert!(Target::parse("http://127.0.0.1:2379/k").is_err());
        assert!(Target::parse("etcd://127.0.0.1/k").is_err());
        assert!(Target::parse("etcd://127.0.0.1:2379").is_err());
        assert!(Target::parse("etcd://127.0.0.1:2379/").is_err());
    }

    #[test]
    fn watch_answers_as_events() -> Result<(), EtcdError> {
        let put = json!({ "result": { "header": { "revision": "9" }, "events": [
            { "kv": { "key": B64.encode("/t"), "value": B64.encode("version: 1"), "mod_revision": "9" } },
            { "type": "DELETE", "kv": { "key": B64.encode("/t"), "mod_revision": "10" } }
        ] } });
        assert_eq!(
            events(&put)?,
            vec![Event::Put(Kv { key: "/t".into(), value: "version: 1".into(), mod_revision: 9 }), Event::Deleted(10)]
        );
        let compacted = json!({ "result": { "canceled": true, "compact_revision": "5" } });
        assert_eq!(events(&compacted)?, vec![Event::Compacted(5)]);
        let progress = json!({ "result": { "header": { "revision": "12" } } });
        assert_eq!(events(&progress)?, vec![Event::Progress(12)]);
        assert_eq!(events(&json!({ "result": { "created": true, "header": {} } }))?, vec![Event::Created]);
        Ok(())
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end("/a/"), b"/a0".to_vec());
    }
}
