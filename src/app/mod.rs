//! Assembly of the daemon: load the table, publish it, start the reload
//! triggers, bind the proxy and admin listeners and serve until a signal.
//! What happened is returned as a typed outcome ([`Exit`], [`ServeError`]);
//! the command line turns it into an exit code.
//!
//! Signals (Unix):
//!
//! * SIGHUP: reload the table file now (as `POST /reload`).
//! * SIGTERM (and SIGQUIT, which containers also send): graceful drain, as
//!   `POST /drain`. `/ready` answers 503 at once and HTTP/1.1 responses carry
//!   `Connection: close`; the proxy keeps accepting for `server.drain_delay`
//!   (so load balancers see the 503 and stop sending), then closes its
//!   listener, waits up to `server.shutdown_timeout` for in-flight requests
//!   and exits 0. A second SIGTERM during the drain exits at once (0).
//! * SIGINT (Ctrl-C): fast exit ([`Exit::Interrupted`]), without waiting
//!   for in-flight requests.
//! * SIGUSR1: the access-log file (`log.access_file`) is reopened, for logrotate.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

mod follow;

use crate::admin::{self, AdminState};
use crate::config::{self, Config, ConfigErrors};
use crate::proxy::{Proxy, Shared};
use crate::routing::reload::{self, Reloader};
use crate::routing::shared::SharedTable;
use crate::server::Drain;
use crate::server::{self, ServerOptions};
use crate::telemetry::access::ACCESS_FILE;
use crate::tls::{ServerTls, TlsError};
use crate::upstream::ClientSettings;

/// How a serving process ended, when it ended well.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// A graceful stop: SIGTERM (or SIGQUIT, or `POST /drain`) and the
    /// drain that follows, or a second termination signal during it.
    Stopped,
    /// SIGINT (Ctrl-C): a fast exit.
    Interrupted,
}

/// Why `serve` could not start or keep serving.
#[derive(Debug)]
pub enum ServeError {
    /// The table file is invalid.
    Config {
        /// The file.
        path: PathBuf,
        /// Every problem in it.
        errors: ConfigErrors,
    },
    /// The TLS files of `server.tls` or `upstream.tls` cannot be used.
    Tls(TlsError),
    /// A listener could not be bound.
    Bind {
        /// `listen` or `admin`.
        listener: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        error: io::Error,
    },
    /// Serving failed.
    Io(io::Error),
    /// The table source (etcd, the audit trail) cannot be used.
    Source(String),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Config { path, errors } => {
                write!(f, "{errors}\n{} problem(s) in {}; not starting", errors.len(), path.display())
            }
            ServeError::Tls(e) => write!(f, "{e}; not starting"),
            ServeError::Bind { listener, addr, error } => write!(f, "cannot listen on {addr} ({listener}): {error}"),
            ServeError::Io(e) => write!(f, "{e}"),
            ServeError::Source(e) => write!(f, "{e}; not starting"),
        }
    }
}

impl std::error::Error for ServeError {}

/// Options of the proxy that are fixed at start-up.
pub fn server_options(cfg: &Config) -> ServerOptions {
    let fixed = &cfg.settings.restart;
    ServerOptions {
        header_read_timeout: fixed.header_read_timeout,
        max_header_bytes: fixed.max_header_bytes,
        max_headers: fixed.max_headers,
        shutdown_timeout: cfg.settings.server.shutdown_timeout,
        idle_timeout: fixed.idle_timeout,
        answer_min_rate: fixed.answer_min_rate,
        max_connections: fixed.max_connections,
        admin_max_connections: fixed.admin_max_connections,
    }
}

/// File descriptors held besides the client connections and their upstream
/// ones: the standard streams, listeners, the table's directory watch,
/// health checks, the log, and the admin listener's connections on top.
const RESERVED_DESCRIPTORS: u64 = 128;

