//! Tables from etcd, and the fleet view.
//!
//! * [`etcd`]: etcd's v3 API over its JSON gateway: get, list, put, leases,
//!   watch;
//! * [`follow`]: one key followed by revision into the [`Reloader`]'s
//!   validate → compile → swap path: watched, resumed from the last
//!   revision after a disconnect, read again after a compaction or when
//!   etcd's revisions went back (restored from a snapshot), confirmed
//!   current every progress interval; each applied text kept on local
//!   disk, so an instance starts when etcd is unreachable;
//! * [`fleet`]: what each instance runs, published under a lease, and the
//!   view of every instance (`GET /fleet`).

pub mod etcd;
pub mod fleet;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use tokio::sync::watch;

use crate::routing::{Provenance, ReloadError, Reloader};
use etcd::{Client, Event, Target};

/// What this instance runs from its source, for `/fleet` and the metrics.
#[derive(Debug)]
pub struct Status {
    /// The revision of the table running (0: none from etcd yet).
    revision: AtomicI64,
    inner: Mutex<StatusInner>,
    /// Changes, for the fleet publisher.
    changed: watch::Sender<u64>,
}

#[derive(Debug)]
struct StatusInner {
    applied_at: Option<SystemTime>,
    sha256: String,
    confirmed: Option<Instant>,
    rejected: Option<(i64, Vec<String>)>,
    apply_seconds: f64,
    from_cache: bool,
}

impl Default for Status {
    fn default() -> Self {
        Status {
            revision: AtomicI64::new(0),
            inner: Mutex::new(StatusInner {
                applied_at: None,
                sha256: String::new(),
                confirmed: None,
                rejected: None,
                apply_seconds: 0.0,
                from_cache: false,
            }),
            changed: watch::channel(0).0,
        }
    }
}

impl Status {
    fn lock(&self) -> std::sync::MutexGuard<'_, StatusInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn notify(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// The running table is `revision`'s (`sha256`), applied `seconds` after it arrived.
    fn applied(&self, revision: i64, sha256: &str, seconds: f64, from_cache: bool) {
        self.revision.store(revision, Ordering::Relaxed);
        let mut s = self.lock();
        s.applied_at = Some(SystemTime::now());
        s.sha256 = sha256.to_string();
        s.apply_seconds = seconds;
        s.from_cache = from_cache;
        if s.rejected.as_ref().is_some_and(|(r, _)| *r <= revision) {
            s.rejected = None;
        }
        drop(s);
        self.notify();
    }

    fn rejected(&self, revision: i64, errors: Vec<String>) {
        self.lock().rejected = Some((revision, errors));
        self.notify();
    }

    /// The source was seen current now (so the running table is its latest).
    fn confirm(&self) {
        let mut s = self.lock();
        s.confirmed = Some(Instant::now());
        s.from_cache = false;
    }

    /// The applied revision.
    pub fn revision(&self) -> i64 {
        self.revision.load(Ordering::Relaxed)
    }

    /// Seconds since the source was last seen current (`None`: never).
    pub fn stale_seconds(&self) -> Option<f64> {
        self.lock().confirmed.map(|c| c.elapsed().as_secs_f64())
    }

    /// Seconds from the last applied revision's arrival to its swap.
    pub fn apply_seconds(&self) -> f64 {
        self.lock().apply_seconds
    }

    /// What this instance reports to the fleet.
    pub fn report(&self, instance: &str, region: Option<&str>) -> Value {
        let s = self.lock();
        let iso = |t: SystemTime| crate::routing::shared::iso_time(t, 3);
        json!({
            "instance": instance,
            "region": region,
            "revision": self.revision(),
            "sha256": s.sha256,
            "applied_at": s.applied_at.and_then(iso),
            "stale_s": s.confirmed.map(|c| c.elapsed().as_secs_f64()),
            "from_local_copy": s.from_cache,
            "rejected": s.rejected.as_ref().map(|(r, e)| json!({ "revision": r, "errors": e })),
        })
    }

    /// Waits for a change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// The last good table, as kept on local disk.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LocalCopy {
    /// The source it came from.
    pub source: String,
    /// Its revision there.
    pub revision: i64,
    /// The table's text.
    pub text: String,
}

