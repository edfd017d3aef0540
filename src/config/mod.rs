//! The routing table file: schema, loading, validation, and the typed
//! [`Config`] the table compiler consumes.
//!
//! Loading is one pipeline with no shortcuts:
//!
//! 1. [`yaml`] walks the YAML events once: it caps size, nesting and alias
//!    expansion, records the line and column of every node under its YAML
//!    path, reports every duplicate key and every key the [`schema`] does not
//!    have, and builds a [`yaml_serde::Value`] tree;
//! 2. [`assemble`] deserializes each section, and each item of a map or list
//!    section, on its own into the [`schema`] structs ([`File`]), so one bad
//!    item does not hide the others;
//! 3. [`validate`] checks what types cannot (references, ranges, coverage,
//!    route conflicts, failover cycles) and builds the typed [`Config`]:
//!    names resolved, formats, methods and strategies typed.
//!
//! Every problem found by any step is collected ([`report`]) into
//! [`ConfigErrors`], each with its YAML path, 1-based line and column and a
//! fix hint. A file with any problem never produces a [`Config`].
//!
//! Beside the pipeline: [`keys`] (the walker's key lists, taken from the
//! schema's types), [`values`] (values with a syntax of their own),
//! [`duration`], [`template`] (the one entry to the route matcher), [`fields`]
//! (header rule values) and
//! [`restart`] (the keys a reload cannot change).

pub mod assemble;
pub mod duration;
pub mod env;
pub mod fields;
pub mod instance;
pub mod keys;
pub mod model;
pub mod report;
pub mod restart;
pub mod schema;
pub mod settings;
pub mod template;
pub mod tls;
pub mod unit;
pub mod validate;
pub mod values;
pub mod yaml;

use std::fmt;
use std::path::Path;

use instance::InstanceFlags;

pub use model::Config;
pub use schema::File;

/// One problem in a routing table file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// YAML path of the offending node, e.g. `regions.kz.failover` or
    /// `routes[2].id.formats[1]`; empty for the document itself.
    pub path: String,
    /// 1-based line of the offending node (or key); 0 for a problem that
    /// is not in the text (an unreadable file, a flag naming what the
    /// table lacks).
    pub line: usize,
    /// 1-based column of the offending node (or key); 0 with `line`.
    pub col: usize,
    /// Lowercase, specific description naming the offending value.
    pub message: String,
    /// A one-line suggestion for fixing it.
    pub hint: Option<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            f.write_str(&self.message)?;
        } else {
            let path = if self.path.is_empty() { "(document)" } else { &self.path };
            write!(f, "{}:{}: {}: {}", self.line, self.col, path, self.message)?;
        }
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

/// Every problem found in one file, in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The name the file was loaded under (shown at the start of each line).
    pub source_name: String,
    /// The problems, sorted by line and column.
    pub errors: Vec<ConfigError>,
}

impl ConfigErrors {
    /// A single error that is not in the text (e.g. an unreadable file),
    /// shown as `source: message`.
    pub fn single(source_name: &str, message: String, hint: Option<String>) -> Self {
        ConfigErrors {
            source_name: source_name.to_owned(),
            errors: vec![ConfigError { path: String::new(), line: 0, col: 0, message, hint }],
        }
    }

    /// Number of problems.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// Whether there are none (never true for a returned error).
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// Every problem as one line, `source:line:col: path: message (hint: ...)`
    /// (`source: message` for one not in the text).
    pub fn located(&self) -> Vec<String> {
        self.errors.iter().map(|e| Located(&self.source_name, e).to_string()).collect()
    }

    /// Whether some error has exactly this path.
    pub fn has_path(&self, path: &str) -> bool {
        self.errors.iter().any(|e| e.path == path)
    }
}

impl fmt::Display for ConfigErrors {
    /// One line per problem: `file:line:col: path: message (hint: ...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            Located(&self.source_name, e).fmt(f)?;
        }
        Ok(())
    }
}

/// One problem after the name of its source: `source:line:col: ...`, or
/// `source: message` for one not in the text.
struct Located<'a>(&'a str, &'a ConfigError);

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sep = if self.1.line == 0 { ": " } else { ":" };
        write!(f, "{}{sep}{}", self.0, self.1)
    }
}

