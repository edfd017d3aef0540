//! What is per instance when many instances share one table (from etcd,
//! say): the listeners, the instance's name and the region it serves, given
//! as flags (or the environment) and put over the table's values every time
//! a table is loaded.

use std::net::SocketAddr;

use super::model::Config;
use super::ConfigErrors;

/// The per-instance values that replace the table's (`None`: the table's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceFlags {
    /// `--listen`: the proxy listener.
    pub listen: Option<SocketAddr>,
    /// `--admin`: the admin listener.
    pub admin: Option<SocketAddr>,
    /// `--instance`: this instance's name.
    pub instance: Option<String>,
    /// `--region`: the region this instance serves.
    pub region: Option<String>,
}

impl InstanceFlags {
    /// Puts the flags over `cfg` (loaded from `source`); a region the table
    /// does not have is an error of that table.
    pub fn apply(&self, cfg: &mut Config, source: &str) -> Result<(), ConfigErrors> {
        let fixed = &mut cfg.settings.restart;
        if let Some(a) = self.listen {
            fixed.listen = a;
        }
        if let Some(a) = self.admin {
            fixed.admin = a;
        }
        if let Some(name) = &self.region {
            let Some(i) = cfg.regions.iter().position(|r| &r.name == name) else {
                let known: Vec<&str> = cfg.regions.iter().map(|r| r.name.as_str()).collect();
                let message = format!("--region {name}: the table has no such region (it has {})", known.join(", "));
                return Err(ConfigErrors::single(source, message, None));
            };
            cfg.local_region = Some(i);
            let fixed = &mut cfg.settings.restart;
            if self.instance.is_none()
                && fixed.region.as_ref().is_none_or(|r| fixed.instance == format!("shardgate-{r}"))
            {
                fixed.instance = format!("shardgate-{name}");
            }
            fixed.region = Some(name.clone());
        }
        if let Some(name) = &self.instance {
            cfg.settings.restart.instance = name.clone();
        }
        Ok(())
    }

    /// Loads `text` (from `source`) as this instance's table: validated, the flags put over it.
    pub fn load(&self, text: &str, source: &str) -> Result<Config, ConfigErrors> {
        let mut cfg = super::load_str(text, source)?;
        self.apply(&mut cfg, source)?;
        Ok(cfg)
    }

    /// Whether any flag is given.
    pub fn any(&self) -> bool {
        *self != InstanceFlags::default()
    }
}