impl LocalCopy {
    /// Reads the copy at `path`, kept of `target`'s key (a copy of another
    /// key, another fleet's table perhaps, is refused; other endpoints of
    /// the same key are the same table).
    pub fn read(path: &Path, target: &Target) -> Result<LocalCopy, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let copy: LocalCopy =
            serde_json::from_str(&text).map_err(|e| format!("{}: not a local copy: {e}", path.display()))?;
        match Target::parse(&copy.source) {
            Ok(of) if of.key == target.key => Ok(copy),
            _ => Err(format!("{}: a copy of {}, not of key {}", path.display(), copy.source, target.key)),
        }
    }

    /// Writes it to `path` whole (a temporary file renamed over it).
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let tmp = path.with_extension("tmp");
        let body = serde_json::to_vec(self).map_err(|e| e.to_string())?;
        std::fs::write(&tmp, body)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// How a followed key is read.
#[derive(Debug, Clone)]
pub struct FollowOptions {
    /// Where the last good table is kept.
    pub local_copy: PathBuf,
    /// How often the source is confirmed current (a lost watch is seen within it).
    pub progress: Duration,
}

/// The table at `target` when the instance starts: `(text, revision, from
/// the local copy)`. etcd first; when it cannot be reached (or has no table
/// there), the local copy.
pub async fn initial(client: &Client, target: &Target, local_copy: &Path) -> Result<(String, i64, bool), String> {
    let reached = tokio::time::timeout(Duration::from_secs(10), client.get(&target.key)).await;
    let why = match reached {
        Ok(Ok((Some(kv), _))) => return Ok((kv.value, kv.mod_revision, false)),
        Ok(Ok((None, _))) => format!("{}: no such key", target.name()),
        Ok(Err(e)) => e.to_string(),
        Err(_) => "no answer within 10 s".to_string(),
    };
    match LocalCopy::read(local_copy, target) {
        Ok(copy) => {
            tracing::warn!(source = %target.name(), error = %why, local_copy = %local_copy.display(), revision = copy.revision,
                "etcd not reachable at start: serving the local copy of the last good table");
            Ok((copy.text, copy.revision, true))
        }
        Err(e) => Err(format!("{why}; and no local copy to start from ({e})")),
    }
}

/// How to reach and follow an etcd key.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// The endpoints and the key.
    pub target: crate::source::etcd::Target,
    /// TLS to the endpoints (`None`: plain HTTP).
    pub tls: Option<crate::config::schema::UpstreamTls>,
    /// User and password, when etcd has authentication on.
    pub user: Option<(String, String)>,
    /// Where the last good table is kept.
    pub local_copy: PathBuf,
    /// How often the source is confirmed current.
    pub progress: Duration,
}

/// An instance started on a table from etcd.
#[derive(Debug)]
pub struct Started {
    /// The table, valid and loaded as this instance's.
    pub cfg: crate::config::Config,
    /// Its text.
    pub text: String,
    /// The client that read it, to follow the key.
    pub client: Arc<Client>,
    /// How.
    pub options: EtcdOptions,
    /// Its revision.
    pub revision: i64,
    /// What this instance runs, for the fleet.
    pub status: Arc<Status>,
}

/// Why an instance cannot start from etcd.
#[derive(Debug)]
pub enum StartError {
    /// The TLS files for etcd cannot be used.
    Tls(crate::tls::TlsError),
    /// Neither etcd nor a local copy gave a table.
    Unreachable(String),
    /// etcd's table is invalid and there is no valid local copy.
    Invalid(crate::config::ConfigErrors),
}

/// Reads the table at `options`' key (or the local copy: etcd unreachable,
/// the key missing, its table invalid) and loads it with `load`; keeps a
/// valid table read from etcd as the local copy.
pub async fn start(
    options: &EtcdOptions,
    load: impl Fn(&str, &str) -> Result<crate::config::Config, crate::config::ConfigErrors>,
) -> Result<Started, StartError> {
    let tls = match &options.tls {
        Some(t) => Some(Arc::new(crate::tls::client_config(t).map_err(StartError::Tls)?)),
        None => None,
    };
    let client = Client::new(&options.target, tls, options.user.clone());
    let name = options.target.name();
    let (mut text, mut revision, mut cached) =
        initial(&client, &options.target, &options.local_copy).await.map_err(StartError::Unreachable)?;
    let status = Arc::new(Status::default());
    let cfg = match load(&text, &name) {
        Ok(cfg) => cfg,
        // etcd's table is invalid: the last good one on disk, if there is one.
        Err(errors) if !cached => {
            let copy = LocalCopy::read(&options.local_copy, &options.target)
                .map_err(|_| StartError::Invalid(errors.clone()))?;
            let cfg = load(&copy.text, &name).map_err(|_| StartError::Invalid(errors.clone()))?;
            tracing::error!(source = %name, revision, errors = %errors,
                "the table in etcd is invalid: starting from the local copy of the last good one");
            status.rejected(revision, errors.located());
            (text, revision, cached) = (copy.text, copy.revision, true);
            cfg
        }
        Err(errors) => return Err(StartError::Invalid(errors)),
    };
    if !cached {
        let copy = LocalCopy { source: name.clone(), revision, text: text.clone() };
        if let Err(e) = copy.write(&options.local_copy) {
            tracing::warn!(error = %e, "cannot keep the local copy of the table");
        }
    }
    status.applied(revision, &crate::routing::shared::sha256_hex(&text), 0.0, cached);
    Ok(Started { cfg, text, client: Arc::new(client), options: options.clone(), revision, status })
}