/// Raises the soft limit of open files to the hard one (the common soft
/// limit of 1,024 would make `accept` fail long before `max_connections`),
/// and lowers `opts.max_connections` to what the limit allows, logged: each
/// client connection may hold an upstream connection (two descriptors),
/// after room for the admin listener and the rest. Returns the limit.
pub fn fit_descriptors(opts: &mut ServerOptions) -> Option<u64> {
    let limit = raise_descriptor_limit()?;
    let room = limit.saturating_sub(RESERVED_DESCRIPTORS + opts.admin_max_connections as u64) / 2;
    let fit = usize::try_from(room).unwrap_or(usize::MAX).max(1);
    if opts.max_connections > fit {
        tracing::warn!(
            open_files = limit,
            configured = opts.max_connections,
            max_connections = fit,
            "server.max_connections lowered to what the open-file limit allows (each client connection may \
             hold an upstream one); raise the hard limit (ulimit -Hn, LimitNOFILE=) to allow more"
        );
        opts.max_connections = fit;
    }
    Some(limit)
}

/// The soft limit of open files after raising it to the hard one (`None`:
/// unlimited, or not known on this system).
#[cfg(target_os = "linux")]
fn raise_descriptor_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let now = getrlimit(Resource::Nofile);
    if now.current != now.maximum {
        if let Err(e) = setrlimit(Resource::Nofile, Rlimit { current: now.maximum, maximum: now.maximum }) {
            tracing::warn!(error = %e, "cannot raise the open-file limit to its hard limit");
        }
    }
    getrlimit(Resource::Nofile).current
}

#[cfg(not(target_os = "linux"))]
fn raise_descriptor_limit() -> Option<u64> {
    None
}

/// Client settings that are fixed at start-up. The `upstream.tls` files are
/// read here; when they cannot be (logged), `https://` endpoints fail closed
/// (`serve` checks them first and refuses to start instead).
pub fn client_settings(cfg: &Config) -> ClientSettings {
    let fixed = &cfg.settings.restart;
    ClientSettings {
        connect_timeout: fixed.connect_timeout,
        pool_idle_timeout: fixed.pool_idle_timeout,
        tls: Some(Arc::new(crate::tls::client_config_or_closed(&fixed.upstream_tls))),
    }
}

/// Publishes a validated table, builds the proxy that reads it and starts
/// the active health checks of its endpoints, DNS discovery and the access
/// log's following of the table.
pub fn build_proxy(cfg: &Config, text: &str) -> Arc<Proxy> {
    let table = Arc::new(SharedTable::from_config(cfg, text));
    let shared = Shared::new(Arc::clone(&table), client_settings(cfg));
    shared.health.track(&table);
    crate::upstream::health::spawn_checker(
        Arc::downgrade(&shared.health),
        Arc::downgrade(&table),
        shared.upstreams.connector().clone(),
    );
    crate::upstream::dns::spawn_discovery(Arc::downgrade(&table), Arc::clone(&shared.dns));
    follow::access_file(Arc::downgrade(&table));
    follow::gone_endpoints(Arc::downgrade(&table), Arc::downgrade(&shared.upstreams));
    Arc::new(Proxy::new(shared, &cfg.settings.restart.instance))
}

