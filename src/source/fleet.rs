//! The fleet view: each instance publishes what it runs under
//! `KEY/fleet/INSTANCE`, bound to a lease it keeps alive (a dead instance
//! disappears with its lease), and any instance answers for all of them.
//!
//! An instance's report: its region, the revision and digest it runs,
//! since when, how long since it last saw the source current, whether it
//! started from its local copy, and the located errors of a revision it
//! rejected. The view adds the key's current revision and marks who is
//! behind it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;

use super::etcd::{Client, Target};
use super::{stopped, Status};

/// How long a report outlives its instance.
const LEASE_TTL: Duration = Duration::from_secs(10);

/// One instance's place in the fleet.
#[derive(Debug)]
pub struct Fleet {
    client: Arc<Client>,
    target: Target,
    instance: String,
    region: Option<String>,
    status: Arc<Status>,
    table: Arc<crate::routing::SharedTable>,
}

impl Fleet {
    /// The fleet of `target`'s table, as `instance` (serving `region`) sees it.
    pub fn new(
        client: Arc<Client>,
        target: Target,
        (instance, region): (String, Option<String>),
        status: Arc<Status>,
        table: Arc<crate::routing::SharedTable>,
    ) -> Fleet {
        Fleet { client, target, instance, region, status, table }
    }

    fn prefix(&self) -> String {
        format!("{}/fleet/", self.target.key)
    }

    /// What this instance runs from the source.
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// This instance's report: what it runs, and the moves under way in it.
    pub fn report(&self) -> Value {
        let mut report = self.status.report(&self.instance, self.region.as_deref());
        let snapshot = self.table.snapshot();
        let table = &snapshot.table;
        let moves: Vec<Value> = table.moves().map(|m| table.move_json(m)).collect();
        report["moves"] = Value::Array(moves);
        report
    }

    /// Publishes this instance's report on every change and every
    /// `progress`, under a lease kept alive, until `stop`.
    pub async fn publish(self: Arc<Self>, progress: Duration, mut stop: watch::Receiver<bool>) {
        let key = format!("{}{}", self.prefix(), self.instance);
        let mut changes = self.status.changes();
        let mut lease = 0;
        let mut tick = tokio::time::interval(progress.min(LEASE_TTL / 3));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if lease == 0 {
                match self.client.grant(LEASE_TTL).await {
                    Ok(id) => lease = id,
                    Err(e) => tracing::debug!(error = %e, "fleet: no lease yet"),
                }
            } else if !self.client.keep_alive(lease).await.unwrap_or(true) {
                lease = 0;
                continue;
            }
            if lease != 0 {
                if let Err(e) = self.client.put(&key, &self.report().to_string(), lease).await {
                    tracing::debug!(error = %e, "fleet: report not published");
                    if e.0.contains("lease") {
                        lease = 0;
                    }
                }
            }
            tokio::select! {
                () = stopped(&mut stop) => return,
                _ = tick.tick() => {}
                _ = changes.changed() => {}
            }
        }
    }

    /// Every instance's report, the key's current revision, and who is behind it.
    pub async fn view(&self) -> Value {
        let listed = tokio::time::timeout(Duration::from_secs(5), async {
            let (kv, _) = self.client.get(&self.target.key).await?;
            let reports = self.client.list(&self.prefix()).await?;
            Ok::<_, super::etcd::EtcdError>((kv.map_or(0, |kv| kv.mod_revision), reports))
        })
        .await;
        match listed {
            Ok(Ok((current, reports))) => {
                let instances: Vec<Value> = reports
                    .iter()
                    .filter_map(|kv| serde_json::from_str::<Value>(&kv.value).ok())
                    .map(|mut r| {
                        let behind = r["revision"].as_i64().unwrap_or(0) < current;
                        r["behind"] = json!(behind);
                        r
                    })
                    .collect();
                let behind = instances.iter().filter(|r| r["behind"] == json!(true)).count();
                json!({ "source": self.target.name(), "revision": current, "instances": instances, "behind": behind, "reachable": true })
            }
            Ok(Err(e)) => self.unreachable(&e.to_string()),
            Err(_) => self.unreachable("no answer within 5 s"),
        }
    }

    fn unreachable(&self, why: &str) -> Value {
        let mut own = self.report();
        own["behind"] = Value::Null;
        json!({
            "source": self.target.name(),
            "reachable": false,
            "error": format!("etcd not reachable ({why}): only this instance is known; its table may be stale"),
            "instances": [own],
        })
    }
}
