//! The dashboard's traffic: request rate, error rate and mean latency per
//! region and outcome over the last minutes, from the request metrics the
//! process already keeps. Every [`INTERVAL`] the admin listener reads the
//! totals out of the rendered metrics (no counter of its own on the
//! request path) and keeps the last [`SAMPLES`]; rates are the differences
//! between neighbouring samples.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

/// How often the totals are read.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// Samples kept: ten minutes.
pub const SAMPLES: usize = 120;

/// The request series' totals, by a label's value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    /// Requests answered.
    pub count: u64,
    /// Of those, answered 5xx.
    pub errors: u64,
    /// Seconds spent on them, summed.
    pub seconds: f64,
}

/// The totals at one moment: by region (`""`: none, the request never
/// reached one) and by outcome.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// When it was read, Unix seconds.
    pub at: f64,
    /// By region.
    pub regions: BTreeMap<String, Totals>,
    /// By outcome.
    pub outcomes: BTreeMap<String, Totals>,
    /// Requests placed, by placement unit (`plan`'s traffic).
    pub units: BTreeMap<String, u64>,
}

const SERIES: &str = "shardgate_http_server_request_duration_seconds";
const UNITS: &str = "shardgate_placement_requests_total{";

/// How far back `plan` looks for the traffic of placement units.
pub const PLAN_WINDOW: f64 = 300.0;

impl Sample {
    /// The totals in `metrics` (OpenMetrics text), read at `at`.
    pub fn read(metrics: &str, at: f64) -> Sample {
        let mut sample = Sample { at, ..Sample::default() };
        for line in metrics.lines() {
            if let Some(rest) = line.strip_prefix(UNITS) {
                let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
                let unit = parse_labels(labels).into_iter().find(|(n, _)| n == "unit").map(|(_, v)| v);
                if let (Some(unit), Ok(n)) = (unit, value.trim().parse::<u64>()) {
                    sample.units.insert(unit, n);
                }
                continue;
            }
            let Some(rest) = line.strip_prefix(SERIES) else { continue };
            let (is_count, rest) = match (rest.strip_prefix("_count{"), rest.strip_prefix("_sum{")) {
                (Some(r), _) => (true, r),
                (None, Some(r)) => (false, r),
                _ => continue,
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
            let Ok(value) = value.trim().parse::<f64>() else { continue };
            let labels = parse_labels(labels);
            let get = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap_or_default();
            let error = get("http_response_status_code").starts_with('5');
            for totals in
                [sample.regions.entry(get("region")).or_default(), sample.outcomes.entry(get("outcome")).or_default()]
            {
                if is_count {
                    // Counts are whole numbers written as such.
                    let n = value as u64;
                    totals.count += n;
                    if error {
                        totals.errors += n;
                    }
                } else {
                    totals.seconds += value;
                }
            }
        }
        sample
    }
}

/// `a="x",b="y\"z"` as pairs, with OpenMetrics escapes undone.
fn parse_labels(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.push((name.trim_start_matches(',').to_string(), value));
        rest = &after[end.min(after.len())..];
    }
    out
}

/// The samples of the last [`SAMPLES`] intervals.
#[derive(Debug, Default)]
pub struct Traffic {
    samples: Mutex<VecDeque<Sample>>,
}