impl std::error::Error for ConfigErrors {}

/// Parses and validates a routing table from text.
///
/// `source_name` is only used in error messages (usually the file path).
pub fn load_str(text: &str, source_name: &str) -> Result<Config, ConfigErrors> {
    load(text, source_name, &InstanceFlags::default()).map(|(config, _)| config)
}

/// A valid routing table as written, with every default filled in (for
/// `check --print` and the dashboard), the instance's `flags` put over it
/// and its name resolved.
pub fn as_written(text: &str, source_name: &str, flags: &InstanceFlags) -> Result<File, ConfigErrors> {
    let (config, mut file) = load(text, source_name, flags)?;
    file.instance = Some(config.settings.restart.instance);
    Ok(file)
}

/// The pipeline: expand, walk, assemble, put the instance's `flags` over
/// it, validate; the typed table and the file as written (with the flags).
fn load(text: &str, source_name: &str, flags: &InstanceFlags) -> Result<(Config, File), ConfigErrors> {
    let expanded = env::expand(text, |name| std::env::var(name).ok()).map_err(|e| finish(source_name, e))?;
    let text = expanded.text.as_ref();
    let walked = yaml::walk(text, keys::shape()).map_err(|errors| finish(source_name, errors))?;
    let mut ctx = report::Ctx::new(&walked.index);
    ctx.errors.extend(walked.errors);
    let mut file = assemble::from_value(&walked.root, &mut ctx);
    // A flag's error first, unless the table has its own (a region the
    // flag names may be one that failed to parse).
    if let Err(flag) = flags.put_over(&mut file, source_name) {
        if ctx.errors.is_empty() {
            return Err(flag);
        }
    }
    let mut config = validate::validate(&file, &mut ctx);
    config.variables = expanded.read;
    if ctx.errors.is_empty() {
        Ok((config, file))
    } else {
        Err(finish(source_name, ctx.errors))
    }
}

/// Reads, parses and validates a routing table file; also returns its text
/// (for hashing and `/config`).
pub fn load_file(path: &Path) -> Result<(Config, String), ConfigErrors> {
    InstanceFlags::default().load_file(path)
}

/// Reads a config file with the size cap applied before reading it whole.
pub(crate) fn read_text(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open config file {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(yaml::MAX_INPUT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
    if bytes.len() > yaml::MAX_INPUT_BYTES {
        return Err(format!("config file {} is larger than {} bytes", path.display(), yaml::MAX_INPUT_BYTES));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!("config file {} is not valid utf-8 (at byte {})", path.display(), e.utf8_error().valid_up_to())
    })
}

fn finish(source_name: &str, mut errors: Vec<ConfigError>) -> ConfigErrors {
    errors.sort_by_key(|e| (e.line, e.col));
    errors.dedup();
    ConfigErrors { source_name: source_name.to_owned(), errors }
}

/// Shortens and escapes a user value for an error message, in double
/// quotes as YAML would write it. Same escaping as the proxy's
/// [`crate::problem::quote`] (which uses single quotes because its
/// messages travel inside JSON strings).
pub(crate) fn show(value: &str) -> String {
    format!("\"{}\"", crate::ids::escape_for_display(value, 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_tables_are_valid() -> Result<(), ConfigErrors> {
        let example = load_str(include_str!("../../config/example.yaml"), "example.yaml")?;
        assert_eq!(example.routes.len(), 8);
        let demo = load_str(include_str!("../../config/demo.yaml"), "demo.yaml")?;
        assert_eq!(demo.regions.len(), 3);
        Ok(())
    }

    #[test]
    fn errors_display_one_per_line() {
        let errs = load_str("version: 2\nregions: {}\nbogus: 1\n", "t.yaml")
            .err()
            .unwrap_or_else(|| ConfigErrors::single("t.yaml", "accepted a bad table".into(), None));
        let text = errs.to_string();
        assert!(text.lines().all(|l| l.starts_with("t.yaml:")), "{text}");
        assert!(text.contains("t.yaml:1:10: version: unsupported version 2 (hint: "), "{text}");
        assert!(text.contains("t.yaml:3:1: bogus: unknown key \"bogus\""), "{text}");
    }
}