/// A proxy built from a validated table (its TLS files read), serving on
/// `listener`, and the admin endpoints (the dashboard among them) on
/// `admin`, in a task of its own until `shutdown`: the proxy at once, and
/// the task. What `demo` and the tests run.
pub fn spawn_proxy(
    cfg: &Config,
    text: &str,
    listener: TcpListener,
    admin: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<(Arc<Proxy>, tokio::task::JoinHandle<io::Result<bool>>)> {
    let tls = match &cfg.settings.restart.server_tls {
        Some(t) => Some(Arc::new(ServerTls::load(t).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?)),
        None => None,
    };
    let proxy = build_proxy(cfg, text);
    let opts = server_options(cfg);
    let grace = opts.shutdown_timeout;
    let admin = admin.map(|l| AdminTask::spawn(l, Arc::new(AdminState::new(proxy.shared().clone(), None)), opts));
    let metrics = Arc::clone(&proxy.shared().metrics);
    let serving = Arc::clone(&proxy);
    let task = tokio::spawn(async move {
        let served = server::serve(listener, serving, metrics, opts, tls, async move {
            shutdown.await;
            grace
        })
        .await;
        if let Some(admin) = admin {
            admin.stop().await;
        }
        served
    });
    Ok((proxy, task))
}

/// The admin listener, served by a task of its own until [`AdminTask::stop`].
struct AdminTask {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl AdminTask {
    fn spawn(listener: TcpListener, state: Arc<AdminState>, opts: ServerOptions) -> AdminTask {
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let until = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            if let Err(e) = admin::serve_admin(listener, state, opts, until).await {
                tracing::error!(error = %e, "admin listener failed");
            }
        });
        AdminTask { stop, task }
    }

    /// Stops the listener and waits for its connections to finish (as
    /// `serve_admin` does at shutdown).
    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// A proxy with everything around it: the table, its reloader, the admin state.
#[derive(Debug)]
pub struct Instance {
    /// The live table.
    pub shared: Arc<SharedTable>,
    /// The proxy (its metrics and drain are the instance's).
    pub proxy: Arc<Proxy>,
    /// Reloads the table file (`None` when the table did not come from a file).
    pub reloader: Option<Arc<Reloader>>,
    /// What the admin listener serves.
    pub admin: Arc<AdminState>,
    /// TLS on the proxy listener (`server.tls`), when set with [`Instance::with_tls`].
    pub tls: Option<Arc<ServerTls>>,
}

impl Instance {
    /// Publishes a validated table (loaded from `path`, when given) and builds
    /// the proxy, reloader and admin state. `token`: the admin bearer token.
    pub fn new(cfg: &Config, text: &str, path: Option<PathBuf>, token: Option<String>) -> Instance {
        Instance::with_reloader(cfg, text, token, |shared| path.map(|p| Reloader::new(p, shared)))
    }

    /// [`Instance::new`] with the reloader `make` builds over the live table.
    pub fn with_reloader(
        cfg: &Config,
        text: &str,
        token: Option<String>,
        make: impl FnOnce(Arc<SharedTable>) -> Option<Reloader>,
    ) -> Instance {
        let proxy = build_proxy(cfg, text);
        let shared = Arc::clone(&proxy.shared().table);
        let reloader = make(Arc::clone(&shared)).map(Arc::new);
        let admin = Arc::new(AdminState::new(proxy.shared().clone(), reloader.clone()).with_token(token));
        Instance { shared, proxy, reloader, admin, tls: None }
    }

    /// Serves the proxy listener over `tls` (loaded by [`crate::tls::load`]).
    pub fn with_tls(mut self, tls: Option<ServerTls>) -> Instance {
        self.tls = tls.map(Arc::new);
        self
    }

    /// The drain shared by the proxy, `/ready`, `POST /drain` and the signal handlers.
    pub fn drain(&self) -> &Drain {
        &self.proxy.shared().drain
    }

    /// Starts the graceful drain (what SIGTERM and `POST /drain` do).
    /// Returns `false` when it had already started.
    pub fn start_drain(&self) -> bool {
        start_drain(self.drain())
    }

    /// Serves the proxy on `listener` and the admin endpoints on `admin`
    /// until the drain completes: after the drain starts, `drain_delay`
    /// more of accepting, then the listener closes and in-flight requests
    /// get up to `shutdown_timeout` (both read from the table in force at
    /// that moment). The admin listener stays up until the proxy is done.
    /// Returns whether every in-flight request finished in time.
    pub async fn run(
        &self,
        listener: TcpListener,
        admin: Option<TcpListener>,
        opts: ServerOptions,
    ) -> io::Result<bool> {
        let admin = admin.map(|l| AdminTask::spawn(l, Arc::clone(&self.admin), opts));
        // Held requests keep their connections: their cap follows what the listener takes.
        self.proxy.shared().holds.listener_takes(opts.max_connections);
        let sequence = drain_sequence(self.drain().clone(), Arc::clone(&self.shared));
        let tls = self.tls.clone();
        let metrics = Arc::clone(&self.proxy.shared().metrics);
        let result = server::serve(listener, Arc::clone(&self.proxy), metrics, opts, tls, sequence).await;
        if let Some(admin) = admin {
            admin.stop().await;
        }
        result
    }
}

/// Starts `drain` and logs it once. Returns `false` when it had already started.
pub fn start_drain(drain: &Drain) -> bool {
    let first = drain.start();
    if first {
        tracing::info!("drain started: /ready answers 503; the listener closes after server.drain_delay");
    }
    first
}

/// Waits for the drain to start, then for `server.drain_delay`; yields
/// `server.shutdown_timeout`. Both are read from the table in force when
/// they are needed, so a reload before the drain changes them.
pub async fn drain_sequence(drain: Drain, shared: Arc<SharedTable>) -> Duration {
    drain.started().await;
    let delay = shared.snapshot().table.settings().server.drain_delay;
    tokio::time::sleep(delay).await;
    let grace = shared.snapshot().table.settings().server.shutdown_timeout;
    tracing::info!(shutdown_timeout = ?grace, "drain delay over: listener closed, finishing in-flight requests");
    grace
}

/// Where `serve` takes its table from.
#[derive(Debug, Clone)]
pub enum TableFrom {
    /// A file, watched.
    File(PathBuf),
    /// An etcd key, followed by revision.
    Etcd(EtcdOptions),
}

pub use crate::source::EtcdOptions;

/// What `serve` is given on its command line.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The table's source.
    pub table: TableFrom,
    /// Per-instance values put over the table's.
    pub flags: crate::config::instance::InstanceFlags,
    /// The audit trail to append to.
    pub audit: Option<PathBuf>,
}