/// Follows `target`'s key from `revision` (the one running) until `stop`.
pub async fn follow(
    client: Arc<Client>,
    target: Target,
    reloader: Arc<Reloader>,
    status: Arc<Status>,
    options: FollowOptions,
    mut revision: i64,
    mut stop: watch::Receiver<bool>,
) {
    let name = target.name();
    let keeper = Keeper::new(options.local_copy.clone());
    let mut tick = tokio::time::interval(options.progress);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Events from `from` on: the running revision is read again first, so a
    // table put while the instance started from its local copy is not missed.
    let mut from = 0;
    loop {
        if from == 0 {
            match client.get(&target.key).await {
                Ok((kv, header)) => {
                    status.confirm();
                    match kv {
                        Some(kv) if kv.mod_revision != revision => {
                            revision = kv.mod_revision;
                            apply(&reloader, &status, &keeper, &name, kv.value, revision, Instant::now()).await;
                        }
                        // No key in an etcd whose revisions went back: any put of it is newer.
                        None if header < revision => revision = 0,
                        _ => {}
                    }
                    from = header + 1;
                }
                Err(e) => {
                    tracing::warn!(source = %name, error = %e, "etcd not reachable; serving the last good table");
                    if pause(&mut stop, Duration::from_millis(500)).await {
                        return;
                    }
                    continue;
                }
            }
        }
        let mut watching = match client.watch(&target.key, from).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(source = %name, error = %e, "cannot watch the table key; trying again");
                from = 0;
                if pause(&mut stop, Duration::from_millis(500)).await {
                    return;
                }
                continue;
            }
        };
        loop {
            tokio::select! {
                () = stopped(&mut stop) => return,
                _ = tick.tick() => {
                    // A watch can be lost without an error: the key is read
                    // as well, and what the watch missed applied.
                    if let Ok((kv, header)) = client.get(&target.key).await {
                        status.confirm();
                        // etcd restored from an older snapshot, or replaced:
                        // its revisions went back (below the running table's,
                        // or below one the watch had reached), and a watch
                        // from there would wait for them to come round.
                        let older = kv.as_ref().is_some_and(|kv| kv.mod_revision < revision);
                        if older || header < revision || header + 1 < from {
                            tracing::warn!(source = %name, running = revision, etcd = header,
                                "etcd's revision went back (restored or replaced); following it from its current one");
                            from = 0;
                            break;
                        }
                        if let Some(kv) = kv.filter(|kv| kv.mod_revision > revision) {
                            revision = kv.mod_revision;
                            from = revision + 1;
                            apply(&reloader, &status, &keeper, &name, kv.value, revision, Instant::now()).await;
                        }
                    }
                }
                event = watching.next() => match event {
                    Ok(Event::Created) => status.confirm(),
                    Ok(Event::Progress(r)) => {
                        status.confirm();
                        from = from.max(r + 1);
                    }
                    Ok(Event::Put(kv)) => {
                        let arrived = Instant::now();
                        status.confirm();
                        from = kv.mod_revision + 1;
                        if kv.mod_revision > revision {
                            revision = kv.mod_revision;
                            apply(&reloader, &status, &keeper, &name, kv.value, revision, arrived).await;
                        }
                    }
                    Ok(Event::Deleted(r)) => {
                        from = r + 1;
                        tracing::error!(source = %name, revision = r, "the table key was deleted; the last good table keeps serving");
                    }
                    Ok(Event::Compacted(c)) => {
                        tracing::warn!(source = %name, compacted = c, "watch revision compacted; reading the key again");
                        from = 0;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(source = %name, error = %e, from, "table watch lost; resuming");
                        if e.0.contains("permission denied") || e.0.contains("auth") {
                            client.forget_token();
                        }
                        if pause(&mut stop, Duration::from_millis(200)).await {
                            return;
                        }
                        break;
                    }
                },
            }
        }
    }
}

