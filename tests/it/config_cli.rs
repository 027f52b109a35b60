//! The binary's handling of configurations that librdkafka would refuse:
//! `walrelay check` and `walrelay run` both stop at start with exit code 2,
//! naming the key and never its value, before they need PostgreSQL or Kafka.
//! (These tests need neither service: both point at closed ports.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SECRET: &str = "kafka-s3cret-Wq4!";

/// A port nothing listens on, for both services.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn write_config(name: &str, librdkafka: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("walrelay-config-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("walrelay.toml");
    let port = closed_port();
    std::fs::write(
        &path,
        format!(
            "[connector]\nname = \"cli\"\n[postgres]\nhost = \"127.0.0.1\"\nport = {port}\n\
             database = \"d\"\nconnect_timeout = \"1s\"\n[kafka]\nbrokers = \"127.0.0.1:{port}\"\n\
             linger = \"2s\"\n[[outbox]]\ntable = \"outbox\"\n[kafka.librdkafka]\n{librdkafka}\n"
        ),
    )
    .unwrap();
    path
}

/// Runs `walrelay <command> --config <path>` and waits for it to exit, at
/// most 60 s (the old behaviour of `run` was to retry PostgreSQL forever).
fn walrelay(command: &str, path: &PathBuf) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_walrelay"))
        .args([command, "--config"])
        .arg(path)
        .env("WALRELAY_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start walrelay");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "walrelay {command} did not stop within 60 s:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (status.code(), text)
}

fn assert_refused(name: &str, librdkafka: &str, key: &str, says: &str) {
    let path = write_config(name, librdkafka);
    for command in ["check", "run"] {
        let (code, output) = walrelay(command, &path);
        assert_eq!(code, Some(2), "{command}: {output}");
        assert!(output.contains(key), "{command}: {output}");
        assert!(output.contains(says), "{command}: {output}");
        assert!(!output.contains(SECRET), "{command}: {output}");
        assert!(
            !output.contains("check kafka.brokers"),
            "{command} blames the brokers: {output}"
        );
    }
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn a_misspelt_secret_property_is_refused_at_start_without_its_value() {
    assert_refused(
        "misspelt",
        &format!("\"sasl.pasword\" = \"{SECRET}\""),
        "walrelay.toml:14:18: kafka.librdkafka.\"sasl.pasword\"",
        "librdkafka has no property named",
    );
}

#[test]
fn a_secret_property_in_the_wrong_case_is_refused_at_start_without_its_value() {
    assert_refused(
        "case",
        &format!("\"SASL.Password\" = \"{SECRET}\""),
        "kafka.librdkafka.\"SASL.Password\"",
        "write \"sasl.password\"",
    );
}

#[test]
fn properties_librdkafka_finds_inconsistent_are_refused_at_start() {
    assert_refused(
        "linger",
        "\"message.timeout.ms\" = 1000",
        "kafka.librdkafka.\"message.timeout.ms\"",
        "`message.timeout.ms` must be greater than `linger.ms`",
    );
}
