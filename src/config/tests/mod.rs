//! Tests for the configuration module. The example files under `config/` and
//! the bad ones under `config/invalid/` are loaded here, so they cannot rot.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::env::VarError;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;
use secrecy::ExposeSecret;

mod errors;
mod examples;
mod interpolation;
mod kafka;
mod keys;
mod postgres;
mod producer;
mod routes;
mod sections;
mod units;

use super::interpolate::{InterpolateError, interpolate};
use super::producer::librdkafka_property;
use super::*;

const PASSWORD: &str = "pg-s3cret-Zq9!";
const KAFKA_PASSWORD: &str = "kafka-s3cret-Xw7!";
const MASK_SALT: &str = "mask-s4lt-Qz9!";

/// The variables the example files refer to, with recognisable values.
fn fake_env(name: &str) -> Result<String, VarError> {
    match name {
        "WALRELAY_PG_PASSWORD" => Ok(PASSWORD.to_owned()),
        "WALRELAY_KAFKA_PASSWORD" => Ok(KAFKA_PASSWORD.to_owned()),
        "PGHOST" => Ok("db.internal".to_owned()),
        "WALRELAY_MASK_SALT" => Ok(MASK_SALT.to_owned()),
        _ => Err(VarError::NotPresent),
    }
}

fn load(text: &str) -> Result<Config, ConfigError> {
    Config::from_str_with_env(text, "test.toml", &fake_env)
}

fn load_err(text: &str) -> String {
    match load(text) {
        Ok(config) => panic!("expected an error, got {config:?}"),
        Err(e) => e.to_string(),
    }
}

const MINIMAL: &str = r#"
[connector]
name = "orders"
[postgres]
database = "app"
[kafka]
brokers = "127.0.0.1:9092"
[[outbox]]
table = "public.outbox"
"#;

/// `MINIMAL` with `extra` appended (TOML lets a later header reopen nothing,
/// so extras are whole sections or keys for the last `[[outbox]]`).
fn minimal_with(extra: &str) -> String {
    format!("{MINIMAL}{extra}\n")
}

const TABLES_ONLY: &str = r#"
[connector]
name = "shop"
[postgres]
database = "app"
[kafka]
brokers = "127.0.0.1:9092"
"#;

fn with_postgres(keys: &str) -> String {
    MINIMAL.replace("database = \"app\"", &format!("database = \"app\"\n{keys}"))
}

fn with_kafka(keys: &str) -> String {
    MINIMAL.replace("[kafka]", &format!("[kafka]\n{keys}"))
}

/// `MINIMAL` with `[kafka]` keys inserted after `brokers`.
fn kafka_with(keys: &str) -> String {
    MINIMAL.replace(
        "brokers = \"127.0.0.1:9092\"\n",
        &format!("brokers = \"127.0.0.1:9092\"\n{keys}\n"),
    )
}

/// A fresh directory for secret files of test `name`.
fn secret_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("walrelay-secrets-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A file that exists, for the TLS path keys (its content does not matter
/// to validation).
fn existing_file() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml").to_owned()
}

/// A file only its owner may read (what a private key must be).
fn private_file(name: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = secret_dir(name).join("client.key");
    std::fs::write(&path, "PEM").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.display().to_string()
}

fn toml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

fn config_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config")
}
