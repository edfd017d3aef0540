//! Live reload: read → parse → validate → compile → one atomic swap.
//!
//! Every source feeds [`Reloader::apply`]: a file (this module's triggers)
//! or an etcd key (`crate::source::etcd`). Each attempt is kept in the
//! history and, with an [`Audit`] trail, appended to it with what moved.
//! [`Reloader::dry_run`] answers the [`Plan`] of a text without applying it.
//!
//! File triggers: [`watch`] (a debounced watch on the file's directory, so that
//! editors' rename-on-save and the Kubernetes ConfigMap `..data` symlink swap
//! both work, plus optional polling for mounts where inotify is silent),
//! SIGHUP and `POST /reload` (both call [`Reloader::reload_now`]). A file that
//! fails never replaces the running table: it is logged once, with all its
//! problems, and counted. Restart-only keys (`listen`, `admin`, `region`) that
//! changed are reported in the outcome and keep their running values.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::json;

use super::audit::Audit;
use super::plan::{Move, Plan, Unfenced, Window};
use super::shared::{sha256_hex, SharedTable};
use super::table::Table;

use crate::config::instance::InstanceFlags;
use crate::config::{self, ConfigErrors};

/// What a successful reload did.
#[derive(Clone, Debug, PartialEq)]
pub struct ReloadOutcome {
    /// Version of the published table.
    pub version: u64,
    /// SHA-256 of the new text.
    pub sha256: String,
    /// Restart-only keys that changed in the file and were not applied.
    pub needs_restart: Vec<&'static str>,
    /// The placement units whose owner changed.
    pub moves: Vec<Move>,
    /// The fences the table gave up (logged as a warning).
    pub unfenced: Vec<Unfenced>,
}

/// Where a table came from and what made it change, for the history and
/// the audit trail.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Provenance {
    /// What triggered it: `file watch`, `SIGHUP`, `POST /reload by …`, `etcd`.
    pub who: String,
    /// The source's revision (etcd's mod_revision of the key).
    pub revision: Option<i64>,
}

impl Provenance {
    /// A change triggered by `who`, without a revision.
    pub fn by(who: impl Into<String>) -> Provenance {
        Provenance { who: who.into(), revision: None }
    }
}

/// Where a reloader's tables come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A file, read on every trigger.
    File(PathBuf),
    /// A source that pushes each new text to [`Reloader::apply`] (an etcd
    /// key, named as `etcd://…/key`).
    Pushed(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Pushed(name) => f.write_str(name),
        }
    }
}

/// Why a reload was rejected (the running table stays).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReloadError {
    /// The file could not be read, parsed or validated.
    Invalid(ConfigErrors),
    /// The file changes something that only a restart can change, in a way
    /// the running instance cannot keep (e.g. it removes the served region).
    NeedsRestart(String),
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadError::Invalid(e) => write!(f, "config rejected ({} problems):\n{e}", e.len()),
            ReloadError::NeedsRestart(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ReloadError {}

/// Watch tuning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchOptions {
    /// Quiet time after the last file event before reloading.
    pub debounce: Duration,
    /// Also re-read the file this often (for bind mounts and NFS, where
    /// inotify events never arrive); `None` disables polling.
    pub poll_interval: Option<Duration>,
    /// Use file-system events (inotify); `false` leaves polling alone.
    pub events: bool,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions { debounce: Duration::from_millis(250), poll_interval: None, events: true }
    }
}

/// One reload attempt, as the history keeps it.
#[derive(Clone, Debug)]
pub struct ReloadRecord {
    /// When it ran.
    pub at: SystemTime,
    /// What came of it.
    pub result: Result<ReloadOutcome, ReloadError>,
}

/// Reload attempts the history keeps (the newest).
pub const HISTORY: usize = 20;

/// Reloads one source into one [`SharedTable`].
#[derive(Debug)]
pub struct Reloader {
    source: Source,
    shared: Arc<SharedTable>,
    audit: Option<Arc<Audit>>,
    flags: InstanceFlags,
    successes: AtomicU64,
    failures: AtomicU64,
    /// Serialises reloads; holds a fingerprint of the last text attempted
    /// (or of the read error), so the watcher skips unchanged files.
    last_attempt: Mutex<Option<String>>,
    /// The last [`HISTORY`] attempts, oldest first.
    history: Mutex<VecDeque<ReloadRecord>>,
}