impl ServeOptions {
    /// Serving the table file `path`, nothing else given.
    pub fn file(path: PathBuf) -> ServeOptions {
        ServeOptions { table: TableFrom::File(path), flags: Default::default(), audit: None }
    }
}

/// The table to start with (valid, the flags put over it), its text, its
/// source's name, and the etcd client following it.
async fn first_table(
    table: &TableFrom,
    flags: &crate::config::instance::InstanceFlags,
) -> Result<(Config, String, String, Option<crate::source::Started>), ServeError> {
    match table {
        TableFrom::File(path) => {
            let name = path.display().to_string();
            let invalid = |errors| ServeError::Config { path: path.clone(), errors };
            let text = config::read_text(path).map_err(|m| invalid(ConfigErrors::single(&name, m, None)))?;
            let cfg = flags.load(&text, &name).map_err(invalid)?;
            Ok((cfg, text, name, None))
        }
        TableFrom::Etcd(options) => {
            let started = crate::source::start(options, |text, name| flags.load(text, name)).await;
            let started = started.map_err(|e| match e {
                crate::source::StartError::Tls(e) => ServeError::Tls(e),
                crate::source::StartError::Unreachable(e) => ServeError::Source(e),
                crate::source::StartError::Invalid(errors) => {
                    ServeError::Config { path: PathBuf::from(options.target.name()), errors }
                }
            })?;
            Ok((started.cfg.clone(), started.text.clone(), options.target.name(), Some(started)))
        }
    }
}

/// The admin listener's pending-connection queue (a few probes and operators).
const ADMIN_BACKLOG: u32 = 128;

