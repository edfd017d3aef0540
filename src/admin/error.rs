//! The failures the admin listener answers itself, and their rows of the
//! table ([`crate::problem`] builds the answers).

use std::fmt;

use http::{header, HeaderMap, HeaderValue, StatusCode as S};
use serde_json::{Map, Value};

use crate::config::ConfigErrors;
use crate::ids::escape_for_display;
use crate::problem::{quote, row, Outcome, Problem, Spec, DEST, METHOD_NOT_ALLOWED, REQ};

/// A failure of an admin request.
#[derive(Debug)]
pub enum AdminError {
    /// No endpoint at this path.
    NoEndpoint {
        /// The path asked for.
        path: String,
    },
    /// An endpoint asked for without the bearer token.
    Unauthorized {
        /// Whether the endpoint takes HTTP Basic too (reads, for a browser).
        basic: bool,
    },
    /// Refused without a token: a cross-site request that would change
    /// something, or a `Host` that is not the listener's own (DNS rebinding).
    Forbidden {
        /// Why.
        detail: &'static str,
    },
    /// An endpoint asked for with a method it does not take.
    MethodNotAllowed {
        /// The endpoint's path.
        path: String,
        /// The method used.
        method: String,
        /// What it takes (`Allow`).
        allow: &'static str,
    },
    /// `/explain` without an id.
    ExplainWithoutId,
    /// `/explain` for a route the table does not have.
    UnknownRoute {
        /// The route name asked for.
        name: String,
    },
    /// `POST /reload` on an instance not started from a file.
    NoTableFile,
    /// `POST /reload` of a file with problems (the running table stays).
    InvalidTable {
        /// Every problem, in file order.
        errors: ConfigErrors,
    },
    /// `POST /reload` of a file that changes what only a restart can, in a
    /// way the running instance cannot keep.
    NeedsRestart {
        /// What.
        detail: String,
    },
    /// `POST /reload` with a query it does not take (only `dry_run`, as
    /// `dry_run`, `=1`, `=true`, `=0` or `=false`): applying the file when
    /// a dry run was meant would be the worst reading of a typo.
    BadQuery {
        /// What was not understood.
        detail: String,
    },
    /// `POST /reload?dry_run` with a table over the size it reads.
    TableTooLarge {
        /// The most bytes read.
        max: usize,
    },
    /// `POST /reload?dry_run` whose table could not be read, or is not text.
    BadTableBody {
        /// Why.
        detail: &'static str,
    },
    /// `POST /reload` failed to run.
    ReloadFailed {
        /// Why.
        detail: String,
    },
}

const NO_ENDPOINT: Spec = row(S::NOT_FOUND, "not_found", DEST, "Not Found", "admin-not-found", Outcome::NoRoute);
const UNAUTHORIZED: Spec =
    row(S::UNAUTHORIZED, "unauthorized", REQ, "Unauthorized", "admin-unauthorized", Outcome::BadRequest);
const FORBIDDEN: Spec = row(S::FORBIDDEN, "forbidden", REQ, "Forbidden", "admin-forbidden", Outcome::BadRequest);
const NO_ID: Spec = row(S::BAD_REQUEST, "missing_id", REQ, "Bad Request", "admin-missing-id", Outcome::BadId);
const UNKNOWN_ROUTE: Spec =
    row(S::NOT_FOUND, "unknown_route", DEST, "Not Found", "admin-unknown-route", Outcome::NoRoute);
const NO_FILE: Spec = row(S::CONFLICT, "no_file", REQ, "Conflict", "admin-no-file", Outcome::BadRequest);
const INVALID: Spec = row(
    S::UNPROCESSABLE_ENTITY,
    "invalid_config",
    REQ,
    "Unprocessable Entity",
    "admin-invalid-config",
    Outcome::BadRequest,
);
const RESTART: Spec = row(S::CONFLICT, "needs_restart", REQ, "Conflict", "admin-needs-restart", Outcome::BadRequest);
const BAD_QUERY: Spec = row(S::BAD_REQUEST, "bad_query", REQ, "Bad Request", "admin-bad-query", Outcome::BadRequest);
const TOO_LARGE: Spec = row(
    S::PAYLOAD_TOO_LARGE,
    "table_too_large",
    REQ,
    "Content Too Large",
    "admin-table-too-large",
    Outcome::BadRequest,
);
const BAD_BODY: Spec =
    row(S::BAD_REQUEST, "bad_table_body", REQ, "Bad Request", "admin-bad-table-body", Outcome::BadRequest);