impl Reloader {
    /// A reloader for `path` publishing into `shared`. The table in `shared`
    /// is taken as the one loaded from the file's current text.
    pub fn new(path: impl Into<PathBuf>, shared: Arc<SharedTable>) -> Self {
        Reloader::from_source(Source::File(path.into()), shared)
    }

    /// A reloader for `source` publishing into `shared`.
    pub fn from_source(source: Source, shared: Arc<SharedTable>) -> Self {
        let sha = shared.snapshot().sha256.clone();
        Reloader {
            source,
            shared,
            audit: None,
            flags: InstanceFlags::default(),
            successes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            last_attempt: Mutex::new(Some(sha)),
            history: Mutex::new(VecDeque::with_capacity(HISTORY)),
        }
    }

    /// Appends every attempt to `audit`.
    pub fn with_audit(mut self, audit: Option<Arc<Audit>>) -> Self {
        self.audit = audit;
        self
    }

    /// Puts the per-instance `flags` over every table it loads.
    pub fn with_flags(mut self, flags: InstanceFlags) -> Self {
        self.flags = flags;
        self
    }

    /// The per-instance flags put over every table it loads.
    pub fn flags(&self) -> &InstanceFlags {
        &self.flags
    }

    /// Loads `text` as a table of this instance (its flags put over it).
    /// The region it serves is restart-only: a table that names another
    /// (which it has) is compiled in the running one, so that `local` and
    /// a local mint keep meaning what the instance serves; the second
    /// value says so, and the change waits for a restart.
    fn load(&self, text: &str, name: &str) -> Result<(crate::config::Config, bool), ReloadError> {
        let cfg = self.flags.load(text, name).map_err(ReloadError::Invalid)?;
        let running = self.shared.snapshot();
        let served = &running.table.settings().restart.region;
        if let (None, Some(named)) = (served, &cfg.settings.restart.region) {
            // Compiled in it, `local` and local mints would mean a region
            // this instance does not serve until it restarts.
            return Err(ReloadError::NeedsRestart(format!(
                "this instance serves no region; a table that names one ({named}) needs a restart"
            )));
        }
        let kept = served
            .as_ref()
            .filter(|r| cfg.settings.restart.region.as_ref() != Some(*r) && cfg.regions.iter().any(|n| &n.name == *r));
        let Some(region) = kept else { return Ok((cfg, false)) };
        let flags = InstanceFlags { region: Some(region.clone()), ..self.flags.clone() };
        flags.load(text, name).map(|cfg| (cfg, true)).map_err(ReloadError::Invalid)
    }

    /// Where the tables come from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The table file, when tables come from one.
    pub fn path(&self) -> Option<&Path> {
        match &self.source {
            Source::File(p) => Some(p),
            Source::Pushed(_) => None,
        }
    }

    /// The table this reloader publishes into.
    pub fn shared(&self) -> &Arc<SharedTable> {
        &self.shared
    }

    /// Successful reloads so far.
    pub fn successes(&self) -> u64 {
        self.successes.load(Ordering::Relaxed)
    }

    /// Rejected reloads so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// The last [`HISTORY`] reload attempts, newest first.
    pub fn history(&self) -> Vec<ReloadRecord> {
        let history = self.history.lock().unwrap_or_else(|p| p.into_inner());
        history.iter().rev().cloned().collect()
    }

    /// The source's current text: the file read now (a pushed source has
    /// none to read: its texts come to [`Reloader::apply`]).
    fn read(&self) -> Result<String, String> {
        match &self.source {
            Source::File(p) => config::read_text(p),
            Source::Pushed(name) => Err(format!("tables from {name} are applied as they are put there")),
        }
    }

    /// Reloads now, whatever the file's content (SIGHUP, `POST /reload`).
    pub fn reload_now(&self, by: &Provenance) -> Result<ReloadOutcome, ReloadError> {
        let mut last = self.last_attempt.lock().unwrap_or_else(|p| p.into_inner());
        let read = self.read();
        *last = Some(fingerprint(&read));
        self.run(read, by)
    }

    /// Reloads only if the file's content (or its read error) differs from
    /// the last attempt; `None` when nothing changed.
    pub fn reload_if_changed(&self) -> Option<Result<ReloadOutcome, ReloadError>> {
        let mut last = self.last_attempt.lock().unwrap_or_else(|p| p.into_inner());
        let read = self.read();
        let fp = fingerprint(&read);
        if last.as_deref() == Some(fp.as_str()) {
            return None;
        }
        *last = Some(fp);
        Some(self.run(read, &Provenance::by("file watch")))
    }

