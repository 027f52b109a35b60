//! Deserializers for the human-friendly value forms used in the configuration:
//! durations (`"500ms"`), byte sizes (`"64MiB"`), listen addresses, secrets, and
//! librdkafka property values (strings, numbers or booleans).
//!
//! Their error messages say what was expected with an example; toml attaches
//! the span, so the loader can add the key path, line and column.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use humantime_serde::re::humantime;
use secrecy::SecretString;
use serde::Deserializer;
use serde::de::{self, Visitor};

use super::error::quoted;

/// A `humantime` duration string such as `"500ms"`, `"10s"` or `"2m"`.
pub(crate) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = Duration;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration string such as \"500ms\", \"10s\" or \"2m\"")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Duration, E> {
            humantime::parse_duration(s.trim()).map_err(|e| {
                E::custom(format!(
                    "invalid duration {}: {e}; write a number with a unit, e.g. \"500ms\", \"10s\" or \"2m\"",
                    quoted(s)
                ))
            })
        }
        fn visit_i64<E: de::Error>(self, n: i64) -> Result<Duration, E> {
            Err(E::custom(format!(
                "a duration needs a unit: write \"{n}s\" for seconds or \"{n}ms\" for milliseconds"
            )))
        }
        fn visit_u64<E: de::Error>(self, n: u64) -> Result<Duration, E> {
            Err(E::custom(format!(
                "a duration needs a unit: write \"{n}s\" for seconds or \"{n}ms\" for milliseconds"
            )))
        }
    }
    d.deserialize_any(V)
}

/// An optional duration: present, it is read as [`duration`].
pub(crate) fn optional_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

/// A byte size: an integer number of bytes or a string such as `"64MiB"`.
pub(crate) fn byte_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a byte size such as \"64MiB\" or a number of bytes")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<u64, E> {
            parse_byte_size(s).map_err(E::custom)
        }
        fn visit_i64<E: de::Error>(self, n: i64) -> Result<u64, E> {
            u64::try_from(n).map_err(|_| E::custom(format!("a size cannot be negative ({n})")))
        }
        fn visit_u64<E: de::Error>(self, n: u64) -> Result<u64, E> {
            Ok(n)
        }
    }
    d.deserialize_any(V)
}

/// Parses `"64MiB"`, `"512 KiB"`, `"1GB"`, `"4096"`. Binary units (KiB, MiB,
/// GiB, TiB) are powers of 1024, decimal ones (kB, MB, GB, TB) powers of 1000;
/// units are case-insensitive and the number is a whole number.
pub fn parse_byte_size(text: &str) -> Result<u64, String> {
    let fail = |why: &str| {
        format!(
            "invalid size {}: {why}; write a whole number with an optional unit, e.g. \
             \"64MiB\", \"512KiB\" or \"1GB\" (KiB/MiB/GiB are powers of 1024, kB/MB/GB of 1000)",
            quoted(text)
        )
    };
    let trimmed = text.trim();
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    if number.is_empty() {
        return Err(fail("it does not start with a number"));
    }
    let number: u64 = number
        .parse()
        .map_err(|_| fail("the number is too large"))?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        "t" | "tb" => 1_000_000_000_000,
        "tib" => 1 << 40,
        _ => return Err(fail(&format!("unknown unit {}", quoted(unit.trim())))),
    };
    number
        .checked_mul(multiplier)
        .ok_or_else(|| fail("the size is too large"))
}

/// An optional secret string. Wrong types are rejected without echoing the value.
pub(crate) fn secret<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SecretString>, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = SecretString;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<SecretString, E> {
            Ok(SecretString::from(s))
        }
        fn visit_string<E: de::Error>(self, s: String) -> Result<SecretString, E> {
            Ok(SecretString::from(s))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<SecretString, E> {
            Err(not_a_string())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<SecretString, E> {
            Err(not_a_string())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<SecretString, E> {
            Err(not_a_string())
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<SecretString, E> {
            Err(not_a_string())
        }
    }
    fn not_a_string<E: de::Error>() -> E {
        E::custom("must be a quoted string (the value is not shown because it is a secret)")
    }
    d.deserialize_string(V).map(Some)
}

/// An IP socket address such as `"127.0.0.1:9187"`.
pub(crate) fn socket_addr<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = SocketAddr;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an address such as \"127.0.0.1:9187\"")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<SocketAddr, E> {
            s.trim().parse().map_err(|_| {
                E::custom(format!(
                    "invalid listen address {}: write IP:port, e.g. \"127.0.0.1:9187\", \
                     \"0.0.0.0:9187\" or \"[::]:9187\" (host names are not resolved)",
                    quoted(s)
                ))
            })
        }
    }
    d.deserialize_str(V)
}

/// An optional column name where `""` means "not set".
pub(crate) fn optional_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let name: String = serde::Deserialize::deserialize(d)?;
    Ok(Some(name).filter(|n| !n.is_empty()))
}

/// librdkafka properties: values may be strings, integers, floats or booleans
/// and are kept as the strings librdkafka expects.
pub(crate) fn properties<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    struct Value(String);
    impl<'de> serde::Deserialize<'de> for Value {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = Value;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a string, number or boolean")
                }
                fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
                    Ok(Value(s.to_owned()))
                }
                fn visit_i64<E: de::Error>(self, n: i64) -> Result<Value, E> {
                    Ok(Value(n.to_string()))
                }
                fn visit_u64<E: de::Error>(self, n: u64) -> Result<Value, E> {
                    Ok(Value(n.to_string()))
                }
                fn visit_f64<E: de::Error>(self, n: f64) -> Result<Value, E> {
                    Ok(Value(n.to_string()))
                }
                fn visit_bool<E: de::Error>(self, b: bool) -> Result<Value, E> {
                    Ok(Value(b.to_string()))
                }
            }
            d.deserialize_any(V)
        }
    }
    let map: BTreeMap<String, Value> = serde::Deserialize::deserialize(d)?;
    Ok(map.into_iter().map(|(k, Value(v))| (k, v)).collect())
}

/// `host[:port]` of one entry of a host list: `db-a:5433`, `[::1]:5433`,
/// `10.0.0.7`, `::1` (no port: several colons without brackets), or a
/// socket directory (`/run/postgresql`, never a port). `None`: no port, or
/// one that is not a number (left for validation to name).
pub fn split_host_port(entry: &str) -> (&str, Option<u16>) {
    if entry.starts_with('/') {
        return (entry, None);
    }
    if let Some(bracketed) = entry.strip_prefix('[')
        && let Some((host, rest)) = bracketed.split_once(']')
    {
        return (host, rest.strip_prefix(':').and_then(|p| p.parse().ok()));
    }
    match entry.split_once(':') {
        Some((host, port)) if !port.contains(':') => match port.parse() {
            Ok(port) => (host, Some(port)),
            Err(_) => (entry, None),
        },
        _ => (entry, None),
    }
}
