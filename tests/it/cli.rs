//! The binary's edges, run as a child process: `--help`, `WALRELAY_LOG`,
//! colour codes, and stopping cleanly (exit 0 on SIGTERM, 1 on an error)
//! whatever happened to the reader of stderr.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr};

use support::*;

/// `kafka.shutdown_flush_timeout` in `relay_config` plus room for a busy
/// machine.
const STOP: Duration = Duration::from_secs(30);

/// A valid config whose PostgreSQL and Kafka do not answer (port 1).
fn unreachable_config() -> std::path::PathBuf {
    write_config(
        r#"
[connector]
name = "cli_unreachable"
[postgres]
host = "127.0.0.1"
port = 1
user = "walrelay"
password = "walrelay"
database = "nowhere"
connect_timeout = "2s"
reconnect_backoff_initial = "100ms"
reconnect_backoff_max = "1s"
[kafka]
brokers = "127.0.0.1:1"
[[outbox]]
table = "public.outbox"
"#,
    )
}

/// `walrelay run` with stderr on a pipe we hold, stdout discarded, and
/// NO_COLOR unset (so colour codes would show if the binary chose them).
fn spawn_run(config: &std::path::Path, log: &str) -> (Child, ChildStderr) {
    let mut child = tokio::process::Command::new(walrelay_bin())
        .arg("run")
        .arg("--config")
        .arg(config)
        .env("WALRELAY_LOG", log)
        .env_remove("NO_COLOR")
        .env_remove("WALRELAY_LOG_FORMAT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start walrelay");
    let stderr = child.stderr.take().expect("piped stderr");
    (child, stderr)
}

/// Reads stderr until a line contains `needle`; returns everything read.
async fn read_until(
    stderr: &mut BufReader<ChildStderr>,
    needle: &str,
    timeout: Duration,
) -> String {
    let deadline = Instant::now() + timeout;
    let mut seen = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut line = String::new();
        match tokio::time::timeout(left, stderr.read_line(&mut line)).await {
            Err(_) => panic!("no {needle:?} on stderr within {timeout:?}:\n{seen}"),
            Ok(Ok(0)) => panic!("stderr closed before {needle:?}:\n{seen}"),
            Ok(Ok(_)) => {
                seen.push_str(&line);
                if line.contains(needle) {
                    return seen;
                }
            }
            Ok(Err(e)) => panic!("reading stderr: {e}\n{seen}"),
        }
    }
}

fn sigterm(child: &Child) {
    let pid = child.id().expect("child still running");
    let status = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM {pid}");
}

async fn exit_code(child: &mut Child, timeout: Duration, what: &str) -> Option<i32> {
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(status) => status.expect("wait for walrelay").code(),
        Err(_) => {
            let _ = child.kill().await;
            panic!("walrelay did not exit within {timeout:?} {what}");
        }
    }
}

#[test]
fn help_names_walrelay_log_and_the_exit_codes() {
    for args in [&["--help"][..], &["run", "--help"], &["check", "--help"]] {
        let out = std::process::Command::new(walrelay_bin())
            .args(args)
            .output()
            .expect("walrelay --help");
        assert!(out.status.success(), "{args:?}");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with("WALRELAY_LOG ")),
            "{args:?} does not explain WALRELAY_LOG:\n{help}"
        );
        assert!(help.contains("Exit codes:"), "{args:?}:\n{help}");
        for code in [
            "0  stopped on request",
            "1  stopped on an error",
            "2  invalid configuration",
        ] {
            assert!(help.contains(code), "{args:?} lacks {code:?}:\n{help}");
        }
    }
}

