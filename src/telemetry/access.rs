//! The access log's file (`log.access_file`): one JSON object per request,
//! appended to a file instead of the standard-error log. The file is
//! reopened on SIGUSR1 (after logrotate renames it, the proxy writes to a
//! new one at the same path, as nginx does) and when a reload names
//! another path; without a path the access log stays on standard error.
//!
//! Lines reach the file from the log's queue, written by its own thread
//! ([`super`]), each whole in one `write`: readers never see half of one.
//! A line queued while the file changes goes to the file open when it is
//! written (the new one after SIGUSR1), or to standard error when the
//! file was turned off meanwhile. The file's lock is taken by that thread
//! and by the table's and signal's followers, on blocking threads, never
//! by a request.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tracing_subscriber::fmt::MakeWriter;

/// The file, when one is set. One per process, as the log is.
#[derive(Debug)]
pub struct AccessFile {
    /// Whether access lines go to the file (else to standard error).
    on: AtomicBool,
    /// The address of the path last followed: a request compares it with
    /// its table's, so following costs a load when nothing changed.
    followed: AtomicUsize,
    /// The version of the table last followed, set under `open`'s lock: a
    /// follow for an older table that takes the lock late changes nothing.
    version: AtomicU64,
    open: Mutex<Option<(Arc<Path>, File)>>,
}

/// The process's access-log file.
pub static ACCESS_FILE: AccessFile = AccessFile {
    on: AtomicBool::new(false),
    followed: AtomicUsize::new(0),
    version: AtomicU64::new(0),
    open: Mutex::new(None),
};

impl AccessFile {
    /// Whether access lines go to a file.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Writes to `path` from now on (`None`: standard error again), when it
    /// is not the one followed already. Called with the table in force, of
    /// `version` (0 at start): followers of two tables published in a row
    /// may take the lock in either order, and the later table's path wins.
    pub fn follow(&self, path: Option<&Arc<Path>>, version: u64) {
        let addr = path.map_or(0, |p| Arc::as_ptr(p).cast::<u8>() as usize);
        if self.followed.load(Ordering::Relaxed) == addr {
            return;
        }
        let Ok(mut open) = self.open.lock() else { return };
        if self.version.load(Ordering::Relaxed) > version {
            return;
        }
        self.version.store(version, Ordering::Relaxed);
        self.followed.store(addr, Ordering::Relaxed);
        match path {
            // The same path in a new table: the file open already stays,
            // under the new table's path (held, so its address stays its own).
            Some(p) if open.as_ref().is_some_and(|(q, _)| **q == **p) => {
                if let Some((q, _)) = open.as_mut() {
                    *q = Arc::clone(p);
                }
            }
            Some(p) => match append(p) {
                Ok(file) => {
                    *open = Some((Arc::clone(p), file));
                    self.on.store(true, Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::warn!(path = %p.display(), error = %e, "cannot open the access log file; it stays where it was")
                }
            },
            None => {
                *open = None;
                self.on.store(false, Ordering::Relaxed);
            }
        }
    }

    /// Opens the file's path again (SIGUSR1): after a rename the lines go
    /// to a new file at the path.
    pub fn reopen(&self) {
        let Ok(mut open) = self.open.lock() else { return };
        let Some((path, file)) = open.as_mut() else { return };
        match append(path) {
            Ok(new) => {
                *file = new;
                tracing::info!(path = %path.display(), "access log reopened");
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot reopen the access log; writing on to the old file")
            }
        }
    }
}

fn append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// A line's writer: the formatter hands it the whole line at once.
#[derive(Debug)]
pub struct LineWriter(&'static AccessFile);

impl Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let Ok(mut open) = self.0.open.lock() else { return Ok(buf.len()) };
        match open.as_mut() {
            Some((_, file)) => file.write_all(buf).map(|()| buf.len()),
            None => io::stderr().write_all(buf).map(|()| buf.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for &'static AccessFile {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> LineWriter {
        LineWriter(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follow_for_an_older_table_that_comes_late_changes_nothing() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = AccessFile {
            on: AtomicBool::new(false),
            followed: AtomicUsize::new(0),
            version: AtomicU64::new(0),
            open: Mutex::new(None),
        };
        let (a, b): (Arc<Path>, Arc<Path>) = (dir.path().join("a.log").into(), dir.path().join("b.log").into());
        // Tables 2 (a) and 3 (b) published in a row; 3's follower takes the lock first.
        file.follow(Some(&b), 3);
        file.follow(Some(&a), 2);
        LineWriter(Box::leak(Box::new(file))).write_all(b"line\n")?;
        assert_eq!(std::fs::read_to_string(&*b)?, "line\n");
        assert!(!a.exists(), "the older table's file was opened");
        Ok(())
    }
}
