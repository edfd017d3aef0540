//! `shardgate plan NEW [--running FILE | --admin URL] [--region R] [--json]`:
//! what a new table moves, against a table file or a running instance (its
//! table and the traffic each placement unit carried over the last
//! minutes). Both tables load as the instance runs them: in the region
//! `--region` names, else, with `--admin`, the one the instance serves.
//!
//! Exit 0 when nothing moves, 1 when something does or the new table gives
//! up a re-homed unit's fence (a CI gate can ask for a review), 78 when
//! either table is invalid, 69 when the instance cannot be asked, 2 for a
//! usage error.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use http::{Method, StatusCode, Uri};

use super::exit;
use crate::config::instance::InstanceFlags;
use crate::routing::plan::{Plan, Window};
use crate::routing::Table;
use crate::upstream::{connector, ClientSettings};

/// `plan`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The new routing table (YAML).
    pub new: PathBuf,
    /// The running table, as a file (no traffic is known then).
    #[arg(long, conflicts_with = "admin")]
    pub running: Option<PathBuf>,
    /// A running instance's admin listener (e.g. http://127.0.0.1:9901): its
    /// table and traffic. The token, if it needs one, from SHARDGATE_ADMIN_TOKEN.
    #[arg(long)]
    pub admin: Option<String>,
    /// Load both tables as an instance serving this region runs them
    /// (`serve --region`); with `--admin`, the instance's region by default.
    #[arg(long)]
    pub region: Option<String>,
    /// JSON for tools instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `plan`; returns the exit code.
pub fn run(args: &PlanArgs, out: &mut impl Write, err: &mut impl Write) -> i32 {
    let given = InstanceFlags::in_region(args.region.clone());
    let (running, window, flags) = match (&args.running, &args.admin) {
        (Some(path), _) => match given.load_file(path) {
            Ok((cfg, _)) => (Table::compile(&cfg), None, given),
            Err(e) => {
                let _ = writeln!(err, "{e}\n{}: the running table is invalid", path.display());
                return exit::CONFIG;
            }
        },
        (None, Some(url)) => match from_admin(url, args.region.as_deref()) {
            Ok(Ok(running)) => running,
            Ok(Err(e)) => {
                let _ = writeln!(err, "{e}\n{url}: the running table does not load here");
                return exit::CONFIG;
            }
            Err(e) => {
                let _ = writeln!(err, "shardgate plan: {url}: {e}");
                return exit::UNAVAILABLE;
            }
        },
        (None, None) => {
            let _ = writeln!(err, "shardgate plan: give the running table: --running FILE or --admin URL");
            return exit::USAGE;
        }
    };
    let next = match flags.load_file(&args.new) {
        Ok((cfg, _)) => Table::compile(&cfg),
        Err(e) => {
            let _ = writeln!(err, "{e}\n{}: the new table is invalid", args.new.display());
            return exit::CONFIG;
        }
    };
    let plan = Plan::between(&running, &next, window.as_ref());
    if args.json {
        let _ = writeln!(out, "{}", serde_json::to_string_pretty(&plan).unwrap_or_default());
    } else {
        let _ = write!(out, "{plan}");
    }
    if plan.is_empty() {
        exit::OK
    } else {
        exit::FAILURE
    }
}

/// What `plan` learns of a running instance: its table, the traffic each
/// unit carried, and the flags both tables load with (its region).
type Running = (Table, Option<Window>, InstanceFlags);

/// The running table, its traffic window and the flags to load tables
/// with (`region`, else the one the instance serves) from an admin
/// listener: an error reaching it, or the table's own errors.
fn from_admin(url: &str, region: Option<&str>) -> Result<Result<Running, crate::config::ConfigErrors>, String> {
    let base = url.trim_end_matches('/');
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let token = crate::admin::token_from_env();
    let auth = token.map(|t| format!("Bearer {t}"));
    let get = |path: &str| -> Result<serde_json::Value, String> {
        let uri: Uri = format!("{base}{path}").parse().map_err(|e| format!("not a URL: {e}"))?;
        let settings = ClientSettings {
            connect_timeout: Duration::from_secs(5),
            pool_idle_timeout: Duration::from_secs(5),
            tls: None,
        };
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
        let (status, body) = rt.block_on(crate::upstream::client::fetch(
            &connector(&settings),
            Method::GET,
            &uri,
            &headers,
            bytes::Bytes::new(),
            Duration::from_secs(10),
        ))?;
        if status == StatusCode::UNAUTHORIZED {
            let hint = if auth.is_some() { "it refused SHARDGATE_ADMIN_TOKEN's" } else { "set SHARDGATE_ADMIN_TOKEN" };
            return Err(format!("GET {path}: {status}: the admin listener wants its token ({hint})"));
        }
        if status != StatusCode::OK {
            return Err(format!("GET {path}: {status}: {}", String::from_utf8_lossy(&body)));
        }
        serde_json::from_slice(&body).map_err(|e| format!("GET {path}: not JSON: {e}"))
    };
    let config = get("/config")?;
    let text = config["source"].as_str().ok_or("GET /config: no source text")?;
    let region = region.or(config["region"].as_str()).map(str::to_owned);
    let window = get("/placement").ok().and_then(|w| serde_json::from_value::<Window>(w).ok());
    let flags = InstanceFlags::in_region(region);
    Ok(flags.load(text, &format!("{base}/config")).map(|cfg| (Table::compile(&cfg), window, flags)))
}