/// Issue 24 (item 16): `run --help` said to use --accept-slot-position
/// "only after reconciling the gap", the opposite of the runbook for a slot
/// ahead of the stored offset (start first, then re-publish the range it
/// names), and named only that one case.
/// `--version` (and `-V`) names the version, the commit it was built from
/// (this checkout's HEAD when built from it with git) and the librdkafka
/// it links.
#[test]
fn version_names_the_commit_and_librdkafka() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    for flag in ["--version", "-V"] {
        let out = std::process::Command::new(walrelay_bin())
            .arg(flag)
            .output()
            .unwrap();
        assert!(out.status.success(), "{flag}");
        let text = String::from_utf8_lossy(&out.stdout);
        let librdkafka = rdkafka::util::get_rdkafka_version().1;
        assert!(
            text.starts_with(&format!("walrelay {} (commit ", env!("CARGO_PKG_VERSION")))
                && text.contains(&format!(", librdkafka {librdkafka})")),
            "{flag}: {text}"
        );
        // build.rs builds again when HEAD moves, so `cargo test` names
        // HEAD; a test binary run by hand after a commit may run a binary
        // of an earlier one: a commit of this history, then.
        let named = text
            .split("(commit ")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .unwrap_or_default();
        match &commit {
            Some(head) if named != head => {
                let ancestor = std::process::Command::new("git")
                    .args(["merge-base", "--is-ancestor", named, "HEAD"])
                    .current_dir(env!("CARGO_MANIFEST_DIR"))
                    .status()
                    .unwrap();
                assert!(
                    ancestor.success(),
                    "{flag}: {text}: {named} is not HEAD ({head}) nor a commit before it"
                );
            }
            Some(_) => {}
            None => assert_eq!(named, "unknown", "{flag}: {text}"),
        }
    }
}

