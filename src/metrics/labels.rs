//! The label sets of the metrics: one struct per family, and [`Label`],
//! a shared label value.

use std::fmt::{self, Write as _};
use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

/// A label value shared without copying (a route or region name).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Label(Arc<str>);

impl Label {
    /// A label value from text (allocates once).
    pub fn new(text: &str) -> Label {
        Label(Arc::from(text))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl EncodeLabelValue for Label {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        encoder.write_str(&self.0)
    }
}

/// Labels of `shardgate_http_server_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RequestLabels {
    pub(super) http_request_method: &'static str,
    pub(super) http_route: Label,
    pub(super) http_response_status_code: u16,
    pub(super) region: Label,
    pub(super) outcome: &'static str,
}

/// Labels of `shardgate_http_client_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct UpstreamLabels {
    pub(super) region: Label,
    pub(super) http_response_status_code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct FormatLabels {
    pub(super) format: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DecodeFailureLabels {
    pub(super) format: &'static str,
    pub(super) reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct MintLabels {
    pub(super) format: &'static str,
    pub(super) region: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct HealthLabels {
    pub(super) region: String,
    pub(super) endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ListenerLabels {
    pub(super) listener: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabels {
    pub(super) result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LegLabels {
    pub(super) kind: &'static str,
    pub(super) route: String,
    pub(super) region: String,
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct UnitLabels {
    pub(super) unit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct MoveLabels {
    pub(super) unit: String,
    pub(super) result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TableInfoLabels {
    pub(super) version: u64,
    pub(super) sha256: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct BuildLabels {
    pub(super) version: &'static str,
}