/// Resolves once `stop` says stop (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Sleeps `d`; whether `stop` came first.
async fn pause(stop: &mut watch::Receiver<bool>, d: Duration) -> bool {
    tokio::select! {
        () = stopped(stop) => true,
        () = tokio::time::sleep(d) => false,
    }
}

/// Applies `text` (revision `revision`, arrived at `arrived`), keeps the
/// local copy and reports it.
async fn apply(
    reloader: &Arc<Reloader>,
    status: &Arc<Status>,
    keeper: &Keeper,
    source: &str,
    text: String,
    revision: i64,
    arrived: Instant,
) {
    let sha = crate::routing::shared::sha256_hex(&text);
    let running = reloader.shared().snapshot().sha256.clone();
    if sha == running {
        status.applied(revision, &sha, arrived.elapsed().as_secs_f64(), false);
        keeper.keep(LocalCopy { source: source.to_string(), revision, text });
        return;
    }
    let r = Arc::clone(reloader);
    let by = Provenance { who: "etcd".into(), revision: Some(revision) };
    let copy = text.clone();
    let result = tokio::task::spawn_blocking(move || r.apply(copy, &by)).await;
    match result {
        Ok(Ok(_)) => {
            status.applied(revision, &sha, arrived.elapsed().as_secs_f64(), false);
            keeper.keep(LocalCopy { source: source.to_string(), revision, text });
        }
        Ok(Err(ReloadError::Invalid(errors))) => status.rejected(revision, errors.located()),
        Ok(Err(ReloadError::NeedsRestart(why))) => status.rejected(revision, vec![why]),
        Err(e) => status.rejected(revision, vec![format!("the apply task failed: {e}")]),
    }
}

/// The local copy's writer: the newest copy handed to it is written on a
/// blocking thread, one write at a time, and never waited for. A disk that
/// hangs holds up neither a worker nor the following of new revisions;
/// copies handed over meanwhile give way to the newest, so copies are
/// still written in revision order.
#[derive(Debug)]
struct Keeper {
    path: PathBuf,
    /// The copy waiting to be written, and whether a write is under way.
    next: Arc<Mutex<(Option<LocalCopy>, bool)>>,
}

impl Keeper {
    fn new(path: PathBuf) -> Keeper {
        Keeper { path, next: Arc::default() }
    }

    fn keep(&self, copy: LocalCopy) {
        fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
            m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
        }
        {
            let mut next = lock(&self.next);
            next.0 = Some(copy);
            if std::mem::replace(&mut next.1, true) {
                return;
            }
        }
        let (path, next) = (self.path.clone(), Arc::clone(&self.next));
        tokio::task::spawn_blocking(move || loop {
            let copy = {
                let mut next = lock(&next);
                match next.0.take() {
                    Some(copy) => copy,
                    None => {
                        next.1 = false;
                        return;
                    }
                }
            };
            if let Err(e) = copy.write(&path) {
                tracing::warn!(error = %e, "cannot keep the local copy of the table");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_keeper_writes_the_newest_copy_it_was_handed() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("copy.json");
        let keeper = Keeper::new(path.clone());
        let target = Target::parse("etcd://10.0.0.1:2379/fleet/a")?;
        let copy = |revision| LocalCopy { source: target.name(), revision, text: format!("version: {revision}\n") };
        for revision in 1..=20 {
            keeper.keep(copy(revision));
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while LocalCopy::read(&path, &target).map(|c| c.revision) != Ok(20) {
            assert!(std::time::Instant::now() < deadline, "the newest copy was not written");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(LocalCopy::read(&path, &target), Ok(copy(20)));
        Ok(())
    }

    #[test]
    fn a_local_copy_serves_its_own_key_alone() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("copy.json");
        let copy =
            LocalCopy { source: "etcd://10.0.0.1:2379/fleet/a".into(), revision: 7, text: "version: 1\n".into() };
        copy.write(&path)?;
        // The same key through other endpoints: the same table.
        assert_eq!(LocalCopy::read(&path, &Target::parse("etcd://10.0.0.2:2379,10.0.0.3:2379/fleet/a")?), Ok(copy));
        let other = LocalCopy::read(&path, &Target::parse("etcd://10.0.0.1:2379/fleet/b")?);
        assert!(other.is_err_and(|e| e.contains("a copy of etcd://10.0.0.1:2379/fleet/a, not of key /fleet/b")));
        Ok(())
    }
}
