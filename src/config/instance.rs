//! What is per instance when many instances share one table (from etcd,
//! say): the listeners, the instance's name and the region it serves, given
//! as flags (or the environment) and put over the table's values every time
//! a table is loaded.

use std::net::SocketAddr;

use super::model::Config;
use super::schema::File;
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
    /// Puts the flags over `file` (loaded from `source`) before it is
    /// validated, so the table is checked as this instance runs it: a route
    /// sending to `local`, or minting in the local region's country, is
    /// judged by the region the flag names. A region the table does not
    /// have is an error of the flag, not of a line of the table.
    pub(super) fn put_over(&self, file: &mut File, source: &str) -> Result<(), ConfigErrors> {
        if let Some(a) = self.listen {
            file.listen = a;
        }
        if let Some(a) = self.admin {
            file.admin = a;
        }
        if let Some(name) = &self.region {
            if !file.regions.contains_key(name) {
                let known: Vec<&str> = file.regions.keys().map(String::as_str).collect();
                let message = format!("--region {name}: the table has no such region (it has {})", known.join(", "));
                return Err(ConfigErrors::single(source, message, None));
            }
            file.region = Some(name.clone());
        }
        if let Some(name) = &self.instance {
            file.instance = Some(name.clone());
        }
        Ok(())
    }

    /// Loads `text` (from `source`) as this instance's table: the flags put
    /// over it, then validated.
    pub fn load(&self, text: &str, source: &str) -> Result<Config, ConfigErrors> {
        super::load(text, source, self).map(|(config, _)| config)
    }

    /// Reads the table file at `path` and loads it as this instance's
    /// table; also returns its text (for hashing and `/config`).
    pub fn load_file(&self, path: &std::path::Path) -> Result<(Config, String), ConfigErrors> {
        let name = path.display().to_string();
        let text = super::read_text(path).map_err(|m| ConfigErrors::single(&name, m, None))?;
        let config = self.load(&text, &name)?;
        Ok((config, text))
    }

    /// An instance serving `region`, every other value the table's.
    pub fn in_region(region: Option<String>) -> InstanceFlags {
        InstanceFlags { region, ..InstanceFlags::default() }
    }

    /// Whether any flag is given.
    pub fn any(&self) -> bool {
        *self != InstanceFlags::default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::model::CountrySource;

    /// A table as a fleet shares it: no `region:`, each instance naming its
    /// own with `--region`; a route mints in the local region's country.
    pub(crate) const SHARED: &str = "version: 1
regions:
  eu: { upstreams: [\"http://127.0.0.1:9001\"] }
  kz: { upstreams: [\"http://127.0.0.1:9002\"] }
countries:
  DE: { id: 49, region: eu }
  FR: { id: 33, region: eu }
  KZ: { id: 7, region: kz }
entities:
  Order: 3
routes:
  - name: create
    match: { path: /v1/orders, methods: [POST] }
    mint: { format: iuid, entity: Order, country: { local: true } }
  - name: health
    match: { path: /v1/health }
    to: local
";

    fn region(name: &str) -> InstanceFlags {
        InstanceFlags::in_region(Some(name.into()))
    }

    fn minted_country(cfg: &Config) -> Option<u8> {
        match cfg.routes.iter().find_map(|r| r.mint.as_ref())?.country {
            Some(CountrySource::Local(c)) => Some(c),
            _ => None,
        }
    }

    #[test]
    fn a_shared_table_is_checked_against_the_region_the_flag_names() {
        let without = crate::config::load_str(SHARED, "shared.yaml").err().map(|e| e.errors.len());
        assert_eq!(without, Some(2), "`local` needs a region: the mint rule's and the route's");

        let eu = region("eu").load(SHARED, "shared.yaml").map_err(|e| e.to_string());
        let eu = eu.as_ref().map(|cfg| (cfg.local_region, minted_country(cfg), cfg.settings.restart.instance.as_str()));
        assert_eq!(eu, Ok((Some(0), Some(33), "shardgate-eu")), "eu mints in its lowest-id country, FR");
        let kz = region("kz").load(SHARED, "shared.yaml").map_err(|e| e.to_string());
        assert_eq!(kz.as_ref().map(minted_country), Ok(Some(7)));
    }

    #[test]
    fn the_flag_replaces_the_tables_region() {
        let table = SHARED.replace("version: 1\n", "version: 1\nregion: eu\n");
        let kz = region("kz").load(&table, "t.yaml").map_err(|e| e.to_string());
        let kz = kz.as_ref().map(|cfg| (cfg.local_region, minted_country(cfg), cfg.settings.restart.instance.as_str()));
        assert_eq!(kz, Ok((Some(1), Some(7), "shardgate-kz")));
    }

    #[test]
    fn a_region_the_table_lacks_is_the_flags_error_not_a_line_of_the_table() {
        let err = region("mars").load(SHARED, "shared.yaml").err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("shared.yaml: --region mars: the table has no such region (it has eu, kz)"));
    }

    #[test]
    fn a_region_that_failed_to_parse_is_reported_as_the_table_wrote_it() {
        let table = SHARED.replace("kz: { upstreams: [\"http://127.0.0.1:9002\"] }", "kz: { upstreams: 5 }");
        let err = region("kz").load(&table, "t.yaml").err();
        let paths: Vec<&str> = err.iter().flat_map(|e| e.errors.iter().map(|e| e.path.as_str())).collect();
        assert!(paths.iter().any(|p| p.starts_with("regions.kz")), "{err:?}");
        assert!(err.iter().flat_map(|e| &e.errors).all(|e| !e.message.starts_with("--region")), "{err:?}");
    }

    #[test]
    fn flags_are_checked_as_the_table_s_own_values() {
        let addr = "127.0.0.1:9090".parse().ok();
        let flags = InstanceFlags { listen: addr, admin: addr, ..region("eu") };
        let err = flags.load(SHARED, "shared.yaml").err();
        assert!(err.as_ref().is_some_and(|e| e.has_path("admin")), "{err:?}");
        let flags = InstanceFlags { instance: Some("bad name".into()), ..region("eu") };
        let err = flags.load(SHARED, "shared.yaml").err();
        assert!(err.as_ref().is_some_and(|e| e.has_path("instance")), "{err:?}");
    }
}