/// A listener on `addr` with `backlog` pending connections (`server.backlog`;
/// the kernel caps it at `net.core.somaxconn`), address reuse as
/// `TcpListener::bind` sets it.
fn listen_on(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    // As `TcpListener::bind` does: on Windows the option would let another
    // socket take a port in use.
    #[cfg(not(windows))]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// `shardgate serve`: serves until a signal or `POST /drain`.
pub async fn serve(options: ServeOptions) -> Result<Exit, ServeError> {
    let audit = match &options.audit {
        Some(p) => Some(Arc::new(crate::routing::audit::Audit::open(p).map_err(ServeError::Source)?)),
        None => None,
    };
    let (cfg, text, name, followed) = first_table(&options.table, &options.flags).await?;
    let tls = crate::tls::load(&cfg).map_err(ServeError::Tls)?;
    let bind =
        |listener, addr, backlog| listen_on(addr, backlog).map_err(|error| ServeError::Bind { listener, addr, error });
    let (listen, admin) = (cfg.settings.restart.listen, cfg.settings.restart.admin);
    let listener = bind("listen", listen, cfg.settings.restart.backlog)?;
    let admin_listener = bind("admin", admin, ADMIN_BACKLOG)?;
    let token = admin::token_from_env();
    if token.is_none() && !admin.ip().is_loopback() {
        tracing::warn!(
            admin = %admin,
            "the admin listener is not on a loopback address and SHARDGATE_ADMIN_TOKEN is not set: \
             anyone who reaches it can POST /drain and /reload"
        );
    }
    for warning in cfg.warnings() {
        tracing::warn!(table = %name, "{warning}");
    }
    let tls_on = tls.is_some();
    // Opened now, so a path that cannot be written is told at start.
    ACCESS_FILE.follow(cfg.settings.log.access_file.as_ref(), 0);
    let source = match &options.table {
        TableFrom::File(p) => reload::Source::File(p.clone()),
        TableFrom::Etcd(_) => reload::Source::Pushed(name.clone()),
    };
    let flags = options.flags.clone();
    let inst = Instance::with_reloader(&cfg, &text, token.clone(), |shared| {
        Some(Reloader::from_source(source, shared).with_flags(flags).with_audit(audit))
    })
    .with_tls(tls);
    let (stop_tx, stop_rx) = watch::channel(false);
    if let (Some(reloader), TableFrom::File(_)) = (&inst.reloader, &options.table) {
        spawn_reload_triggers(reloader, stop_rx.clone());
    }
    if let (Some(reloader), Some(f)) = (&inst.reloader, followed) {
        let fleet = Arc::new(crate::source::fleet::Fleet::new(
            Arc::clone(&f.client),
            f.options.target.clone(),
            (cfg.settings.restart.instance.clone(), cfg.settings.restart.region.clone()),
            Arc::clone(&f.status),
            Arc::clone(&inst.shared),
        ));
        inst.admin.set_fleet(Arc::clone(&fleet));
        let follow =
            crate::source::FollowOptions { local_copy: f.options.local_copy.clone(), progress: f.options.progress };
        tokio::spawn(crate::source::follow(
            f.client,
            f.options.target.clone(),
            Arc::clone(reloader),
            f.status,
            follow,
            f.revision,
            stop_rx.clone(),
        ));
        tokio::spawn(fleet.publish(f.options.progress, stop_rx.clone()));
        spawn_hup_ignored(stop_rx.clone());
    }
    let fast_exit = spawn_drain_signals(inst.drain().clone(), stop_rx);
    let mut opts = server_options(&cfg);
    let open_files = fit_descriptors(&mut opts);
    tracing::info!(
        listen = %listen,
        admin = %admin,
        admin_token = token.is_some(),
        tls = tls_on,
        table = %name,
        open_files,
        "shardgate serving"
    );
    let exit = tokio::select! {
        result = inst.run(listener, Some(admin_listener), opts) => result.map(|_| Exit::Stopped),
        exit = fast_exit => Ok(exit),
    };
    let _ = stop_tx.send(true);
    tracing::info!(?exit, "shardgate stopped");
    exit.map_err(ServeError::Io)
}

/// SIGHUP, where the table follows etcd: noted and ignored (its default
/// action would kill the process).
fn spawn_hup_ignored(mut stop: watch::Receiver<bool>) {
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hup) = signal(SignalKind::hangup()) else { return };
        loop {
            tokio::select! {
                _ = hup.recv() => tracing::info!("SIGHUP: the table follows etcd; nothing to reload"),
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    });
}

/// SIGTERM and SIGQUIT start the drain (a second one exits at once);
/// SIGINT resolves the returned future with [`Exit::Interrupted`]. The
/// handlers are in place when this returns.
fn spawn_drain_signals(drain: Drain, mut stop: watch::Receiver<bool>) -> impl Future<Output = Exit> {
    let (tx, rx) = tokio::sync::oneshot::channel::<Exit>();
    let mut signals = Signals::install(true, false);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                exit = signals.next() => if matches!(exit, Exit::Interrupted) {
                    let _ = tx.send(Exit::Interrupted);
                    return;
                },
                _ = stop.wait_for(|s| *s) => return,
            }
            if !start_drain(&drain) {
                tracing::warn!("second termination signal during the drain: exiting now");
                let _ = tx.send(Exit::Stopped);
                return;
            }
        }
    });
    async move {
        match rx.await {
            Ok(exit) => exit,
            // The signal task ended without a verdict (shutdown): never resolve.
            Err(_) => std::future::pending().await,
        }
    }
}