impl Traffic {
    /// Keeps `sample` (the oldest goes once there are [`SAMPLES`]).
    pub fn push(&self, sample: Sample) {
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        if samples.len() == SAMPLES {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// The rates between neighbouring samples: per region and per outcome,
    /// requests and 5xx answers per second and mean latency in ms.
    pub fn rates(&self) -> Value {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let mut points = Vec::new();
        for (a, b) in samples.iter().zip(samples.iter().skip(1)) {
            let dt = b.at - a.at;
            if dt <= 0.0 {
                continue;
            }
            let rates = |before: &BTreeMap<String, Totals>, after: &BTreeMap<String, Totals>| -> Value {
                let mut out = serde_json::Map::new();
                for (name, t) in after {
                    let zero = Totals::default();
                    let p = before.get(name).unwrap_or(&zero);
                    let n = t.count.saturating_sub(p.count);
                    let errors = t.errors.saturating_sub(p.errors);
                    let mean_ms = if n == 0 { Value::Null } else { json!((t.seconds - p.seconds) / n as f64 * 1000.0) };
                    out.insert(
                        name.clone(),
                        json!({ "rps": n as f64 / dt, "eps": errors as f64 / dt, "mean_ms": mean_ms }),
                    );
                }
                Value::Object(out)
            };
            points.push(json!({ "at": b.at, "regions": rates(&a.regions, &b.regions), "outcomes": rates(&a.outcomes, &b.outcomes) }));
        }
        json!({ "interval_s": INTERVAL.as_secs(), "points": points })
    }
}

impl Traffic {
    /// The requests each placement unit placed between the oldest sample
    /// of the last [`PLAN_WINDOW`] seconds and `now` (a unit a reload
    /// added counts from zero).
    pub fn window(&self, now: &Sample) -> crate::routing::plan::Window {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let empty = Sample::default();
        let oldest = samples.iter().find(|s| now.at - s.at <= PLAN_WINDOW && s.at <= now.at).unwrap_or(&empty);
        let units: std::collections::HashMap<String, u64> = now
            .units
            .iter()
            .map(|(name, &n)| (name.clone(), n.saturating_sub(oldest.units.get(name).copied().unwrap_or(0))))
            .collect();
        let seconds = if oldest.at > 0.0 { now.at - oldest.at } else { 0.0 };
        crate::routing::plan::Window { seconds, total: units.values().sum(), units }
    }
}

/// Now, in Unix seconds.
pub fn now() -> f64 {
    crate::metrics::unix_seconds(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# TYPE shardgate_http_server_request_duration_seconds histogram
shardgate_http_server_request_duration_seconds_sum{http_request_method="GET",http_route="orders",http_response_status_code="200",region="eu",outcome="proxied"} 0.5
shardgate_http_server_request_duration_seconds_count{http_request_method="GET",http_route="orders",http_response_status_code="200",region="eu",outcome="proxied"} 10
shardgate_http_server_request_duration_seconds_bucket{http_request_method="GET",http_route="orders",http_response_status_code="200",region="eu",outcome="proxied",le="0.005"} 10
shardgate_http_server_request_duration_seconds_sum{http_request_method="GET",http_route="or\"d",http_response_status_code="502",region="eu",outcome="upstream_failed"} 1.0
shardgate_http_server_request_duration_seconds_count{http_request_method="GET",http_route="or\"d",http_response_status_code="502",region="eu",outcome="upstream_failed"} 2
shardgate_http_server_request_duration_seconds_count{http_request_method="GET",http_route="",http_response_status_code="404",region="",outcome="no_route"} 3
"#;

    #[test]
    fn totals_by_region_and_outcome_from_the_metrics_text() {
        let s = Sample::read(TEXT, 10.0);
        assert_eq!(s.regions["eu"], Totals { count: 12, errors: 2, seconds: 1.5 });
        assert_eq!(s.regions[""], Totals { count: 3, errors: 0, seconds: 0.0 });
        assert_eq!(s.outcomes["upstream_failed"], Totals { count: 2, errors: 2, seconds: 1.0 });
    }

    #[test]
    fn rates_are_differences_over_time() {
        let t = Traffic::default();
        t.push(Sample::read("", 0.0));
        t.push(Sample::read(TEXT, 5.0));
        let r = t.rates();
        let eu = &r["points"][0]["regions"]["eu"];
        assert_eq!(
            (eu["rps"].as_f64(), eu["eps"].as_f64(), eu["mean_ms"].as_f64()),
            (Some(2.4), Some(0.4), Some(125.0))
        );
        assert_eq!(r["points"][0]["outcomes"]["no_route"]["rps"].as_f64(), Some(0.6));
    }

    #[test]
    fn label_values_with_escapes() {
        let l = parse_labels(r#"a="x",b="y\"z\\",c="""#);
        assert_eq!(l, vec![("a".into(), "x".into()), ("b".into(), "y\"z\\".into()), ("c".into(), String::new())]);
    }
}