    /// Applies `text` from the source (a pushed source's new revision):
    /// validate, compile, swap, or keep the running table and say why.
    pub fn apply(&self, text: String, by: &Provenance) -> Result<ReloadOutcome, ReloadError> {
        let mut last = self.last_attempt.lock().unwrap_or_else(|p| p.into_inner());
        *last = Some(sha256_hex(&text));
        self.run(Ok(text), by)
    }

    /// What applying `text` (or the source's current text) would move, with
    /// the traffic of `window`, and the restart-only keys whose change would
    /// wait for a restart; nothing is applied.
    pub fn dry_run(
        &self,
        text: Option<String>,
        window: Option<&Window>,
    ) -> Result<(Plan, Vec<&'static str>), ReloadError> {
        let name = self.source.to_string();
        let text = match text {
            Some(t) => t,
            None => self.read().map_err(|m| ReloadError::Invalid(ConfigErrors::single(&name, m, None)))?,
        };
        let (cfg, region_kept) = self.load(&text, &name)?;
        let running = self.shared.snapshot();
        let mut next = Table::compile(&cfg);
        let needs_restart = next.keep_restart_only(&running.table).map_err(ReloadError::NeedsRestart)?;
        Ok((Plan::between(&running.table, &next, window), deferred(needs_restart, region_kept)))
    }

    fn run(&self, read: Result<String, String>, by: &Provenance) -> Result<ReloadOutcome, ReloadError> {
        let name = self.source.to_string();
        let running = self.shared.snapshot();
        let mut digest = None;
        let result = read.map_err(|m| ReloadError::Invalid(ConfigErrors::single(&name, m, None))).and_then(|text| {
            let sha256 = sha256_hex(&text);
            digest = Some(sha256.clone());
            let (cfg, region_kept) = self.load(&text, &name)?;
            let (version, needs_restart) = self.shared.publish_config(&cfg, text).map_err(ReloadError::NeedsRestart)?;
            let needs_restart = deferred(needs_restart, region_kept);
            let Plan { moves, unfenced, .. } = Plan::between(&running.table, &self.shared.snapshot().table, None);
            Ok(ReloadOutcome { version, sha256, needs_restart, moves, unfenced })
        });
        self.record(&name, by, digest.as_deref(), &result);
        {
            let mut history = self.history.lock().unwrap_or_else(|p| p.into_inner());
            if history.len() == HISTORY {
                history.pop_front();
            }
            history.push_back(ReloadRecord { at: SystemTime::now(), result: result.clone() });
        }
        match &result {
            Ok(o) => {
                self.successes.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    path = %name,
                    version = o.version,
                    sha256 = %o.sha256,
                    needs_restart = ?o.needs_restart,
                    moved = o.moves.len(),
                    by = %by.who,
                    "routing table reloaded"
                );
                if !o.needs_restart.is_empty() {
                    tracing::warn!(path = %name, keys = ?o.needs_restart, "restart-only keys changed; running values kept until restart");
                }
                for u in &o.unfenced {
                    tracing::warn!(
                        path = %name,
                        unit = %u.unit,
                        within = ?u.within,
                        phase = u.phase.name(),
                        epoch = u.epoch,
                        next = ?u.next,
                        "the table gives up a unit's fence (its move removed, its epoch set back, or a unit \
                         split out of it without the move): a write forwarded by an instance still on an \
                         older table is no longer refused"
                    );
                }
            }
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                let count = match e {
                    ReloadError::Invalid(errs) => errs.len(),
                    ReloadError::NeedsRestart(_) => 1,
                };
                tracing::error!(path = %name, problems = count, errors = %e, "routing table reload rejected; keeping the last good table");
            }
        }
        result
    }
}

impl Reloader {
    /// Appends the attempt to the audit trail, if there is one.
    fn record(&self, source: &str, by: &Provenance, sha256: Option<&str>, result: &Result<ReloadOutcome, ReloadError>) {
        let Some(audit) = &self.audit else { return };
        let mut entry = json!({ "source": source, "who": by.who, "sha256": sha256 });
        if let Some(r) = by.revision {
            entry["revision"] = json!(r);
        }
        match result {
            Ok(o) => {
                entry["event"] = json!("applied");
                entry["version"] = json!(o.version);
                entry["moves"] = serde_json::to_value(&o.moves).unwrap_or_default();
                if !o.unfenced.is_empty() {
                    entry["unfenced"] = serde_json::to_value(&o.unfenced).unwrap_or_default();
                }
                entry["deferred"] = json!(o.needs_restart);
                // The re-homing moves this table carries, each in its phase.
                let running = self.shared.snapshot();
                let table = &running.table;
                let phases: Vec<_> = table.moves().map(|m| table.move_json(m)).collect();
                if !phases.is_empty() {
                    entry["phases"] = json!(phases);
                }
            }
            Err(ReloadError::Invalid(errors)) => {
                entry["event"] = json!("rejected");
                entry["errors"] = json!(errors.located());
            }
            Err(ReloadError::NeedsRestart(why)) => {
                entry["event"] = json!("rejected");
                entry["errors"] = json!([why]);
            }
        }
        if let Err(e) = audit.append(entry) {
            tracing::error!(audit = %audit.path().display(), error = %e, "cannot append to the audit trail");
        }
    }
}

