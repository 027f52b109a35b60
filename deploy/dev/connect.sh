#!/usr/bin/env bash
# deploy/dev/connect.sh - Kafka Connect + Debezium's PostgreSQL connector on
# one flat classpath, resolved from Maven Central (the machines reach package
# registries only: no Connect/Debezium tarballs). Used by the benchmark's
# Debezium side (deploy/bench/run.sh) and by the Debezium compatibility test
# (tests/it/debezium_compat.rs, issue 10).
#
# Usage: deploy/dev/connect.sh up|env
#
#   up   resolve deploy/bench/connect/pom.xml into
#        .deps/bench/connect-<kafka>-debezium-<debezium>/libs (first time, or
#        when the pom changed; a stamp with the pom's sha256 is written last),
#        check the classes everyone needs are on it, then print on stdout:
#            export WALRELAY_CONNECT_LIBS=...      (the jar directory)
#            export WALRELAY_CONNECT_VERSION=...   (connect-runtime)
#            export WALRELAY_DEBEZIUM_VERSION=...
#            export WALRELAY_APICURIO_CONVERTER_LIBS=...  (Apicurio's Connect
#                converters, deploy/bench/connect/apicurio/pom.xml, less the
#                jars Connect's directory has: add it to the class path)
#        eval "$(deploy/dev/connect.sh up)"
#   env  print the same lines without resolving anything.
#
# Run the worker with
#   java -cp "$WALRELAY_CONNECT_LIBS/*" org.apache.kafka.connect.cli.ConnectStandalone \
#        worker.properties connector.properties
# Progress and errors go to stderr; stdout carries only the env lines.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)
# shellcheck source=deploy/dev/maven.sh
. "$SCRIPT_DIR/maven.sh"
# shellcheck source=deploy/dev/lib.sh
. "$SCRIPT_DIR/lib.sh"
POM="$REPO_ROOT/deploy/bench/connect/pom.xml"

