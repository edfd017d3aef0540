//! The listener's TLS choices as the table names them: the lowest protocol
//! version ([`TlsVersion`], written `1.2` or `1.3`, quoted or not), and the
//! cipher suites and key-exchange groups by their IANA names, looked up in
//! the one provider compiled in (rustls with `ring`). Validation and the
//! listener both use these lookups, so a name the table accepts is a name
//! the listener can use.

use std::fmt;

use rustls::crypto::{ring, SupportedKxGroup};
use rustls::SupportedCipherSuite;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The lowest TLS version the listener accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3.
    #[default]
    V1_2,
    /// TLS 1.3 only.
    V1_3,
}

impl TlsVersion {
    /// The rustls protocol versions from this one up.
    pub fn versions(self) -> &'static [&'static rustls::SupportedProtocolVersion] {
        static FROM_1_2: [&rustls::SupportedProtocolVersion; 2] = [&rustls::version::TLS13, &rustls::version::TLS12];
        static FROM_1_3: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
        match self {
            TlsVersion::V1_2 => &FROM_1_2,
            TlsVersion::V1_3 => &FROM_1_3,
        }
    }

    /// As the table writes it.
    fn name(self) -> &'static str {
        match self {
            TlsVersion::V1_2 => "1.2",
            TlsVersion::V1_3 => "1.3",
        }
    }

    fn parse(text: &str) -> Option<TlsVersion> {
        [TlsVersion::V1_2, TlsVersion::V1_3].into_iter().find(|v| v.name() == text)
    }
}

impl fmt::Display for TlsVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl<'de> Deserialize<'de> for TlsVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = TlsVersion;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a TLS version, 1.2 or 1.3")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<TlsVersion, E> {
                TlsVersion::parse(v).ok_or_else(|| E::custom(format!("unsupported TLS version {v:?}: 1.2 or 1.3")))
            }
            // `min_version: 1.3` unquoted is a YAML number.
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<TlsVersion, E> {
                self.visit_str(&v.to_string())
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for TlsVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The cipher suite of that IANA name (`TLS13_AES_128_GCM_SHA256`,
/// `TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256`, …), if the provider has it.
pub fn cipher_suite(name: &str) -> Option<SupportedCipherSuite> {
    ring::ALL_CIPHER_SUITES.iter().copied().find(|s| s.suite().as_str() == Some(name))
}

/// The key-exchange group of that name (`X25519`, `secp256r1`, `secp384r1`).
pub fn kx_group(name: &str) -> Option<&'static dyn SupportedKxGroup> {
    ring::ALL_KX_GROUPS.iter().copied().find(|g| g.name().as_str() == Some(name))
}

/// Every cipher suite name the provider knows, for hints.
pub fn cipher_suite_names() -> Vec<&'static str> {
    ring::ALL_CIPHER_SUITES.iter().filter_map(|s| s.suite().as_str()).collect()
}

/// Every key-exchange group name the provider knows, for hints.
pub fn kx_group_names() -> Vec<&'static str> {
    ring::ALL_KX_GROUPS.iter().filter_map(|g| g.name().as_str()).collect()
}

/// Whether the suite is a TLS 1.3 one.
pub fn is_tls13(suite: SupportedCipherSuite) -> bool {
    matches!(suite, SupportedCipherSuite::Tls13(_))
}

/// The ALPN protocols the listener can serve.
pub const ALPN: [&str; 2] = ["h2", "http/1.1"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_in_the_provider() {
        assert!(cipher_suite("TLS13_AES_128_GCM_SHA256").is_some_and(is_tls13));
        assert!(cipher_suite("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384").is_some_and(|s| !is_tls13(s)));
        assert!(cipher_suite("TLS_RSA_WITH_RC4_128_SHA").is_none());
        assert!(kx_group("X25519").is_some() && kx_group("secp384r1").is_some() && kx_group("x448").is_none());
        assert!(cipher_suite_names().len() >= 6 && kx_group_names().len() >= 3);
    }
}
