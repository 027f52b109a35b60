//! Embeds the git commit the binary is built from (`walrelay --version`).
//!
//! `WALRELAY_GIT_COMMIT` set at build time wins (a container build from a
//! tarball can pass it); else `git rev-parse --short HEAD`; else
//! "unknown". Never fails the build: a source tree without `.git` or
//! without `git` builds as well.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=WALRELAY_GIT_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    let commit = std::env::var("WALRELAY_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    // Build again when HEAD moves: HEAD itself (a checkout) and the branch
    // it points at (a commit). Only files that exist: a missing one would
    // run this script on every build.
    let files = [
        git(&["rev-parse", "--git-path", "HEAD"]),
        git(&["symbolic-ref", "-q", "HEAD"])
            .and_then(|branch| git(&["rev-parse", "--git-path", &branch])),
        git(&["rev-parse", "--git-path", "packed-refs"]),
    ];
    for file in files.into_iter().flatten().map(PathBuf::from) {
        if file.exists() {
            println!("cargo:rerun-if-changed={}", file.display());
        }
    }
    println!("cargo:rustc-env=WALRELAY_GIT_COMMIT={commit}");
}