const RELOAD_FAILED: Spec = row(
    S::INTERNAL_SERVER_ERROR,
    "reload_failed",
    "proxy_internal_error",
    "Internal Server Error",
    "admin-reload-failed",
    Outcome::ProxyError,
);

impl Problem for AdminError {
    fn spec(&self) -> Spec {
        use AdminError as E;
        match self {
            E::NoEndpoint { .. } => NO_ENDPOINT,
            E::Unauthorized { .. } => UNAUTHORIZED,
            E::Forbidden { .. } => FORBIDDEN,
            E::MethodNotAllowed { .. } => METHOD_NOT_ALLOWED,
            E::ExplainWithoutId => NO_ID,
            E::UnknownRoute { .. } => UNKNOWN_ROUTE,
            E::NoTableFile => NO_FILE,
            E::InvalidTable { .. } => INVALID,
            E::NeedsRestart { .. } => RESTART,
            E::BadQuery { .. } => BAD_QUERY,
            E::TableTooLarge { .. } => TOO_LARGE,
            E::BadTableBody { .. } => BAD_BODY,
            E::ReloadFailed { .. } => RELOAD_FAILED,
        }
    }

    fn members(&self, body: &mut Map<String, Value>) {
        if let AdminError::InvalidTable { errors } = self {
            let list = errors
                .errors
                .iter()
                .map(|e| serde_json::json!({ "path": e.path, "line": e.line, "col": e.col, "message": e.message, "hint": e.hint }))
                .collect();
            body.insert("result".into(), "failure".into());
            body.insert("errors".into(), Value::Array(list));
        }
    }

    fn fields(&self, h: &mut HeaderMap) {
        match self {
            AdminError::Unauthorized { basic } => {
                let challenge = if *basic {
                    "Bearer realm=\"shardgate-admin\", Basic realm=\"shardgate-admin\", charset=\"UTF-8\""
                } else {
                    "Bearer realm=\"shardgate-admin\""
                };
                h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
            }
            AdminError::MethodNotAllowed { allow, .. } => {
                h.insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            _ => {}
        }
    }
}

impl fmt::Display for AdminError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use AdminError as E;
        match self {
            E::NoEndpoint { path } => write!(f, "no admin endpoint at {}", quote(path)),
            E::Unauthorized { .. } => f.write_str("this endpoint needs the admin bearer token"),
            E::Forbidden { detail } => f.write_str(detail),
            E::MethodNotAllowed { path, method, allow } => {
                write!(f, "{} takes {allow}, not {}", escape_for_display(path, 64), quote(method))
            }
            E::ExplainWithoutId => f.write_str("give the id to explain as ?id=…"),
            E::UnknownRoute { name } => write!(f, "no route named {}", quote(name)),
            E::NoTableFile => f.write_str(
                "this instance was not started from a table file (a table from etcd is applied as each revision is put)",
            ),
            E::InvalidTable { errors } => {
                write!(f, "{} problem(s) in {}; the running table is kept", errors.len(), errors.source_name)
            }
            E::NeedsRestart { detail } => f.write_str(detail),
            E::BadQuery { detail } => f.write_str(detail),
            E::TableTooLarge { max } => write!(f, "the table is larger than the {max} bytes a dry run reads"),
            E::BadTableBody { detail } => f.write_str(detail),
            E::ReloadFailed { detail } => write!(f, "the reload task failed: {detail}"),
        }
    }
}

impl std::error::Error for AdminError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_admin_error_has_a_complete_row_and_a_problem_response() -> Result<(), Box<dyn std::error::Error>> {
        use AdminError as E;
        let every = [
            (E::NoEndpoint { path: "/x".into() }, "not_found"),
            (E::Unauthorized { basic: true }, "unauthorized"),
            (E::Forbidden { detail: "cross-site" }, "forbidden"),
            (E::MethodNotAllowed { path: "/x".into(), method: "PUT".into(), allow: "GET" }, "method_not_allowed"),
            (E::ExplainWithoutId, "missing_id"),
            (E::UnknownRoute { name: "x".into() }, "unknown_route"),
            (E::NoTableFile, "no_file"),
            (E::InvalidTable { errors: ConfigErrors::single("t.yaml", "bad".into(), None) }, "invalid_config"),
            (E::NeedsRestart { detail: "why".into() }, "needs_restart"),
            (E::BadQuery { detail: "why".into() }, "bad_query"),
            (E::TableTooLarge { max: 8 }, "table_too_large"),
            (E::BadTableBody { detail: "why" }, "bad_table_body"),
            (E::ReloadFailed { detail: "why".into() }, "reload_failed"),
        ];
        for (err, reason) in &every {
            crate::problem::tests::assert_complete(err, reason)?;
        }
        Ok(())
    }
}
