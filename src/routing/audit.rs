//! The audit trail: every table applied, rejected or deferred, appended to a
//! hash-chained JSON-lines file.
//!
//! Each line is one JSON object with its keys in sorted order:
//!
//! | key | value |
//! |---|---|
//! | `seq` | 1 for the first line, +1 per line |
//! | `at` | when, RFC 3339 UTC |
//! | `event` | `applied`, `rejected` (restart-only keys left at their running values are an applied table's `deferred`) |
//! | `source` | the table file or the etcd key |
//! | `revision` | the etcd revision (absent for files) |
//! | `sha256` | the digest of the table's text |
//! | `version` | the version it was published as (applied) |
//! | `who` | what made the change: `file watch`, `SIGHUP`, `POST /reload`, `POST /reload (admin token)`, `etcd` |
//! | `moves` | the placement units whose owner changed, as `plan` lists them |
//! | `phases` | the table's re-homing moves (`moves:`), each with its phase and epoch |
//! | `deferred` | restart-only keys that changed and keep their running values |
//! | `errors` | the located problems of a rejected table |
//! | `prev` | the `hash` of the line before (64 zeros for the first) |
//! | `hash` | SHA-256 of `prev`, a newline and the line without `hash` |
//!
//! A line must be exactly its canonical form (compact JSON, keys sorted,
//! as written here), so a line changed, removed or inserted breaks the
//! chain at that line, and [`verify`] (`shardgate audit verify FILE`) finds
//! it. Lines cut from the end leave a shorter chain that holds: each
//! append's `seq` and `hash` also go to the log, and `verify --head HASH`
//! checks the trail ends where the log says it did. An instance that opens
//! an existing trail goes on from its last line; a trail that cannot be
//! read to its end, or whose last line does not parse, is refused at start.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::{json, Map, Value};

use super::shared::sha256_hex;

/// The `prev` of the first line.
const ORIGIN: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// An open audit trail.
#[derive(Debug)]
pub struct Audit {
    path: PathBuf,
    tail: Mutex<Tail>,
}

#[derive(Debug)]
struct Tail {
    file: File,
    seq: u64,
    prev: String,
}

/// The hash a line carries: over the previous line's hash and this line
/// without its own.
fn chain(prev: &str, record: &Map<String, Value>) -> String {
    let body = Value::Object(record.clone()).to_string();
    sha256_hex(&format!("{prev}\n{body}"))
}

impl Audit {
    /// Opens (or creates) the trail at `path`, going on from its last line.
    pub fn open(path: &Path) -> Result<Audit, String> {
        let (mut seq, mut prev) = (0, ORIGIN.to_string());
        if let Ok(file) = File::open(path) {
            let mut last = None;
            for line in BufReader::new(file).lines() {
                let line =
                    line.map_err(|e| format!("audit trail {}: cannot be read to its end ({e})", path.display()))?;
                if !line.trim().is_empty() {
                    last = Some(line);
                }
            }
            if let Some(line) = last {
                let v: Value = serde_json::from_str(&line)
                    .map_err(|e| format!("audit trail {}: its last line is not JSON ({e})", path.display()))?;
                match (v["seq"].as_u64(), v["hash"].as_str()) {
                    (Some(s), Some(h)) => (seq, prev) = (s, h.to_string()),
                    _ => return Err(format!("audit trail {}: its last line has no seq and hash", path.display())),
                }
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("audit trail {}: {e}", path.display()))?;
        Ok(Audit { path: path.to_path_buf(), tail: Mutex::new(Tail { file, seq, prev }) })
    }

    /// Where it is written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `record` (its `seq`, `at`, `prev` and `hash` are added here).
    pub fn append(&self, record: Value) -> io::Result<()> {
        let Value::Object(mut record) = record else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "an audit record is a JSON object"));
        };
        let mut tail = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        let seq = tail.seq + 1;
        record.insert("seq".into(), json!(seq));
        record.insert("at".into(), json!(now_rfc3339()));
        record.insert("prev".into(), json!(tail.prev));
        let hash = chain(&tail.prev, &record);
        record.insert("hash".into(), json!(hash));
        let mut line = Value::Object(record).to_string();
        line.push('\n');
        tail.file.write_all(line.as_bytes())?;
        tail.file.sync_data()?;
        tracing::info!(audit = %self.path.display(), seq, hash = %hash, "audit trail appended");
        tail.seq = seq;
        tail.prev = hash;
        Ok(())
    }
}