log() { echo "connect.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

pom_prop() { sed -n "s:.*<$1>\\([^<]*\\)</$1>.*:\\1:p" "$POM" | head -n1; }
CONNECT_VERSION=$(pom_prop kafka.version)
DEBEZIUM_VERSION=$(pom_prop debezium.version)
[[ -n $CONNECT_VERSION && -n $DEBEZIUM_VERSION ]] || die "cannot read versions from $POM"
DEPS_DIR="$REPO_ROOT/.deps/bench/connect-$CONNECT_VERSION-debezium-$DEBEZIUM_VERSION"
LIBS_DIR="$DEPS_DIR/libs"
STAMP="$DEPS_DIR/.resolved"            # sha256 of the pom the libs came from, written last
pom_hash() { sha256sum "$POM" | cut -d' ' -f1; }

APICURIO_POM="$REPO_ROOT/deploy/bench/connect/apicurio/pom.xml"
APICURIO_DIR="$DEPS_DIR/apicurio-converter"
APICURIO_STAMP="$DEPS_DIR/.apicurio-resolved"

print_env() {
    echo "export WALRELAY_CONNECT_LIBS=$LIBS_DIR"
    echo "export WALRELAY_CONNECT_VERSION=$CONNECT_VERSION"
    echo "export WALRELAY_DEBEZIUM_VERSION=$DEBEZIUM_VERSION"
    echo "export WALRELAY_APICURIO_CONVERTER_LIBS=$APICURIO_DIR"
}

# Apicurio's converters, beside (not into) the Connect classpath: only the
# jars whose artifact Connect's directory does not hold already (Kafka,
# Jackson, ... stay Connect's versions).
resolve_apicurio() {
    local want
    want="$(sha256sum "$APICURIO_POM" | cut -d' ' -f1)-$(cat "$STAMP")"
    if [[ -d $APICURIO_DIR && -f $APICURIO_STAMP && $(cat "$APICURIO_STAMP") == "$want" ]]; then
        return 0
    fi
    exec 9>"$DEPS_DIR/.apicurio.lock"
    flock 9
    log "resolving Apicurio's Kafka Connect converters into $APICURIO_DIR ..."
    local tmp="$DEPS_DIR/apicurio.tmp.$$"
    rm -rf "$tmp"
    if ! mvn -q -B -s "$REPO_ROOT/deploy/bench/connect/apicurio/settings.xml" -f "$APICURIO_POM" \
            dependency:copy-dependencies -DoutputDirectory="$tmp" -DincludeScope=runtime \
            </dev/null 2>&1 | sed 's/\x1b\[[0-9;]*m//g' >&2; then
        rm -rf "$tmp"
        die "mvn could not resolve $APICURIO_POM (see output above)"
    fi
    local jar base
    for jar in "$tmp"/*.jar; do
        base=$(basename "$jar")
        base=${base%-[0-9]*}
        if compgen -G "$LIBS_DIR/$base-[0-9]*.jar" >/dev/null; then
            rm -f "$jar"
        fi
    done
    [[ -f $tmp/apicurio-registry-utils-converter-2.6.13.Final.jar ]] ||
        die "the converter's jar is not among the resolved ones in $tmp"
    rm -rf "$APICURIO_DIR"
    mv "$tmp" "$APICURIO_DIR"
    echo "$want" >"$APICURIO_STAMP"
}

resolve() {
    if [[ -d $LIBS_DIR && -f $STAMP && $(cat "$STAMP") == "$(pom_hash)" ]]; then
        return 0
    fi
    need_command java openjdk-17-jre-headless "java (a JRE >= 17)"
    need_command python3 python3-minimal
    mkdir -p "$DEPS_DIR"
    # Two resolvers at once (a test and the benchmark) would fight over libs/.
    exec 8>"$DEPS_DIR/.lock"
    flock 8
    if [[ -d $LIBS_DIR && -f $STAMP && $(cat "$STAMP") == "$(pom_hash)" ]]; then
        return 0
    fi
    log "resolving Kafka Connect $CONNECT_VERSION + Debezium $DEBEZIUM_VERSION from Maven into $LIBS_DIR ..."
    local tmp="$DEPS_DIR/libs.tmp.$$"
    maven_copy_deps "$POM" "$tmp" || die "mvn could not resolve $POM (see output above)"
    # The classes the benchmark and the compatibility test cannot do without,
    # checked here rather than discovered as a ClassNotFoundException 20 s
    # into a Connect start.
    if ! python3 - "$tmp" <<'PY' >&2
import sys, zipfile, glob, os
need = {
    "org/apache/kafka/connect/cli/ConnectStandalone.class": None,
    "org/apache/kafka/connect/json/JsonConverter.class": None,
    "io/debezium/connector/postgresql/PostgresConnector.class": None,
    "io/debezium/transforms/outbox/EventRouter.class": None,
    "org/postgresql/Driver.class": None,
}
for jar in sorted(glob.glob(os.path.join(sys.argv[1], "*.jar"))):
    names = set(zipfile.ZipFile(jar).namelist())
    for cls in need:
        if need[cls] is None and cls in names:
            need[cls] = os.path.basename(jar)
missing = [c for c, j in need.items() if j is None]
for c, j in need.items():
    if j: print(f"connect.sh:   {c[:-6].replace('/', '.')}  <- {j}")
if missing:
    print("connect.sh: error: not on the resolved classpath: " + ", ".join(missing))
    sys.exit(1)
PY
    then
        rm -rf "$tmp"
        die "the resolved classpath lacks a required class (see above); fix $POM"
    fi
    rm -rf "$LIBS_DIR"
    mv "$tmp" "$LIBS_DIR"
    pom_hash >"$STAMP"
}

case "${1:-}" in
    up) resolve; resolve_apicurio; print_env ;;
    env) print_env ;;
    *) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