fn spawn_reload_triggers(reloader: &Arc<Reloader>, stop: watch::Receiver<bool>) {
    let r = Arc::clone(reloader);
    let mut stop_watch = stop.clone();
    tokio::spawn(reload::watch(r, async move {
        let _ = stop_watch.wait_for(|s| *s).await;
    }));
    #[cfg(unix)]
    {
        let r = Arc::clone(reloader);
        let mut stop = stop;
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut hup) = signal(SignalKind::hangup()) else {
                tracing::warn!("cannot install the SIGHUP handler; reload with the file watcher instead");
                return;
            };
            loop {
                tokio::select! {
                    _ = hup.recv() => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
                // Off the runtime's workers: a reload reads the file,
                // compiles the table and syncs the audit trail, and requests
                // must not wait on that. The next signal is read once it ends.
                let r = Arc::clone(&r);
                let _ = tokio::task::spawn_blocking(move || r.reload_now(&reload::Provenance::by("SIGHUP"))).await;
            }
        });
    }
}

/// The termination signals, with their handlers registered when this is
/// made: a signal that arrives before anyone waits (right after the
/// listener answers, say) is kept, not lost to the default action, which
/// would kill the process with the wrong exit status.
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    quit: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    /// SIGHUP, where there is no table file to reload: noted and ignored
    /// (its default action would kill the process).
    #[cfg(unix)]
    hup: Option<tokio::signal::unix::Signal>,
    /// SIGUSR1: the access-log file is reopened (after logrotate renamed it).
    #[cfg(unix)]
    usr1: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// SIGTERM and SIGINT, SIGQUIT when `with_quit` (it counts as SIGTERM),
    /// and SIGHUP, ignored, when `ignore_hup` (a process with nothing to reload).
    fn install(with_quit: bool, ignore_hup: bool) -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let term = signal(SignalKind::terminate()).ok();
            let quit = if with_quit { signal(SignalKind::quit()).ok() } else { None };
            let int = signal(SignalKind::interrupt()).ok();
            let hup = if ignore_hup { signal(SignalKind::hangup()).ok() } else { None };
            let usr1 = signal(SignalKind::user_defined1()).ok();
            if term.is_none() || int.is_none() {
                tracing::warn!("cannot install the SIGTERM/SIGINT handlers; Ctrl-C and POST /drain still work");
            }
            Signals { term, quit, int, hup, usr1 }
        }
        #[cfg(not(unix))]
        {
            let _ = (with_quit, ignore_hup);
            Signals {}
        }
    }

    /// The next signal: [`Exit::Stopped`] for SIGTERM (or SIGQUIT),
    /// [`Exit::Interrupted`] for SIGINT.
    async fn next(&mut self) -> Exit {
        #[cfg(unix)]
        {
            /// The signal's next delivery, or `otherwise` without a handler.
            async fn on(s: &mut Option<tokio::signal::unix::Signal>, otherwise: impl Future<Output = ()>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => otherwise.await,
                }
            }
            loop {
                tokio::select! {
                    _ = on(&mut self.term, std::future::pending()) => return Exit::Stopped,
                    _ = on(&mut self.quit, std::future::pending()) => return Exit::Stopped,
                    // Without its own handler, SIGINT is still Ctrl-C.
                    _ = on(&mut self.int, async { let _ = tokio::signal::ctrl_c().await; }) => return Exit::Interrupted,
                    _ = on(&mut self.hup, std::future::pending()) => {
                        tracing::info!("SIGHUP: there is no table file to reload here; ignored");
                    }
                    _ = on(&mut self.usr1, std::future::pending()) => {
                        // On a blocking thread: the file's lock may wait on a stalled write.
                        drop(tokio::task::spawn_blocking(|| ACCESS_FILE.reopen()));
                    }
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Exit::Interrupted
        }
    }
}

/// Runs `serve` until a termination signal, which stops it gracefully
/// (in-flight requests finish); returns which signal it was.
pub async fn until_signal<F, E>(
    serve: impl FnOnce(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> F,
) -> Result<Exit, E>
where
    F: Future<Output = Result<(), E>>,
{
    let (exit_tx, exit_rx) = tokio::sync::oneshot::channel();
    let mut signals = Signals::install(false, true);
    let stop = Box::pin(async move {
        let _ = exit_tx.send(signals.next().await);
    });
    serve(stop).await?;
    Ok(exit_rx.await.unwrap_or(Exit::Stopped))
}