fn now_rfc3339() -> String {
    super::shared::iso_time(SystemTime::now(), 3).unwrap_or_default()
}

/// Why a trail does not verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// The first line (1-based) that breaks the chain.
    pub line: usize,
    /// How.
    pub reason: String,
}

/// Checks the whole chain of the trail in `reader`: the number of lines and
/// the last one's hash, or the first line that breaks it.
pub fn verify(reader: impl BufRead) -> Result<(usize, String), Broken> {
    let mut prev = ORIGIN.to_string();
    let mut count = 0;
    for (i, line) in reader.lines().enumerate() {
        let line_no = i + 1;
        let broken = |reason: String| Broken { line: line_no, reason };
        let line = line.map_err(|e| broken(format!("cannot read: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed = serde_json::from_str::<Value>(&line).map_err(|e| broken(format!("not JSON: {e}")))?;
        let canonical = serde_json::to_string(&parsed).map_err(|e| broken(e.to_string()))?;
        if canonical != line {
            return Err(broken("not in its canonical form (keys sorted, compact, no duplicates)".into()));
        }
        let Value::Object(mut record) = parsed else {
            return Err(broken("not a JSON object".into()));
        };
        let Some(Value::String(hash)) = record.remove("hash") else {
            return Err(broken("no hash".into()));
        };
        if record.get("prev").and_then(Value::as_str) != Some(prev.as_str()) {
            return Err(broken("its prev is not the hash of the line before (a line removed or inserted)".into()));
        }
        if record.get("seq").and_then(Value::as_u64) != Some(count as u64 + 1) {
            return Err(broken(format!("its seq is not {}", count + 1)));
        }
        if chain(&prev, &record) != hash {
            return Err(broken("its hash does not match its content (the line was changed)".into()));
        }
        prev = hash;
        count += 1;
    }
    Ok((count, prev))
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn trail(dir: &Path) -> Result<PathBuf, String> {
        let path = dir.join("audit.jsonl");
        let audit = Audit::open(&path)?;
        for i in 0..3 {
            audit
                .append(json!({ "event": "applied", "version": i + 2, "who": "file watch" }))
                .map_err(|e| e.to_string())?;
        }
        Ok(path)
    }

    #[test]
    fn a_trail_verifies_and_goes_on_after_a_restart() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = trail(dir.path())?;
        assert_eq!(verify(BufReader::new(File::open(&path)?)).map(|v| v.0), Ok(3));
        Audit::open(&path)?.append(json!({ "event": "rejected", "errors": ["t.yaml:3:1: bad"] }))?;
        assert_eq!(verify(BufReader::new(File::open(&path)?)).map(|v| v.0), Ok(4));
        Ok(())
    }

    #[test]
    fn one_byte_changed_removed_or_reordered_breaks_it() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = trail(dir.path())?;
        let text = std::fs::read_to_string(&path)?;
        let changed = text.replacen("\"version\":3", "\"version\":4", 1);
        assert_eq!(verify(changed.as_bytes()).map_err(|b| b.line), Err(2));
        let lines: Vec<&str> = text.lines().collect();
        let removed = format!("{}\n{}\n", lines[0], lines[2]);
        assert_eq!(verify(removed.as_bytes()).map_err(|b| b.line), Err(2));
        // The same record written another way (a key repeated, spaces) is not the line.
        let first = lines[0].replacen("{", "{\"who\":\"alice\",", 1);
        let dup = format!("{first}\n{}\n{}\n", lines[1], lines[2]);
        assert_eq!(verify(dup.as_bytes()).map_err(|b| b.line), Err(1));
        let spaced = text.replacen(",", ", ", 1);
        assert_eq!(verify(spaced.as_bytes()).map_err(|b| b.line), Err(1));
        // Every single byte: any change breaks the chain.
        for i in 0..text.len() {
            let mut bytes = text.clone().into_bytes();
            if bytes[i] == b'\n' {
                continue;
            }
            bytes[i] ^= 0x01;
            assert!(verify(&bytes[..]).is_err(), "byte {i} changed and the trail still verifies");
        }
        Ok(())
    }

    #[test]
    fn a_trail_whose_last_line_is_torn_is_refused() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = trail(dir.path())?;
        std::fs::write(&path, std::fs::read_to_string(&path)? + "{\"seq\":4,")?;
        assert!(Audit::open(&path).is_err());
        Ok(())
    }
}
