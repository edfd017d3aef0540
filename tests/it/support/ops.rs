//! An instance as an operator runs it: eu, kz and us backends, proxy and
//! admin listeners on port 0, and the table file it reloads; with the
//! requests and the `/metrics` parser that the drain, metrics, explain,
//! log, reload and admin tests share.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use shardgate::app::{server_options, Instance};
use shardgate::ids::Iuid;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::{backend, send, table, BoxError, Got, Running};

/// Backends, an instance with proxy and admin listeners on port 0, and the
/// table file it reloads.
pub struct Ops {
    pub eu: Running,
    pub kz: Running,
    pub us: Running,
    pub inst: Arc<Instance>,
    pub proxy: SocketAddr,
    pub admin: SocketAddr,
    pub run: JoinHandle<std::io::Result<bool>>,
    pub file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Ops {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.proxy)
    }
    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }
    pub fn table(&self, extra: &str) -> String {
        table(self.eu.addr, self.kz.addr, self.us.addr, extra)
    }
}

impl Drop for Ops {
    fn drop(&mut self) {
        self.run.abort();
    }
}

/// [`Ops`] with `extra` in its table and `token` as the admin listener's
/// bearer token.
pub async fn ops_with(extra: &str, token: Option<&str>) -> Result<Ops, BoxError> {
    let (eu, kz, us) = (backend("eu").await?, backend("kz").await?, backend("us").await?);
    let text = table(eu.addr, kz.addr, us.addr, extra);
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("table.yaml");
    std::fs::write(&file, &text)?;
    let cfg = shardgate::config::load_str(&text, "table.yaml").map_err(|e| format!("test table invalid:\n{e}"))?;
    let inst = Arc::new(Instance::new(&cfg, &text, Some(file.clone()), token.map(str::to_owned)));
    let (pl, al) = (TcpListener::bind("127.0.0.1:0").await?, TcpListener::bind("127.0.0.1:0").await?);
    let (proxy, admin) = (pl.local_addr()?, al.local_addr()?);
    let i = Arc::clone(&inst);
    let opts = server_options(&cfg);
    let run = tokio::spawn(async move { i.run(pl, Some(al), opts).await });
    Ok(Ops { eu, kz, us, inst, proxy, admin, run, file, _dir: dir })
}

/// [`Ops`] with `extra` in its table and no admin token.
pub async fn ops(extra: &str) -> Result<Ops, BoxError> {
    ops_with(extra, None).await
}

/// An iUID of `country` and `entity` ([`super::iuid`] is entity 3).
pub fn iuid(country: u8, entity: u8) -> String {
    Iuid::from_fields(1_700_000_000_000, country, entity, 12345).to_string()
}

/// POST with an empty body.
pub async fn post(url: &str) -> Result<Got, BoxError> {
    send(Request::post(url).body(Full::new(Bytes::new()))?).await
}

/// Writes `text` next to `file` and renames it over `file`, as editors do.
pub fn replace_file(file: &Path, text: &str) -> std::io::Result<()> {
    let tmp = file.with_extension("yaml.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, file)
}

/// Samples by metric name: (labels, value).
pub type Samples = BTreeMap<String, Vec<(BTreeMap<String, String>, f64)>>;

/// A small parser for the Prometheus / OpenMetrics text format: comments
/// skipped, `name{k="v",…} value` with `\\`, `\"` and `\n` escapes.
pub fn parse_metrics(body: &[u8]) -> Result<Samples, BoxError> {
    let text = std::str::from_utf8(body)?;
    if !text.ends_with("# EOF\n") {
        return Err("exposition does not end with # EOF".into());
    }
    let mut out = Samples::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).ok_or_else(|| format!("bad sample line {line:?}"))?;
        let name = &line[..name_end];
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices();
            let mut key = String::new();
            loop {
                let (i, c) = chars.next().ok_or("unterminated labels")?;
                match c {
                    '}' => {
                        rest = &r[i + 1..];
                        break;
                    }
                    ',' => {}
                    '=' => {
                        if chars.next().map(|p| p.1) != Some('"') {
                            return Err(format!("label value not quoted in {line:?}").into());
                        }
                        let mut value = String::new();
                        loop {
                            match chars.next().ok_or("unterminated label value")?.1 {
                                '"' => break,
                                '\\' => match chars.next().ok_or("dangling escape")?.1 {
                                    'n' => value.push('\n'),
                                    other => value.push(other),
                                },
                                other => value.push(other),
                            }
                        }
                        labels.insert(std::mem::take(&mut key), value);
                    }
                    other => key.push(other),
                }
            }
        }
        let value_text = rest.split_whitespace().next().ok_or_else(|| format!("no value in {line:?}"))?;
        let value: f64 = value_text.parse().map_err(|_| format!("bad value in {line:?}"))?;
        out.entry(name.to_owned()).or_default().push((labels, value));
    }
    Ok(out)
}

/// The value of the one sample of `name` whose labels include `want`.
pub fn value(samples: &Samples, name: &str, want: &[(&str, &str)]) -> Result<f64, BoxError> {
    let found: Vec<f64> = samples
        .get(name)
        .into_iter()
        .flatten()
        .filter(|(labels, _)| want.iter().all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v)))
        .map(|(_, v)| *v)
        .collect();
    match found.as_slice() {
        [v] => Ok(*v),
        [] => Err(format!("no sample {name}{want:?}; have {:?}", samples.get(name)).into()),
        _ => Err(format!("{} samples {name}{want:?}", found.len()).into()),
    }
}
