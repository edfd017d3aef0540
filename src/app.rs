//! Assembly: load the table, publish it, start the reload triggers, bind the
//! listener and serve until a signal. Also the in-process `demo`.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cli::{EXIT_CONFIG, EXIT_FAILURE, EXIT_OK};
use crate::config::{self, Config};
use crate::proxy::forward::ClientSettings;
use crate::proxy::server::{self, ServerOptions};
use crate::proxy::Proxy;
use crate::routing::reload::{self, Reloader};
use crate::routing::shared::SharedTable;
use crate::routing::Table;

/// Options of the proxy that are fixed at start-up.
pub fn server_options(cfg: &Config) -> ServerOptions {
    ServerOptions {
        header_read_timeout: cfg.server.header_read_timeout.0,
        max_header_bytes: cfg.server.max_header_bytes,
        max_headers: cfg.server.max_headers,
        shutdown_timeout: Duration::from_secs(30),
    }
}

/// Client settings that are fixed at start-up.
pub fn client_settings(cfg: &Config) -> ClientSettings {
    ClientSettings {
        connect_timeout: cfg.upstream.connect_timeout.0,
        pool_idle_timeout: cfg.upstream.pool_idle_timeout.0,
    }
}

/// The name this instance uses in `Via`, `Proxy-Status` and `Forwarded: by=`.
pub fn instance_name(cfg: &Config) -> String {
    match (&cfg.instance, &cfg.region) {
        (Some(name), _) => name.clone(),
        (None, Some(region)) => format!("shardgate-{region}"),
        (None, None) => "shardgate".to_string(),
    }
}

/// Publishes a validated table and builds the proxy that reads it.
pub fn build_proxy(cfg: &Config, text: &str) -> (Arc<SharedTable>, Arc<Proxy>) {
    let shared = Arc::new(SharedTable::new(Table::compile(cfg), text));
    let proxy = Arc::new(Proxy::new(Arc::clone(&shared), client_settings(cfg), &instance_name(cfg)));
    (shared, proxy)
}

/// A running proxy built from a validated table: publish it and serve on
/// `listener` until `shutdown`. Used by `demo` and the tests.
pub async fn run_proxy(
    cfg: &Config,
    text: &str,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<Arc<SharedTable>> {
    let (shared, proxy) = build_proxy(cfg, text);
    server::serve(listener, proxy, server_options(cfg), shutdown).await?;
    Ok(shared)
}

/// `shardgate serve -c FILE`: returns the process exit code.
pub async fn serve(path: PathBuf) -> i32 {
    let (cfg, text) = match config::load_file(&path) {
        Ok(pair) => pair,
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("shardgate: {} problem(s) in {}; not starting", errors.len(), path.display());
            return EXIT_CONFIG;
        }
    };
    let listener = match TcpListener::bind(cfg.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("shardgate: cannot listen on {}: {e}", cfg.listen);
            return EXIT_FAILURE;
        }
    };
    let (shared, proxy) = build_proxy(&cfg, &text);
    let reloader = Arc::new(Reloader::new(path.clone(), Arc::clone(&shared)));
    let (stop_tx, stop_rx) = watch::channel(false);
    spawn_reload_triggers(&reloader, stop_rx.clone());
    tracing::info!(listen = %cfg.listen, table = %path.display(), "shardgate serving");
    let shutdown = async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    };
    match server::serve(listener, proxy, server_options(&cfg), shutdown).await {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("shardgate: {e}");
            EXIT_FAILURE
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
                    _ = hup.recv() => {
                        let _ = r.reload_now();
                    }
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        });
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The demo table, embedded in the binary.
pub const DEMO_TABLE: &str = include_str!("../config/demo.yaml");

/// `shardgate demo`: three in-process regional backends, the embedded demo
/// table pointed at them, the proxy on `listen`, and ready-to-paste curl
/// commands. Runs until Ctrl-C.
pub async fn demo(listen: SocketAddr) -> i32 {
    let mut text = DEMO_TABLE.to_string();
    let mut backends = Vec::new();
    let (stop_tx, stop_rx) = watch::channel(false);
    for (region, placeholder) in [("eu", "127.0.0.1:18081"), ("kz", "127.0.0.1:18082"), ("us", "127.0.0.1:18083")] {
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("shardgate: cannot start the {region} demo backend: {e}");
                return EXIT_FAILURE;
            }
        };
        let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
        text = text.replace(placeholder, &addr);
        let mut stop = stop_rx.clone();
        tokio::spawn(crate::backend::serve(listener, region.to_string(), async move {
            let _ = stop.wait_for(|s| *s).await;
        }));
        backends.push((region, addr));
    }
    let cfg = match config::load_str(&text, "demo.yaml") {
        Ok(cfg) => cfg,
        Err(errors) => {
            eprintln!("shardgate: the embedded demo table is invalid (a bug):\n{errors}");
            return EXIT_FAILURE;
        }
    };
    let listener = match TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("shardgate: cannot listen on {listen}: {e} (choose another address with --listen)");
            return EXIT_FAILURE;
        }
    };
    let table = Table::compile(&cfg);
    println!("shardgate demo: proxy on http://{listen}");
    for (region, addr) in &backends {
        println!("  backend {region:<3} on http://{addr}");
    }
    println!();
    for line in crate::demo::curl_examples(&table, &cfg, listen) {
        println!("{line}");
    }
    println!();
    println!("Press Ctrl-C to stop.");
    let result = run_proxy(&cfg, &text, listener, async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = stop_tx.send(true);
    })
    .await;
    match result {
        Ok(_) => EXIT_OK,
        Err(e) => {
            eprintln!("shardgate: {e}");
            EXIT_FAILURE
        }
    }
}
