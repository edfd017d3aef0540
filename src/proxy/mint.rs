//! Mint: for a create route, the proxy mints the new entity's id itself, in
//! the country the request asks for, so the entity is born in the region
//! that will own it. The id travels to the upstream in the rule's header and
//! back to the client in the same header (and `Location`).

use http::request::Parts;
use rand::Rng;

use crate::ids::{self, Format};
use crate::ids::{
    Decoded, Iuid, IuidMinter, LocalityMinter, LocalityMode, NodeIdentity, SystemClock, UniqidMinter, Uuid7Minter,
};
use crate::routing::{CountrySource, MintRule, Strategy, Table};

use super::error::{quote, ProxyError};
use super::extract;

/// The process's minters: one shared state per format, so ids are unique
/// across all connections and strictly increasing where the format is
/// time-first.
#[derive(Debug)]
pub struct Minters {
    iuid: IuidMinter<SystemClock>,
    uuid7: Uuid7Minter<SystemClock>,
    uniqid: UniqidMinter<SystemClock>,
    locality: LocalityMinter<SystemClock>,
}

impl Minters {
    /// Minters; the Locality node identity comes from the table at start-up
    /// (restart to change it: it names this process).
    pub fn new(locality_node: Option<NodeIdentity>, locality_mode: LocalityMode) -> Minters {
        let locality = LocalityMinter::new(SystemClock, locality_node.unwrap_or_default(), rand::random());
        locality.set_mode(locality_mode);
        Minters {
            iuid: IuidMinter::new(SystemClock),
            uuid7: Uuid7Minter::new(SystemClock),
            uniqid: UniqidMinter::new(SystemClock, 1),
            locality,
        }
    }
}

/// Where the rule reads its country, for messages.
fn describe(source: &CountrySource) -> String {
    match source {
        CountrySource::Header(h) => format!("header '{h}'"),
        CountrySource::Query(q) => format!("query parameter '{q}'"),
        CountrySource::Fixed(_) => "the route's fixed country".to_string(),
        CountrySource::Local(_) => "this instance's region".to_string(),
    }
}

/// The country a create request asks for: a country name from the table
/// (`KZ`) or its numeric id (`7`), from the rule's source.
pub fn country(source: &CountrySource, parts: &Parts, table: &Table) -> Result<u8, ProxyError> {
    let raw = match source {
        CountrySource::Fixed(c) | CountrySource::Local(c) => return Ok(*c),
        CountrySource::Header(h) => parts.headers.get(h).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
        CountrySource::Query(q) => {
            extract::query_param(parts.uri.query().unwrap_or(""), q).map(|v| extract::percent_decode(v).into_owned())
        }
    };
    let raw = raw.filter(|r| !r.is_empty()).ok_or_else(|| ProxyError::MissingCountry { param: describe(source) })?;
    country_named(&raw, table).ok_or_else(|| ProxyError::UnknownCountry { param: describe(source), value: raw })
}

/// A country from the table by name (`KZ`) or by its numeric id (`7`).
fn country_named(raw: &str, table: &Table) -> Option<u8> {
    table.country_by_name(raw).or_else(|| ids::text_decimal_u8(raw).filter(|&c| table.country_name(c).is_some()))
}

/// The id for a create request. shardgate mints it, so a client cannot
/// choose another region, country or entity for its entity:
///
/// * on a request `relayed` by an authenticated peer shardgate, the id the
///   peer minted (in the rule's header, when it is valid in the rule's
///   format) is kept, so the entity keeps the id the client was told;
/// * with the rule's `accept_client_id`, an id the client sends in the
///   header is kept when it is valid for the rule (format, the requested
///   country, the rule's entity; a uniqid's shard in the country's region),
///   else the request is a 400;
/// * otherwise a client's id is ignored (the minted one replaces it).
pub fn mint(
    rule: &MintRule,
    parts: &Parts,
    table: &Table,
    minters: &Minters,
    relayed: bool,
) -> Result<Decoded, ProxyError> {
    if let Some(value) = parts.headers.get(&rule.header) {
        if relayed {
            if let Some(id) = value.to_str().ok().and_then(|v| ids::parse(rule.format, v, table.id_params()).ok()) {
                return Ok(id);
            }
        } else if rule.accept_client_id {
            return client_id(rule, value, parts, table);
        }
    }
    let mut rng = rand::rng();
    let country = rule.country.as_ref().map(|source| country(source, parts, table)).transpose()?;
    Ok(match rule.format {
        Format::Iuid => {
            let c = country.unwrap_or(0);
            Decoded::Iuid(minters.iuid.mint(c, rule.entity.unwrap_or(0), &mut rng))
        }
        Format::Uuidv7 => Decoded::Uuidv7(minters.uuid7.mint(&mut rng)),
        Format::Locality => Decoded::Locality(minters.locality.mint()),
        Format::Uniqid => {
            let total = table.settings().uniqid_mint_shards.unwrap_or(1).max(1);
            let shard = match country {
                Some(c) => {
                    // A shard owned by the region that owns the country.
                    let region = country_region(c, rule, table)?;
                    let owned: Vec<u32> = (0..total).filter(|&s| table.shard_owner(s) == Some(region)).collect();
                    if owned.is_empty() {
                        return Err(ProxyError::CannotMint {
                            detail: format!("no shard is owned by region {}", table.region(region).name),
                        });
                    }
                    owned[rng.random_range(0..owned.len())]
                }
                None => rng.random_range(0..total),
            };
            let id = minters.uniqid.mint_in(total, shard, &mut rng);
            let out_of_range = || ProxyError::CannotMint { detail: format!("shard {shard} is not below {total}") };
            Decoded::Uniqid(id.ok_or_else(out_of_range)?)
        }
        Format::Snowflake | Format::Sonyflake | Format::Instagram => {
            // Validation rejects mint rules for read-only formats.
            return Err(ProxyError::CannotMint { detail: format!("{} ids cannot be minted", rule.format) });
        }
    })
}