/// `walrelay check <args>` to its exit within 60 s: the code, stdout and
/// stderr.
fn check_output(args: &[&str]) -> (Option<i32>, String, String) {
    let mut child = std::process::Command::new(walrelay_bin())
        .arg("check")
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("WALRELAY_LOG_FORMAT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("walrelay check {args:?} still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `check --offline` checks the file without contacting PostgreSQL or
/// Kafka (here both unreachable): exit 0 at once, the report saying it was
/// offline; a bad file is exit 2 as without `--offline`.
#[test]
fn check_offline_checks_the_file_without_connecting() {
    let config = unreachable_config();
    let path = config.to_str().unwrap();
    let started = Instant::now();
    let (code, stdout, stderr) = check_output(&["--offline", "--config", path]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(stdout.starts_with("ok    config: "), "{stdout}");
    assert!(
        stdout.contains("checks passed (offline: PostgreSQL and Kafka not contacted)"),
        "{stdout}"
    );
    assert!(!stdout.contains("postgres connection"), "{stdout}");
    let bad = write_config(
        &std::fs::read_to_string(&config)
            .unwrap()
            .replace("table = ", "tabel = "),
    );
    let (code, _, stderr) = check_output(&["--offline", "--config", bad.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("did you mean `table`?"), "{stderr}");
}

/// `check --json`: one JSON object on stdout in the documented shape (ok,
/// offline, counts, one object per check), online and offline, and for a
/// file that does not load (exit 2) each problem with file, key, line and
/// column.
#[test]
fn check_json_is_one_object_with_each_check() {
    let config = unreachable_config();
    let path = config.to_str().unwrap();
    let (code, stdout, stderr) = check_output(&["--offline", "--json", "--config", path]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["offline"], true, "{report}");
    assert_eq!(report["failed"], 0, "{report}");
    let checks = report["checks"].as_array().unwrap();
    assert_eq!(report["passed"], checks.len(), "{report}");
    assert_eq!(checks[0]["name"], "config", "{report}");
    assert_eq!(checks[0]["status"], "ok", "{report}");
    assert!(checks[0]["detail"].as_str().unwrap().ends_with("is valid"));

    // Online, against nothing: the connection fails, exit 1.
    let (code, stdout, stderr) = check_output(&["--json", "--config", path]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["ok"], false, "{report}");
    assert_eq!(report["offline"], false, "{report}");
    let failed: Vec<&serde_json::Value> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .collect();
    assert_eq!(report["failed"], failed.len(), "{report}");
    assert!(
        failed.iter().any(|c| c["name"] == "postgres connection"
            && c["problem"].is_string()
            && c["fix"].is_string()),
        "{report}"
    );

    let bad = write_config(
        &std::fs::read_to_string(&config)
            .unwrap()
            .replace("table = ", "tabel = "),
    );
    let (code, stdout, stderr) =
        check_output(&["--offline", "--json", "--config", bad.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["ok"], false, "{report}");
    let problem = &report["checks"][0];
    assert_eq!(problem["status"], "fail", "{report}");
    assert_eq!(problem["key"], "outbox[0].tabel", "{report}");
    assert_eq!(problem["line"], 16, "{report}");
    assert_eq!(problem["column"], 1, "{report}");
    assert!(
        problem["problem"]
            .as_str()
            .unwrap()
            .contains("did you mean `table`?"),
        "{report}"
    );
}

#[test]
fn run_help_says_what_accept_slot_position_overrides_and_in_which_order() {
    let out = std::process::Command::new(walrelay_bin())
        .args(["run", "--help"])
        .output()
        .expect("walrelay run --help");
    let help = String::from_utf8_lossy(&out.stdout);
    let (_, text) = help
        .split_once("--accept-slot-position")
        .expect("the option is listed");
    let text = text.split("-h, --help").next().unwrap_or_default();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for expected in [
        "the slot is ahead of it, or the offset names another system, slot or timeline",
        "A lost slot is not accepted: drop it first",
        "start with this first, then re-publish the range it names",
    ] {
        assert!(text.contains(expected), "{expected:?} not in: {text}");
    }
    assert!(!text.contains("only after reconciling"), "{text}");
}

#[test]
fn a_bad_walrelay_log_is_refused_with_exit_2_naming_it() {
    let config = unreachable_config();
    for bad in ["info,walrelay=verbose", "debg"] {
        let (code, stderr) = run_to_exit(
            &["check", "--config", config.to_str().unwrap()],
            &[("WALRELAY_LOG", bad)],
        );
        assert_eq!(code, Some(2), "WALRELAY_LOG={bad:?}; stderr:\n{stderr}");
        assert!(
            stderr.starts_with("walrelay: connector=cli_unreachable: WALRELAY_LOG=")
                && stderr.contains(bad),
            "WALRELAY_LOG={bad:?}; stderr:\n{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "one clear line:\n{stderr}");
    }
}

#[tokio::test]
async fn logs_to_a_pipe_carry_no_colour_codes() {
    let config = unreachable_config();
    let (mut child, stderr) = spawn_run(&config, "info");
    let mut stderr = BufReader::new(stderr);
    let seen = read_until(&mut stderr, "will retry", START).await;
    assert!(
        !seen.contains('\x1b'),
        "colour codes in a pipe (NO_COLOR unset):\n{seen:?}"
    );
    sigterm(&child);
    let code = exit_code(&mut child, STOP, "after SIGTERM").await;
    assert_eq!(code, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_run_after_the_stderr_reader_is_gone() {
    require_kafka();
    let db = TestDb::new("clipipe").await;
    db.create_outbox("outbox").await;
    let names = Names::new("clipipe");
    let config = write_config(&relay_config(&db, &names, "", ""));
    let (mut child, stderr) = spawn_run(&config, "info,walrelay=debug");
    let mut stderr = BufReader::new(stderr);
    read_until(&mut stderr, "streaming", START).await;
    // The log reader goes away (a log shipper restarting): every later
    // write to stderr fails with EPIPE (Rust ignores SIGPIPE).
    drop(stderr);
    sigterm(&child);
    let code = exit_code(&mut child, STOP, "after SIGTERM with stderr closed").await;
    assert_eq!(
        code,
        Some(0),
        "exit code after SIGTERM (None: killed by a signal)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_with_the_stderr_reader_gone_still_exits_1() {
    require_kafka();
    let db = TestDb::new("clierr").await;
    db.create_outbox("outbox").await;
    let names = Names::new("clierr");
    let config = write_config(&relay_config(&db, &names, "on_update = \"fail\"", ""));
    let (mut child, stderr) = spawn_run(&config, "info");
    let mut stderr = BufReader::new(stderr);
    read_until(&mut stderr, "streaming", START).await;
    drop(stderr);
    db.client
        .batch_execute(
            "INSERT INTO outbox VALUES (gen_random_uuid(), 'order', 'a', 'Created', '{}');
             UPDATE outbox SET type = 'Changed';",
        )
        .await
        .expect("insert and update");
    let code = exit_code(
        &mut child,
        STOP,
        "after an update with on_update = \"fail\"",
    )
    .await;
    assert_eq!(code, Some(1), "exit code (101 is a panic)");
}

/// Runs `walrelay <args>` to its exit (within `START`), NO_COLOR unset;
/// returns the exit code and stderr.
fn run_to_exit(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut command = std::process::Command::new(walrelay_bin());
    command
        .args(args)
        .env_remove("NO_COLOR")
        .env_remove("WALRELAY_LOG_FORMAT")
        .env_remove("WALRELAY_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("start walrelay");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    let deadline = Instant::now() + START;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("walrelay {args:?} still running after {START:?}:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status.code(), stderr)
}

/// Every line of `stderr` is a JSON object; returns them.
fn json_lines(stderr: &str) -> Vec<serde_json::Value> {
    assert!(!stderr.trim().is_empty(), "nothing on stderr");
    stderr
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {line}\nall of stderr:\n{stderr}"));
            assert!(value.is_object(), "not an object: {line}");
            value
        })
        .collect()
}

/// Issue 11: in JSON mode every line is JSON, the configuration's and the
/// log filter's errors too, and the mode can be chosen in the TOML file
/// (`[log] format`), which the file's own errors then follow.
#[test]
fn json_logs_are_json_on_every_line_errors_included() {
    // A config that asks for JSON and is wrong elsewhere.
    let bad = write_config(
        "[log]\nformat = \"json\"\n[connector]\nname = \"c\"\n[postgres]\ndatabase = \"d\"\n\
         [kafka]\nbrokers = \"k:9092\"\nlinger = \"soon\"\n[[outbox]]\ntable = \"outbox\"\n",
    );
    let (code, stderr) = run_to_exit(&["check", "--config", bad.to_str().unwrap()], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    let lines = json_lines(&stderr);
    assert_eq!(lines.len(), 1, "one error event:\n{stderr}");
    assert_eq!(lines[0]["level"], "ERROR", "{stderr}");
    let error = lines[0]["fields"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("kafka.linger"), "names the key: {stderr}");

    // --log-format json wins over a file that says nothing, for a refused
    // WALRELAY_LOG too.
    let config = unreachable_config();
    let (code, stderr) = run_to_exit(
        &[
            "--log-format",
            "json",
            "check",
            "--config",
            config.to_str().unwrap(),
        ],
        &[("WALRELAY_LOG", "debg")],
    );
    assert_eq!(code, Some(2), "{stderr}");
    let lines = json_lines(&stderr);
    assert_eq!(lines.len(), 1, "one error event:\n{stderr}");
    assert!(
        lines[0]["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("WALRELAY_LOG")),
        "{stderr}"
    );

    // And the command line wins over the file.
    let (code, stderr) = run_to_exit(
        &[
            "--log-format",
            "text",
            "check",
            "--config",
            bad.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with("walrelay: invalid configuration\n") && stderr.contains("kafka.linger"),
        "{stderr}"
    );
}

/// Issue 11: the error that stops the connector is written once (it was
/// twice), and in JSON mode as an event whose fields name the table and
/// LSN, with every other line JSON too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stopping_error_is_one_line_with_table_and_lsn_fields() {
    require_kafka();
    for json in [false, true] {
        let db = TestDb::new("clistop").await;
        db.create_outbox("outbox").await;
        let names = Names::new("clistop");
        let log = if json { "[log]\nformat = \"json\"" } else { "" };
        let config = write_config(&relay_config(&db, &names, "on_update = \"fail\"", log));
        let (mut child, stderr) = spawn_run(&config, "info");
        let mut stderr = BufReader::new(stderr);
        let mut seen = read_until(&mut stderr, "streaming", START).await;
        db.client
            .batch_execute(
                "INSERT INTO outbox VALUES (gen_random_uuid(), 'order', 'a', 'Created', '{}');
                 UPDATE outbox SET type = 'Changed';",
            )
            .await
            .expect("insert and update");
        let code = exit_code(
            &mut child,
            STOP,
            "after an update with on_update = \"fail\"",
        )
        .await;
        assert_eq!(code, Some(1), "exit code");
        tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut seen)
            .await
            .expect("read stderr");
        let mentions = seen.lines().filter(|l| l.contains("on_update")).count();
        assert_eq!(mentions, 1, "the error once (json: {json}):\n{seen}");
        if json {
            let lines = json_lines(&seen);
            let last = lines.last().unwrap();
            assert_eq!(last["level"], "ERROR", "{seen}");
            assert_eq!(last["fields"]["message"], "walrelay stopped", "{seen}");
            assert_eq!(last["fields"]["table"], "public.outbox", "{seen}");
            assert!(
                last["fields"]["lsn"]
                    .as_str()
                    .is_some_and(|l| l.contains('/')),
                "{seen}"
            );
        } else {
            assert!(
                seen.lines().last().unwrap().starts_with("walrelay: "),
                "{seen}"
            );
        }
    }
}

/// Issue 24 (item 14): several sidecars share one log pipeline, so every line
/// names its connector — text and JSON, `run`, `check`, `status` and
/// `republish`, lines from spawned tasks and from librdkafka's own threads
/// (its debug log, through the log callback) included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_log_line_names_the_connector() {
    require_kafka();
    let db = TestDb::new("clinamed").await;
    db.create_outbox("outbox").await;
    let names = Names::new("clinamed");
    let name = &names.connector;
    // librdkafka's debug lines reach the log at trace level, from its threads.
    let filter = "debug,walrelay::sink=trace";
    let carries_name = |json: bool, line: &str| {
        if !json {
            return line.contains(&format!("connector={name}"));
        }
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        value["spans"]
            .as_array()
            .is_some_and(|spans| spans.iter().any(|s| s["connector"] == name.as_str()))
    };
    for json in [false, true] {
        let log = if json { "[log]\nformat = \"json\"" } else { "" };
        let config = write_config(&relay_config(
            &db,
            &names,
            "",
            &format!("{log}\n[kafka.librdkafka]\n\"debug\" = \"broker\"\n"),
        ));
        let (mut child, stderr) = spawn_run(&config, filter);
        let mut stderr = BufReader::new(stderr);
        let mut seen = read_until(&mut stderr, "streaming", START).await;
        sigterm(&child);
        let code = exit_code(&mut child, STOP, "after SIGTERM").await;
        assert_eq!(code, Some(0), "{seen}");
        tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut seen)
            .await
            .expect("read stderr");
        assert!(
            seen.lines().any(|l| l.contains("librdkafka: ")),
            "no line from librdkafka's threads (json: {json}):\n{seen}"
        );
        for line in seen.lines() {
            assert!(
                carries_name(json, line),
                "run (json: {json}): a line without connector {name}: {line}"
            );
        }

        let path = config.to_str().unwrap();
        for args in [
            &["check", "--config", path][..],
            &["status", "--config", path],
            &[
                "republish",
                "--config",
                path,
                "--where",
                "true",
                "--dry-run",
            ],
        ] {
            let (_, stderr) = run_to_exit(args, &[("WALRELAY_LOG", filter)]);
            assert!(
                !stderr.trim().is_empty(),
                "{args:?} logged nothing at {filter}"
            );
            for line in stderr.lines() {
                assert!(
                    carries_name(json, line),
                    "{args:?} (json: {json}): a line without connector {name}: {line}\n{stderr}"
                );
            }
        }
    }
}

/// The string literals of a Rust source text that are not raw strings, as
/// the compiler reads them (`\` at a line's end joins the next line without
/// its leading blanks; `\n`, `\t`, `\"` and `\\` read), with the line each
/// starts on. Comments and char literals are skipped; enough of Rust's
/// lexing for this crate's sources.
fn string_literals(text: &str) -> Vec<(usize, String)> {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < c.len() {
        match (at(i), at(i + 1)) {
            ('\n', _) => {
                line += 1;
                i += 1;
            }
            ('/', '/') => {
                while i < c.len() && at(i) != '\n' {
                    i += 1;
                }
            }
            ('/', '*') => {
                while i < c.len() && !(at(i) == '*' && at(i + 1) == '/') {
                    line += usize::from(at(i) == '\n');
                    i += 1;
                }
                i += 2;
            }
            ('r', '"' | '#') if i == 0 || !ident(at(i - 1)) => {
                let mut j = i + 1;
                let mut hashes = 0;
                while at(j) == '#' {
                    hashes += 1;
                    j += 1;
                }
                if at(j) != '"' {
                    i += 1;
                    continue;
                }
                j += 1;
                loop {
                    if j >= c.len() {
                        break;
                    }
                    if at(j) == '"' && (1..=hashes).all(|k| at(j + k) == '#') {
                        j += 1 + hashes;
                        break;
                    }
                    line += usize::from(at(j) == '\n');
                    j += 1;
                }
                i = j;
            }
            ('\'', '\\') => {
                // '\n', '\'', '\u{…}'
                let mut j = i + 3;
                while j < c.len() && at(j) != '\'' {
                    j += 1;
                }
                i = j + 1;
            }
            ('\'', _) if at(i + 2) == '\'' => i += 3,
            ('"', _) => {
                let start = line;
                let mut s = String::new();
                let mut j = i + 1;
                while j < c.len() && at(j) != '"' {
                    if at(j) == '\\' {
                        match at(j + 1) {
                            '\n' => {
                                line += 1;
                                j += 2;
                                while at(j).is_whitespace() {
                                    line += usize::from(at(j) == '\n');
                                    j += 1;
                                }
                                continue;
                            }
                            'n' => s.push('\n'),
                            't' => s.push('\t'),
                            other => s.push(other),
                        }
                        j += 2;
                    } else {
                        line += usize::from(at(j) == '\n');
                        s.push(at(j));
                        j += 1;
                    }
                }
                out.push((start, s));
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// No message has a stray run of spaces inside (issue 40: two had one, a
/// literal joined by rustfmt across lines): in every string literal of
/// src/, no line holds two or more spaces between other characters —
/// except where columns are aligned on purpose (status's table, check's
/// report prefixes, the help text). Test code is left out.
#[test]
fn messages_have_no_stray_runs_of_spaces() {
    let aligned: [(&str, &[&str]); 3] = [
        ("src/commands/status.rs", &[""]),
        ("src/commands/check.rs", &["ok    ", "warn  ", "FAIL  "]),
        ("src/main.rs", &["Environment:"]),
    ];
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dirs = vec![root.join("src")];
    let mut found = Vec::new();
    let mut literals = 0;
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" {
                    dirs.push(path);
                }
                continue;
            }
            if !name.ends_with(".rs") || name == "tests.rs" || name.ends_with("_tests.rs") {
                continue;
            }
            let relative = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            // Inline test modules end the file in this crate.
            let text = text
                .split("#[cfg(test)]\nmod tests {")
                .next()
                .unwrap_or_default();
            let exempt = aligned
                .iter()
                .find(|(file, _)| *file == relative)
                .map_or(&[][..], |(_, prefixes)| *prefixes);
            for (line, literal) in string_literals(text) {
                literals += 1;
                if exempt.iter().any(|p| literal.starts_with(p)) {
                    continue;
                }
                if literal
                    .split('\n')
                    .any(|l| l.trim_start().trim_end().contains("  "))
                {
                    found.push(format!("{relative}:{line}: {literal:?}"));
                }
            }
        }
    }
    assert!(literals > 1000, "only {literals} literals read");
    assert!(found.is_empty(), "runs of spaces:\n{}", found.join("\n"));
}

#[test]
fn string_literals_are_read_as_the_compiler_reads_them() {
    let text = "let a = \"one \\\n     two\"; // \"not  this\"\nlet c = '\"'; let r = r#\"a  b\"#;\n\
                let d = \"x\\\"  y\\n  z\"; let e: &'static str = \"q\";";
    let found = string_literals(text);
    assert_eq!(
        found,
        vec![
            (1, "one two".to_owned()),
            (4, "x\"  y\n  z".to_owned()),
            (4, "q".to_owned()),
        ]
    );
}
