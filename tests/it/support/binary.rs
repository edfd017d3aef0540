//! The `shardgate` binary as a child process: a table file on free ports,
//! started, waited for, signalled, killed when dropped.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{get, table, BoxError};

/// Two free loopback ports (bound, then released).
pub fn free_ports() -> Result<(u16, u16), BoxError> {
    let a = std::net::TcpListener::bind("127.0.0.1:0")?;
    let b = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok((a.local_addr()?.port(), b.local_addr()?.port()))
}

pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Child {
    pub fn signal(&self, sig: &str) -> Result<(), BoxError> {
        let status = std::process::Command::new("kill").args([sig, &self.0.id().to_string()]).status()?;
        if !status.success() {
            return Err(format!("kill {sig} failed").into());
        }
        Ok(())
    }

    pub async fn wait_exit(&mut self, within: Duration) -> Result<i32, BoxError> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.0.try_wait()? {
                return status.code().ok_or_else(|| "killed by a signal".into());
            }
            if Instant::now() > deadline {
                return Err(format!("did not exit within {within:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The real binary on a table file with fixed free ports; waits until `/ready`.
pub async fn spawn_binary(dir: &Path, kz: SocketAddr, extra: &str) -> Result<(Child, u16, u16), BoxError> {
    spawn_binary_logging(dir, kz, extra, None).await
}

/// [`spawn_binary`], with standard error (the logs, at info) written to `log`.
pub async fn spawn_binary_logging(
    dir: &Path,
    kz: SocketAddr,
    extra: &str,
    log: Option<&Path>,
) -> Result<(Child, u16, u16), BoxError> {
    spawn_binary_limited(dir, kz, extra, log, None).await
}

/// [`spawn_binary_logging`], with the open-file limit (soft and hard) set
/// to `open_files` first, when given (as `ulimit -n` would).
pub async fn spawn_binary_limited(
    dir: &Path,
    kz: SocketAddr,
    extra: &str,
    log: Option<&Path>,
    open_files: Option<u64>,
) -> Result<(Child, u16, u16), BoxError> {
    spawn_table(dir, &table(kz, kz, kz, extra), log, open_files).await
}

/// The real binary on `text` (a [`table`] with its listen and admin ports
/// replaced by free ones); waits until `/ready`.
pub async fn spawn_table(
    dir: &Path,
    text: &str,
    log: Option<&Path>,
    open_files: Option<u64>,
) -> Result<(Child, u16, u16), BoxError> {
    spawn_serving(dir, text, log, open_files, &[]).await
}

/// [`spawn_table`], `serve` given `flags` after the table.
pub async fn spawn_serving(
    dir: &Path,
    text: &str,
    log: Option<&Path>,
    open_files: Option<u64>,
    flags: &[&str],
) -> Result<(Child, u16, u16), BoxError> {
    let (level, stderr) = match log {
        Some(path) => ("info", std::process::Stdio::from(std::fs::File::create(path)?)),
        None => ("warn", std::process::Stdio::null()),
    };
    spawn_with(dir, text, (level, stderr), open_files, flags).await
}

/// [`spawn_serving`], logging at `level` to `stderr`.
pub async fn spawn_with(
    dir: &Path,
    text: &str,
    (level, stderr): (&str, std::process::Stdio),
    open_files: Option<u64>,
    flags: &[&str],
) -> Result<(Child, u16, u16), BoxError> {
    let (port, admin) = free_ports()?;
    let text = text
        .replace("listen: 127.0.0.1:18080", &format!("listen: 127.0.0.1:{port}"))
        .replace("admin: 127.0.0.1:19901", &format!("admin: 127.0.0.1:{admin}"));
    let file = dir.join("table.yaml");
    std::fs::write(&file, text)?;
    let binary = env!("CARGO_BIN_EXE_shardgate");
    let mut command = match open_files {
        Some(n) => {
            let mut c = std::process::Command::new("sh");
            c.args(["-c", &format!("ulimit -n {n} && exec \"$0\" serve -c \"$@\""), binary]).arg(&file);
            c
        }
        None => {
            let mut c = std::process::Command::new(binary);
            c.args(["serve", "-c"]).arg(&file);
            c
        }
    };
    command.args(flags);
    let child = command.env("RUST_LOG", level).stdout(std::process::Stdio::null()).stderr(stderr).spawn()?;
    let child = Child(child);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(r) = get(&format!("http://127.0.0.1:{admin}/ready")).await {
            if r.status == 200 {
                return Ok((child, port, admin));
            }
        }
        if Instant::now() > deadline {
            return Err("the binary did not become ready".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