/// The batch mint endpoint (`mint_batch.path`, `POST`): `count` fresh ids
/// of `format` (default `iuid`) for `country` and `entity` (names from the
/// table or numeric codes), as JSON, for services that mint their own. The
/// ids come from the same minters as create routes, so they are unique with
/// them. Query parameters: `format`, `count` (1..=`max_count`, default 1),
/// `country`, `entity`.
pub fn batch(query: Option<&str>, table: &Table, minters: &Minters) -> Result<Vec<u8>, ProxyError> {
    let q = query.unwrap_or("");
    let param = |name: &str| extract::query_param(q, name).map(|v| extract::percent_decode(v).into_owned());
    let bad = |detail: String| ProxyError::BadMintRequest { detail };
    let format = match param("format") {
        None => Format::Iuid,
        Some(f) => Format::from_name(&f)
            .filter(|f| f.can_mint())
            .ok_or_else(|| bad(format!("format {} cannot be minted", quote(&f))))?,
    };
    let max = table.settings().mint_batch.max_count;
    let count = match param("count") {
        None => 1,
        Some(c) => ids::parse_canonical_u64(&c)
            .filter(|&n| n >= 1 && n <= u64::from(max))
            .ok_or_else(|| bad(format!("count {} is not a number from 1 to {max}", quote(&c))))?,
    };
    let country = match param("country") {
        None => None,
        Some(c) => Some(
            country_named(&c, table)
                .ok_or(ProxyError::UnknownCountry { param: "query parameter 'country'".into(), value: c })?,
        ),
    };
    let entity = match param("entity") {
        None => None,
        Some(e) => Some(
            table
                .entity_by_name(&e)
                .or_else(|| ids::text_decimal_u8(&e))
                .ok_or_else(|| bad(format!("unknown entity {}", quote(&e))))?,
        ),
    };
    if format == Format::Iuid && (country.is_none() || entity.is_none()) {
        return Err(bad("iuid ids need `country` and `entity`".into()));
    }
    let rule = MintRule {
        format,
        entity,
        country: country.map(CountrySource::Fixed),
        header: http::HeaderName::from_static("x-shardgate-batch"),
        location: None,
        accept_client_id: false,
    };
    let parts = http::Request::new(()).into_parts().0;
    let mut out = Vec::with_capacity(64 + count as usize * 40);
    out.extend_from_slice(format!("{{\"format\":\"{format}\",\"count\":{count},\"ids\":[").as_bytes());
    for i in 0..count {
        let id = mint(&rule, &parts, table, minters, false)?;
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(format!("\"{id}\"").as_bytes());
    }
    out.extend_from_slice(b"]}\n");
    Ok(out)
}

/// A client-chosen id on a route with `accept_client_id`, if it is one the
/// rule could have minted for this request.
fn client_id(rule: &MintRule, value: &http::HeaderValue, parts: &Parts, table: &Table) -> Result<Decoded, ProxyError> {
    let param = format!("header '{}'", rule.header);
    let raw = String::from_utf8_lossy(value.as_bytes());
    let id = ids::parse(rule.format, &raw, table.id_params()).map_err(|error| ProxyError::BadId {
        param: param.clone(),
        errors: vec![error],
        input: raw.to_string(),
    })?;
    let country = rule.country.as_ref().map(|source| country(source, parts, table)).transpose()?;
    let named = |c: u8| match table.country_name(c) {
        Some(name) => format!("{c} ({name})"),
        None => c.to_string(),
    };
    let reject = |detail: String| ProxyError::ClientIdRejected { param: param.clone(), detail };
    match &id {
        Decoded::Iuid(i) => {
            if let Some(c) = country.filter(|&c| c != i.country()) {
                return Err(reject(format!("its country {} is not the requested {}", named(i.country()), named(c))));
            }
            if let Some(e) = rule.entity.filter(|&e| e != i.service_entity()) {
                let entity = |code: u8| match table.entity_name(code) {
                    Some(name) => format!("{code} ({name})"),
                    None => code.to_string(),
                };
                return Err(reject(format!(
                    "its entity {} is not this route's {}",
                    entity(i.service_entity()),
                    entity(e)
                )));
            }
        }
        Decoded::Uniqid(u) => {
            if let Some(c) = country {
                let region = country_region(c, rule, table)?;
                if table.shard_owner(u.shard()) != Some(region) {
                    return Err(reject(format!(
                        "its shard {} is not owned by region {}, which owns country {}",
                        u.shard(),
                        table.region(region).name,
                        named(c)
                    )));
                }
            }
        }
        _ => {}
    }
    Ok(id)
}

/// The region that owns country `c` (for the rule's entity, so overrides count).
fn country_region(c: u8, rule: &MintRule, table: &Table) -> Result<crate::routing::RegionId, ProxyError> {
    let probe = Decoded::Iuid(Iuid::from_fields(0, c, rule.entity.unwrap_or(0), 0));
    Ok(table.place(&probe, Strategy::Country).map_err(|e| ProxyError::CannotMint { detail: e.to_string() })?.region)
}