fn fingerprint(read: &Result<String, String>) -> String {
    match read {
        Ok(text) => sha256_hex(text),
        Err(e) => format!("error: {e}"),
    }
}

/// Watches the config file's directory with default options until `shutdown`.
pub async fn watch(reloader: Arc<Reloader>, shutdown: impl Future<Output = ()>) {
    watch_with(reloader, WatchOptions::default(), shutdown).await;
}

/// Watches the config file's directory until `shutdown` completes.
///
/// Reacts to create, modify, rename and remove events whose path is the
/// file's name or `..data` (the Kubernetes ConfigMap symlink), waits for
/// `debounce` of quiet, then reloads if the content changed. With
/// `poll_interval` set, also re-reads the file on that interval. If the
/// watch cannot be set up, a warning is logged and only polling runs.
pub async fn watch_with(reloader: Arc<Reloader>, options: WatchOptions, shutdown: impl Future<Output = ()>) {
    use notify::Watcher;

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let Some(path) = reloader.path().map(Path::to_path_buf) else { return };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = path.file_name().map(|n| n.to_os_string());
    let handler = move |res: notify::Result<notify::Event>| {
        let relevant = match &res {
            Ok(ev) => {
                !matches!(ev.kind, notify::EventKind::Access(_))
                    && ev.paths.iter().any(|p| {
                        let n = p.file_name();
                        n == file_name.as_deref() || n == Some(std::ffi::OsStr::new("..data"))
                    })
            }
            // An error from the watcher (e.g. queue overflow): re-check the file.
            Err(_) => true,
        };
        if relevant {
            let _ = tx.send(());
        }
    };
    let _watcher = match options.events.then(|| notify::recommended_watcher(handler)) {
        None => None,
        Some(w) => match w {
            Ok(mut w) => match w.watch(&dir, notify::RecursiveMode::NonRecursive) {
                Ok(()) => Some(w),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot watch config directory; relying on polling and SIGHUP");
                    None
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot create file watcher; relying on polling and SIGHUP");
                None
            }
        },
    };
    let mut poll = options.poll_interval.map(|d| {
        let mut i = tokio::time::interval(d.max(Duration::from_millis(10)));
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    });
    tokio::pin!(shutdown);
    // Events stop when the watcher is gone (or was never made); from then on
    // only the poll (or nothing) wakes the loop.
    let mut events_open = true;
    loop {
        let tick = async {
            match poll.as_mut() {
                Some(i) => {
                    i.tick().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = &mut shutdown => break,
            ev = rx.recv(), if events_open => {
                if ev.is_none() {
                    events_open = false;
                    continue;
                }
                // Debounce: wait for a quiet period, bounded so a file that
                // changes continuously is still reloaded.
                let deadline = tokio::time::Instant::now() + options.debounce * 8;
                loop {
                    match tokio::time::timeout(options.debounce, rx.recv()).await {
                        Ok(Some(())) if tokio::time::Instant::now() < deadline => continue,
                        _ => break,
                    }
                }
                reload_in_background(&reloader).await;
            }
            _ = tick => reload_in_background(&reloader).await,
        }
    }
}

async fn reload_in_background(reloader: &Arc<Reloader>) {
    let r = Arc::clone(reloader);
    // File I/O and compilation stay off the async workers.
    let _ = tokio::task::spawn_blocking(move || r.reload_if_changed()).await;
}

/// The restart-only keys a table changed (`keys`), with `region` when the
/// table was loaded in the running region instead of its own.
fn deferred(mut keys: Vec<&'static str>, region_kept: bool) -> Vec<&'static str> {
    if region_kept && !keys.contains(&"region") {
        keys.push("region");
        keys.sort_by_key(|k| config::restart::RESTART_ONLY.iter().position(|r| r == k));
    }
    keys
}
