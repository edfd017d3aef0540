//! Live reload: read → parse → validate → compile → one atomic swap.
//!
//! Triggers: [`watch`] (a debounced watch on the file's directory, so that
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

use super::shared::{sha256_hex, SharedTable};

use crate::config::{self, ConfigErrors};

/// What a successful reload did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReloadOutcome {
    /// Version of the published table.
    pub version: u64,
    /// SHA-256 of the new text.
    pub sha256: String,
    /// Restart-only keys that changed in the file and were not applied.
    pub needs_restart: Vec<&'static str>,
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

/// Reloads one file into one [`SharedTable`].
#[derive(Debug)]
pub struct Reloader {
    path: PathBuf,
    shared: Arc<SharedTable>,
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
        let sha = shared.snapshot().sha256.clone();
        Reloader {
            path: path.into(),
            shared,
            successes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            last_attempt: Mutex::new(Some(sha)),
            history: Mutex::new(VecDeque::with_capacity(HISTORY)),
        }
    }

    /// The watched file.
    pub fn path(&self) -> &Path {
        &self.path
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

    /// Reloads now, whatever the file's content (SIGHUP, `POST /reload`).
    pub fn reload_now(&self) -> Result<ReloadOutcome, ReloadError> {
        let mut last = self.last_attempt.lock().unwrap_or_else(|p| p.into_inner());
        let read = config::read_text(&self.path);
        *last = Some(fingerprint(&read));
        self.run(read)
    }

    /// Reloads only if the file's content (or its read error) differs from
    /// the last attempt; `None` when nothing changed.
    pub fn reload_if_changed(&self) -> Option<Result<ReloadOutcome, ReloadError>> {
        let mut last = self.last_attempt.lock().unwrap_or_else(|p| p.into_inner());
        let read = config::read_text(&self.path);
        let fp = fingerprint(&read);
        if last.as_deref() == Some(fp.as_str()) {
            return None;
        }
        *last = Some(fp);
        Some(self.run(read))
    }

    fn run(&self, read: Result<String, String>) -> Result<ReloadOutcome, ReloadError> {
        let name = self.path.display().to_string();
        let result = read.map_err(|m| ReloadError::Invalid(ConfigErrors::single(&name, m, None))).and_then(|text| {
            let cfg = config::load_str(&text, &name).map_err(ReloadError::Invalid)?;
            let sha256 = sha256_hex(&text);
            let (version, needs_restart) = self.shared.publish_config(&cfg, text).map_err(ReloadError::NeedsRestart)?;
            Ok(ReloadOutcome { version, sha256, needs_restart })
        });
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
                    "routing table reloaded"
                );
                if !o.needs_restart.is_empty() {
                    tracing::warn!(path = %name, keys = ?o.needs_restart, "restart-only keys changed; running values kept until restart");
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
    let path = reloader.path().to_path_buf();
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
            ev = rx.recv() => {
                if ev.is_none() {
                    // The watcher is gone; keep polling (or wait for shutdown).
                    if poll.is_none() {
                        shutdown.as_mut().await;
                        break;
                    }
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
