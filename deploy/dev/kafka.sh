#!/usr/bin/env bash
# Dev/test Apache Kafka for walrelay: one KRaft node (broker + controller)
# on 127.0.0.1:19092, run straight from jars resolved out of Maven Central.
#
# Usage: [KAFKA_PORT=<port>] deploy/dev/kafka.sh up|down|start|stop|restart|status|env
#        [KAFKA_PORT=<port>] deploy/dev/kafka.sh quota <client-id> <bytes-per-second|none>
#
#   up       resolve jars (first time), format storage (first time), start
#            the broker if it is not running, wait until it answers a
#            metadata request, then print `export ...` lines on stdout:
#                eval "$(deploy/dev/kafka.sh up)"
#            Idempotent: when the broker is already up it only prints env.
#   down     stop the broker and delete all of its state (topics, offsets).
#   stop     stop the broker but KEEP its state (for outage tests).
#   start    start it again on the same data (same as `up`).
#   restart  stop + start, data kept.
#   status   exit 0 iff the broker answers metadata.
#   quota    throttle one client id's produce rate on the running broker (a
#            Kafka client quota, `producer_byte_rate`), or lift it (`none`):
#            makes a connector lag behind its database for real, in tests.
#   env      print the `export ...` lines (does not check anything).
#
# KAFKA_PORT (default 19092) runs a second, independent broker beside the
# default one, e.g. for the fault soak (deploy/soak.sh), which stops and starts
# its broker and must not disturb anyone else's: the controller listens on
# KAFKA_PORT+1 and the state lives in .state/kafka-<port>/ (lock
# .state/kafka-<port>.lock). Unset or 19092 means exactly the default broker.
#
# Why jars from Maven: this machine reaches package registries only, so the
# Kafka tarball from apache.org is not an option. deploy/dev/kafka/pom.xml
# pins the broker; `mvn dependency:copy-dependencies` gives us the same
# libs/ directory the tarball would have, and we run its main classes with
# plain `java -cp`.
#
# Layout (both git-ignored):
#   .deps/kafka/<version>/libs/   resolved jars (cached; ~/.m2 caches too)
#   .state/kafka/                 server.properties, data/, logs/, pid file
#
# Secured listeners (issue 12), beside PLAINTEXT on the same node:
#   PORT+2  SASL_SSL, SCRAM-SHA-512, TLS server certificate for 127.0.0.1 /
#           localhost from a throwaway CA this script makes with openssl
#   PORT+3  SSL with ssl.client.auth=required (mutual TLS)
#   PORT+4  SSL whose certificate names another host (wrong.invalid), for
#           the host-name verification failure test
# Keystores are PEM files (ssl.keystore.type=PEM), so no keytool is needed;
# everything lives in .state/<kafka>/tls/ (WALRELAY_KAFKA_TLS_DIR). A
# StandardAuthorizer guards the secured listeners; PLAINTEXT (principal
# User:ANONYMOUS, also the controller's and the broker's own) is a super
# user, so it works exactly as without an authorizer. SCRAM users (walrelay,
# super user; walrelay-acl with only the ACLs walrelay needs; walrelay-nowrite
# without topic WRITE) are created at format time (--add-scram), or, for a
# state formatted by an older kafka.sh, through the admin API after start.
#
# Progress and errors go to stderr; stdout carries only the env lines.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)
# shellcheck source=deploy/dev/maven.sh
. "$SCRIPT_DIR/maven.sh"
SELF="deploy/dev/kafka.sh"
# shellcheck source=deploy/dev/lib.sh
. "$SCRIPT_DIR/lib.sh"
CONF_DIR="$SCRIPT_DIR/kafka"
POM="$CONF_DIR/pom.xml"

# The pom is the single source of truth for the version, so the two cannot
# drift apart.
KAFKA_VERSION=$(sed -n 's:.*<kafka\.version>\([^<]*\)</kafka\.version>.*:\1:p' "$POM" | head -n1)
if [[ -z "$KAFKA_VERSION" ]]; then
    echo "kafka.sh: cannot read <kafka.version> from $POM" >&2
    exit 1
fi

HOST=127.0.0.1
DEFAULT_PORT=19092
PORT=${KAFKA_PORT:-$DEFAULT_PORT}
if ! [[ "$PORT" =~ ^[0-9]+$ ]] || ((PORT < 1024 || PORT > 65534)); then
    echo "kafka.sh: KAFKA_PORT='$PORT' is not a port number in 1024..65534" >&2
    exit 1
fi
CONTROLLER_PORT=$((PORT + 1))
SASL_SSL_PORT=$((PORT + 2))
MTLS_PORT=$((PORT + 3))
WRONG_HOST_PORT=$((PORT + 4))
# The default broker keeps its historical state dir; others get their own.
if ((PORT == DEFAULT_PORT)); then
    STATE_NAME=kafka
else
    STATE_NAME=kafka-$PORT
    SELF="KAFKA_PORT=$PORT $SELF"
fi
BROKERS="$HOST:$PORT"
# Fixed cluster id (base64url of 16 bytes, as `kafka-storage random-uuid`
# prints) so formatting needs no extra JVM start. Fine for a throwaway node.
CLUSTER_ID="d2FscmVsYXktZGV2LWthZg"

DEPS_DIR="$REPO_ROOT/.deps/kafka/$KAFKA_VERSION"
LIBS_DIR="$DEPS_DIR/libs"
LIBS_STAMP="$DEPS_DIR/.resolved"          # holds the sha256 of the pom used
STATE_DIR="$REPO_ROOT/.state/$STATE_NAME"
DATA_DIR="$STATE_DIR/data"
LOG_DIR="$STATE_DIR/logs"
SERVER_PROPS="$STATE_DIR/server.properties"
PID_FILE="$STATE_DIR/kafka.pid"
JVM_OUT="$STATE_DIR/jvm.out"              # JVM stdout/stderr (crashes, GC)
SERVER_LOG="$LOG_DIR/server.log"          # log4j2 output, see log4j2.properties
# Outside STATE_DIR because `down` deletes STATE_DIR while holding it.
LOCK_FILE="$REPO_ROOT/.state/$STATE_NAME.lock"
TLS_DIR="$STATE_DIR/tls"
# Written once the SCRAM users and ACLs exist (they live in the metadata log
# under DATA_DIR, so the marker does too and `down` removes both).
# v2: walrelay-acl may also use transactional ids (exactly_once); a state
# provisioned as v1 gets the new ACL on the next `up`.
SECURITY_MARKER="$DATA_DIR/walrelay-security-v2"

# Dev-only credentials (a throwaway broker on loopback).
SCRAM_USER=walrelay
SCRAM_PASSWORD=walrelay-dev-scram
ACL_USER=walrelay-acl
ACL_PASSWORD=walrelay-dev-acl
NOWRITE_USER=walrelay-nowrite
NOWRITE_PASSWORD=walrelay-dev-nowrite
# walrelay-acl may use topics whose names start with these prefixes only.
ACL_TOPIC_PREFIX=acl-events-
ACL_OFFSETS_PREFIX=acl-offsets-
# ... and transactional ids with this prefix (walrelay-<connector.name>; the
# tests' connectors of walrelay-acl are named acl-…). walrelay-nowrite may use
# none: the test of a missing TransactionalId ACL.
ACL_TXN_PREFIX=walrelay-acl-
CLIENT_KEY_PASSWORD=walrelay-dev-keypass
# The mutual-TLS client's principal (the certificate subject, Kafka's default
# SSL principal mapping).
MTLS_PRINCIPAL="User:CN=walrelay-client"

# A broker starts in ~5 s on an idle machine but took 41 s while CI's four
# test lanes kept both cores busy (and a restart in tests/it/kafka_outage.rs
# failed there, most likely on the old 60 s): a slow start is not a broken
# one, and the wait says every 5 s what it waits for.
READY_TIMEOUT=${WALRELAY_KAFKA_READY_TIMEOUT:-180}  # seconds
STOP_TIMEOUT=${WALRELAY_KAFKA_STOP_TIMEOUT:-20}     # seconds before SIGKILL

log() { echo "kafka.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

print_env() {
    echo "export WALRELAY_KAFKA_BROKERS=$BROKERS"
    echo "export WALRELAY_KAFKA_VERSION=$KAFKA_VERSION"
    echo "export WALRELAY_KAFKA_SASL_SSL_BROKERS=$HOST:$SASL_SSL_PORT"
    echo "export WALRELAY_KAFKA_MTLS_BROKERS=$HOST:$MTLS_PORT"
    echo "export WALRELAY_KAFKA_WRONG_HOST_BROKERS=$HOST:$WRONG_HOST_PORT"
    echo "export WALRELAY_KAFKA_TLS_DIR=$TLS_DIR"
    echo "export WALRELAY_KAFKA_SCRAM_USER=$SCRAM_USER"
    echo "export WALRELAY_KAFKA_SCRAM_PASSWORD=$SCRAM_PASSWORD"
    echo "export WALRELAY_KAFKA_ACL_USER=$ACL_USER"
    echo "export WALRELAY_KAFKA_ACL_PASSWORD=$ACL_PASSWORD"
    echo "export WALRELAY_KAFKA_NOWRITE_USER=$NOWRITE_USER"
    echo "export WALRELAY_KAFKA_NOWRITE_PASSWORD=$NOWRITE_PASSWORD"
    echo "export WALRELAY_KAFKA_ACL_TOPIC_PREFIX=$ACL_TOPIC_PREFIX"
    echo "export WALRELAY_KAFKA_ACL_OFFSETS_PREFIX=$ACL_OFFSETS_PREFIX"
    echo "export WALRELAY_KAFKA_ACL_TXN_PREFIX=$ACL_TXN_PREFIX"
    echo "export WALRELAY_KAFKA_CLIENT_KEY_PASSWORD=$CLIENT_KEY_PASSWORD"
}

# Serialise concurrent invocations (parallel test jobs calling `up`), so two
# of them never both format or both start a broker.
take_lock() {
    mkdir -p "$(dirname "$LOCK_FILE")"
    exec 9>"$LOCK_FILE"
    if ! flock -w 120 9; then
        die "timed out waiting for $LOCK_FILE (another kafka.sh still running?)"
    fi
}

require_java() {
    need_command java openjdk-17-jre-headless "java (a JRE >= 17)"
}

# ---------------------------------------------------------------------------
# Jars
# ---------------------------------------------------------------------------

pom_hash() { sha256sum "$POM" | cut -d' ' -f1; }

# Resolve the broker classpath once. The stamp (pom hash) is written last, so
# an interrupted download or an edited pom leads to a fresh resolve instead of
# a half-filled or stale libs dir.
ensure_libs() {
    if [[ -d "$LIBS_DIR" && -f "$LIBS_STAMP" && "$(cat "$LIBS_STAMP")" == "$(pom_hash)" ]]; then
        return 0
    fi
    log "resolving Kafka $KAFKA_VERSION jars from Maven into $LIBS_DIR (first run only) ..."
    local tmp="$DEPS_DIR/libs.tmp.$$"
    maven_copy_deps "$POM" "$tmp" ||
        die "mvn could not resolve org.apache.kafka:kafka_2.13:$KAFKA_VERSION (see output above)"
    rm -rf "$LIBS_DIR"
    mv "$tmp" "$LIBS_DIR"
    pom_hash >"$LIBS_STAMP"
}

# ---------------------------------------------------------------------------
# kcat (readiness probe)
# ---------------------------------------------------------------------------

# Debian's kcat answers a metadata request in ~10 ms; a JVM-based probe costs
# a second or more per attempt. Installed on demand (root only).
ensure_kcat() {
    command -v kcat >/dev/null 2>&1 && return 0
    if [[ $(id -u) -ne 0 ]]; then
        log "kcat not installed and not root; probing with the (slower) Kafka Java tools instead"
        log "  (install it with: sudo apt-get install -y kcat)"
        return 0
    fi
    apt_install_package kcat kcat
}

# Succeeds iff the broker returns metadata listing at least one broker.
# No -t <topic>: with auto.create.topics.enable=true a metadata request for a
# named topic may create that topic, which tests listing topics would see.
probe() {
    # Cheap TCP check first: kcat waits out its whole metadata timeout when
    # nothing listens, which would add seconds to every startup poll.
    port_in_use "$PORT" || return 1
    if command -v kcat >/dev/null 2>&1; then
        local out
        out=$(timeout 10 kcat -b "$BROKERS" -L -m 3 2>/dev/null) || return 1
        [[ "$out" == *" 1 brokers:"* ]]
    elif [[ -d "$LIBS_DIR" ]]; then
        # No log4j2 config given: log4j's default only prints errors, to the
        # stderr we discard.
        timeout 30 java -cp "$LIBS_DIR/*" \
            org.apache.kafka.tools.TopicCommand --bootstrap-server "$BROKERS" --list \
            >/dev/null 2>&1 </dev/null
    else
        return 1
    fi
}

# ---------------------------------------------------------------------------
# Process bookkeeping
# ---------------------------------------------------------------------------

# True if $1 is a live process running OUR broker (guards against pid reuse
# after a reboot or a crash leaving a stale pid file behind).
is_our_broker() {
    local pid=$1 cmdline
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ "$cmdline" == *kafka.Kafka* && "$cmdline" == *"$SERVER_PROPS"* ]]
}

# Prints the pid of the running broker, or nothing. Cleans a stale pid file.
running_pid() {
    local pid=""
    if [[ -f "$PID_FILE" ]]; then
        pid=$(cat "$PID_FILE" 2>/dev/null || true)
        if is_our_broker "$pid"; then
            echo "$pid"
            return 0
        fi
        log "removing stale pid file (pid '${pid}' is not our broker)"
        rm -f "$PID_FILE"
    fi
    # The pid file can be lost (e.g. someone rm -rf'd .state by hand while the
    # broker ran). Find our broker by its exact server.properties path, so we
    # never touch anyone else's Kafka.
    local f p
    # One grep over all cmdlines (NUL-separated, hence -a) instead of a fork
    # per process; is_our_broker then checks each candidate properly.
    for f in $(grep -laF -- "$SERVER_PROPS" /proc/[0-9]*/cmdline 2>/dev/null || true); do
        p=${f#/proc/}
        p=${p%/cmdline}
        if is_our_broker "$p"; then
            [[ -d "$STATE_DIR" ]] && echo "$p" >"$PID_FILE"
            echo "$p"
            return 0
        fi
    done
    return 0
}

# Prints "<pid> <repo root> <version>" of a broker that kafka.sh started from
# ANOTHER checkout of walrelay on this machine (a second clone or worktree),
# if there is one. Such a broker holds our ports; we can reuse it but must not
# stop it behind its owner's back.
foreign_broker() {
    local f p cmd props root ver
    for f in $(grep -laF -- "kafka.Kafka" /proc/[0-9]*/cmdline 2>/dev/null || true); do
        p=${f#/proc/}
        p=${p%/cmdline}
        cmd=$(tr '\0' '\n' <"$f" 2>/dev/null) || continue
        [[ "$cmd" == *$'\n'kafka.Kafka$'\n'* ]] || continue
        props=$(grep -m1 "/\\.state/$STATE_NAME/server\\.properties\$" <<<"$cmd") || continue
        [[ "$props" == "$SERVER_PROPS" ]] && continue
        root=${props%/.state/"$STATE_NAME"/server.properties}
        ver=$(sed -n 's:.*/\.deps/kafka/\([^/]*\)/libs/\*$:\1:p' <<<"$cmd" | head -n1)
        echo "$p $root ${ver:-unknown}"
        return 0
    done
}

port_in_use() {
    # bash's /dev/tcp: no dependency on ss/netstat/nc.
    timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

show_log_tail() {
    local f
    for f in "$JVM_OUT" "$SERVER_LOG"; do
        if [[ -s "$f" ]]; then
            log "---- last 40 lines of $f ----"
            tail -n 40 "$f" >&2
        fi
    done
}

# ---------------------------------------------------------------------------
# TLS material (throwaway CA, PEM files only)
# ---------------------------------------------------------------------------

# Issues $1.key/$1.pem in the current directory, signed by CA $2, subject $3,
# with the X.509v3 extensions in $4 (one per line).
issue_certificate() {
    local name=$1 ca=$2 subject=$3 extensions=$4
    openssl req -new -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" \
        -subj "$subject" 2>/dev/null
    printf '%s\n' "$extensions" >"$name.ext"
    openssl x509 -req -in "$name.csr" -CA "$ca.pem" -CAkey "$ca.key" -CAcreateserial \
        -days 3650 -sha256 -extfile "$name.ext" -out "$name.pem" 2>/dev/null
    rm -f "$name.csr" "$name.ext"
}

# Makes everything the secured listeners and the tests need, once per state
# dir (a `.complete` stamp written last, so an interrupted run starts over):
#   ca.pem                   the dev CA (clients trust it: ssl_ca)
#   server-keystore.pem      key + certificate for 127.0.0.1 and localhost
#   wrong-host-keystore.pem  key + certificate for wrong.invalid only
#   client.pem, client.key   client certificate (CN=walrelay-client), dev CA
#   client-encrypted.key     the same key, encrypted (CLIENT_KEY_PASSWORD)
#   other-ca.pem             a CA the broker does not know
#   rogue-client.pem/.key    CN=walrelay-client, but signed by other-ca
ensure_certificates() {
    [[ -f "$TLS_DIR/.complete" ]] && return 0
    need_command openssl openssl
    log "making a throwaway CA and certificates in $TLS_DIR ..."
    local tmp="$TLS_DIR.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    (
        cd "$tmp"
        local ca
        for ca in ca other-ca; do
            openssl req -x509 -newkey rsa:2048 -nodes -keyout "$ca.key" -out "$ca.pem" \
                -days 3650 -sha256 -subj "/CN=walrelay dev $ca" \
                -addext "basicConstraints=critical,CA:TRUE" \
                -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
        done
        issue_certificate server ca "/CN=localhost" \
            "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
        issue_certificate wrong-host ca "/CN=wrong.invalid" \
            "subjectAltName=DNS:wrong.invalid
extendedKeyUsage=serverAuth"
        issue_certificate client ca "/CN=walrelay-client" "extendedKeyUsage=clientAuth"
        issue_certificate rogue-client other-ca "/CN=walrelay-client" "extendedKeyUsage=clientAuth"
        # Kafka's PEM keystore: the (PKCS#8) private key, then the certificate.
        cat server.key server.pem >server-keystore.pem
        cat wrong-host.key wrong-host.pem >wrong-host-keystore.pem
        openssl pkcs8 -topk8 -in client.key -out client-encrypted.key -v2 aes-256-cbc \
            -passout "pass:$CLIENT_KEY_PASSWORD"
        chmod 600 ./*.key ./*-keystore.pem
        touch .complete
    ) || die "openssl failed to make the dev certificates"
    rm -rf "$TLS_DIR"
    mv "$tmp" "$TLS_DIR"
}

# ---------------------------------------------------------------------------
# SCRAM users and ACLs
# ---------------------------------------------------------------------------

# The --add-scram arguments of `kafka-storage format`, one user each.
scram_format_args() {
    local pair
    for pair in "$SCRAM_USER=$SCRAM_PASSWORD" "$ACL_USER=$ACL_PASSWORD" \
        "$NOWRITE_USER=$NOWRITE_PASSWORD"; do
        printf '%s\n' --add-scram "SCRAM-SHA-512=[name=${pair%%=*},password=${pair#*=}]"
    done
}

# A Kafka admin CLI class over PLAINTEXT (User:ANONYMOUS, a super user).
# Its output goes to logs/admin.log, shown only when it fails.
admin_tool() {
    local out="$LOG_DIR/admin.log"
    if ! java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$LIBS_DIR/*" \
        -Dlog4j2.configurationFile="$CONF_DIR/log4j2.properties" \
        -Dkafka.logs.dir="$LOG_DIR" \
        "$@" </dev/null >>"$out" 2>&1; then
        tail -n 20 "$out" >&2
        return 1
    fi
}

# Once per data dir, with the broker up: SCRAM users for a state formatted
# by an older kafka.sh (without --add-scram), then the ACLs. The ACLs here are
# the ones docs/security.md lists as what walrelay needs.
provision_security() {
    [[ -f "$SECURITY_MARKER" ]] && return 0
    if [[ ! -f "$DATA_DIR/walrelay-scram-v1" ]]; then
        log "adding SCRAM users to a state formatted without them ..."
        local pair
        for pair in "$SCRAM_USER=$SCRAM_PASSWORD" "$ACL_USER=$ACL_PASSWORD" \
            "$NOWRITE_USER=$NOWRITE_PASSWORD"; do
            admin_tool kafka.admin.ConfigCommand --bootstrap-server "$BROKERS" --alter \
                --add-config "SCRAM-SHA-512=[password=${pair#*=}]" \
                --entity-type users --entity-name "${pair%%=*}" \
                || die "could not add SCRAM user ${pair%%=*}"
        done
        touch "$DATA_DIR/walrelay-scram-v1"
    fi
    log "creating the ACLs of $ACL_USER and $NOWRITE_USER ..."
    local acl=(org.apache.kafka.tools.AclCommand --bootstrap-server "$BROKERS" --add
        --resource-pattern-type prefixed)
    # The offsets topic: create it, check its cleanup.policy, read and write it.
    admin_tool "${acl[@]}" --allow-principal "User:$ACL_USER" \
        --allow-principal "User:$NOWRITE_USER" --topic "$ACL_OFFSETS_PREFIX" \
        --operation Create --operation DescribeConfigs --operation Describe \
        --operation Read --operation Write \
        || die "could not create the offsets-topic ACLs"
    # The event topics: write (which also allows the idempotent producer's
    # InitProducerId since Kafka 2.8) and describe (metadata).
    admin_tool "${acl[@]}" --allow-principal "User:$ACL_USER" --topic "$ACL_TOPIC_PREFIX" \
        --operation Write --operation Describe \
        || die "could not create the event-topic ACLs"
    # exactly_once: WRITE and DESCRIBE on the transactional ids.
    admin_tool "${acl[@]}" --allow-principal "User:$ACL_USER" \
        --transactional-id "$ACL_TXN_PREFIX" --operation Write --operation Describe \
        || die "could not create the transactional-id ACLs"
    # walrelay-nowrite: everything but WRITE on the event topics.
    admin_tool "${acl[@]}" --allow-principal "User:$NOWRITE_USER" --topic "$ACL_TOPIC_PREFIX" \
        --operation Describe \
        || die "could not create the walrelay-nowrite ACL"
    touch "$SECURITY_MARKER"
}

# ---------------------------------------------------------------------------
# Config + storage
# ---------------------------------------------------------------------------

write_server_properties() {
    mkdir -p "$STATE_DIR" "$DATA_DIR" "$LOG_DIR"
    # Rewritten on every start so edits to this script take effect; the data
    # in log.dirs is what persists.
    cat >"$SERVER_PROPS" <<EOF
# Generated by $SELF -- edit the script, not this file.
# Single-node KRaft: this process is both broker and (the only) controller.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CONTROLLER_PORT
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT,SASL_SSL://$HOST:$SASL_SSL_PORT,MTLS://$HOST:$MTLS_PORT,WRONGHOST://$HOST:$WRONG_HOST_PORT
advertised.listeners=PLAINTEXT://$HOST:$PORT,SASL_SSL://$HOST:$SASL_SSL_PORT,MTLS://$HOST:$MTLS_PORT,WRONGHOST://$HOST:$WRONG_HOST_PORT
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL,WRONGHOST:SSL

# Authorization. PLAINTEXT and CONTROLLER connections are User:ANONYMOUS,
# a super user, so they behave exactly as without an authorizer; so do the
# SCRAM user $SCRAM_USER and the mutual-TLS client. Everyone else gets only
# what an ACL allows (see provision_security).
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:$SCRAM_USER;$MTLS_PRINCIPAL
allow.everyone.if.no.acl.found=false

# SASL_SSL: SCRAM-SHA-512 over TLS (server certificate for 127.0.0.1/localhost).
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$TLS_DIR/server-keystore.pem
# MTLS: TLS with a client certificate from the dev CA required.
listener.name.mtls.ssl.keystore.type=PEM
listener.name.mtls.ssl.keystore.location=$TLS_DIR/server-keystore.pem
listener.name.mtls.ssl.truststore.type=PEM
listener.name.mtls.ssl.truststore.location=$TLS_DIR/ca.pem
listener.name.mtls.ssl.client.auth=required
# WRONGHOST: TLS with a valid certificate for another host (wrong.invalid).
listener.name.wronghost.ssl.keystore.type=PEM
listener.name.wronghost.ssl.keystore.location=$TLS_DIR/wrong-host-keystore.pem

log.dirs=$DATA_DIR

# One broker: every internal topic must make do with one replica, or
# consumer groups / transactions would wait forever for replicas.
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Default is 50; creating that many partitions delays the very first
# consumer-group join by seconds, for no benefit on a dev box.
offsets.topic.num.partitions=5

# After an unclean exit (SIGKILL, OOM) the controller keeps the old broker
# registration until its session expires (default 9 s) and rejects the
# restarted broker with DUPLICATE_BROKER_REGISTRATION until then. Shorter
# values make kill -9 + start in tests take ~4 s less.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=4000

auto.create.topics.enable=true
num.partitions=3
# Tests should not sit through the 3 s default before the first rebalance.
group.initial.rebalance.delay.ms=0
EOF
}

# Format the storage once. meta.properties marks a formatted dir; re-running
# `format` on it would fail, and re-formatting would lose data.
ensure_formatted() {
    if [[ -f "$DATA_DIR/meta.properties" ]]; then
        return 0
    fi
    log "formatting KRaft storage in $DATA_DIR (cluster id $CLUSTER_ID) ..."
    local scram
    mapfile -t scram < <(scram_format_args)
    # kafka.tools.StorageTool is what bin/kafka-storage.sh runs in 4.x.
    # With a static controller.quorum.voters a plain --cluster-id suffices
    # (--standalone is for the dynamic-quorum bootstrap.servers form).
    # C1-only + serial GC: this JVM lives ~1 s, so that starts ~30% faster.
    if ! java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$LIBS_DIR/*" \
            -Dlog4j2.configurationFile="$CONF_DIR/log4j2.properties" \
            -Dkafka.logs.dir="$LOG_DIR" \
            kafka.tools.StorageTool format \
            --cluster-id "$CLUSTER_ID" --config "$SERVER_PROPS" --ignore-formatted \
            "${scram[@]}" </dev/null >&2; then
        show_log_tail
        die "formatting storage failed"
    fi
    touch "$DATA_DIR/walrelay-scram-v1"
}

# ---------------------------------------------------------------------------
# Start / stop
# ---------------------------------------------------------------------------

launch() {
    # Anything already listening there is not ours (we checked our pid first),
    # and Kafka would die with a bind error that is harder to read.
    local port
    reserve_ports "$PORT" "$CONTROLLER_PORT" "$SASL_SSL_PORT" "$MTLS_PORT" "$WRONG_HOST_PORT"
    for port in "$PORT" "$CONTROLLER_PORT" "$SASL_SSL_PORT" "$MTLS_PORT" "$WRONG_HOST_PORT"; do
        if port_in_use "$port"; then
            die "$HOST:$port is already in use by another process (not a broker started by $SELF from $REPO_ROOT); stop it first"
        fi
    done

    log "starting Kafka $KAFKA_VERSION on $BROKERS (logs: $SERVER_LOG) ..."
    : >"$JVM_OUT"
    # setsid: own session, so the broker outlives this script and is not hit
    # by a terminal's SIGHUP or a Ctrl-C aimed at the caller (nohup is then
    # unnecessary). The inner shell records its own pid and execs java, so the
    # pid file holds the JVM's pid even if setsid had to fork. 9>&- keeps the
    # JVM from inheriting (and holding forever) our flock.
    # JVM flags follow bin/kafka-server-start.sh / kafka-run-class.sh.
    rm -f "$PID_FILE"
    # shellcheck disable=SC2016  # $$/$0/$@ are meant for the inner shell
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PID_FILE" \
        java -Xms256m -Xmx512m \
            -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
            -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
            -XX:+ExitOnOutOfMemoryError \
            -Djava.awt.headless=true \
            -Dlog4j2.configurationFile="$CONF_DIR/log4j2.properties" \
            -Dkafka.logs.dir="$LOG_DIR" \
            -cp "$LIBS_DIR/*" \
            kafka.Kafka "$SERVER_PROPS" \
        </dev/null >>"$JVM_OUT" 2>&1 9>&- &
    # Wait briefly for the pid file the inner shell writes.
    local _
    for _ in {1..50}; do
        [[ -s "$PID_FILE" ]] && break
        sleep 0.1
    done
    [[ -s "$PID_FILE" ]] || die "broker did not start (no pid file)"
}

wait_ready() {
    local pid=$1 start now elapsed last_report=0
    start=$(date +%s)
    while :; do
        if probe; then
            now=$(date +%s)
            log "Kafka $KAFKA_VERSION ready on $BROKERS (pid $pid, after $((now - start))s)"
            return 0
        fi
        # is_our_broker, not kill -0: an exited-but-unreaped JVM (zombie)
        # still passes kill -0 but has an empty cmdline.
        if ! is_our_broker "$pid"; then
            rm -f "$PID_FILE"
            show_log_tail
            die "Kafka broker (pid $pid) exited during startup"
        fi
        now=$(date +%s)
        elapsed=$((now - start))
        if ((elapsed >= READY_TIMEOUT)); then
            show_log_tail
            log "broker did not answer metadata within ${READY_TIMEOUT}s; stopping it (state kept)"
            stop_broker
            exit 1
        fi
        if ((elapsed - last_report >= 5)); then
            log "waiting for Kafka on $BROKERS ... ${elapsed}s"
            last_report=$elapsed
        fi
        sleep 0.5
    done
}

# Stop our broker if running; state stays. Returns 0 when nothing runs.
stop_broker() {
    local pid
    pid=$(running_pid)
    if [[ -z "$pid" ]]; then
        rm -f "$PID_FILE"
        return 0
    fi
    log "stopping Kafka (pid $pid) ..."
    # SIGTERM = controlled shutdown (flushes logs, writes a clean-shutdown
    # marker so the next start skips log recovery).
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while is_our_broker "$pid" && ((SECONDS < deadline)); do
        sleep 0.2
    done
    if is_our_broker "$pid"; then
        log "broker still alive after ${STOP_TIMEOUT}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        while is_our_broker "$pid"; do sleep 0.1; done
    fi
    rm -f "$PID_FILE"
    log "stopped"
}

# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------

cmd_up() {
    take_lock
    local pid
    pid=$(running_pid)
    if [[ -n "$pid" ]]; then
        # Running already (maybe still starting from an earlier call).
        if ! probe; then
            ensure_kcat
            wait_ready "$pid"
        fi
        if [[ -f "$TLS_DIR/.complete" ]] && grep -q '^listener.name.mtls' "$SERVER_PROPS"; then
            provision_security
        else
            log "note: this broker was started by an older kafka.sh, without the secured"
            log "  listeners; run \`$SELF restart\` (data kept) to get them"
        fi
        print_env
        return 0
    fi
    # A healthy broker from another checkout already serves our port (other
    # developers share this machine): reuse it rather than fail, as long as it
    # runs the version this checkout pins.
    local info fpid froot fver
    info=$(foreign_broker)
    if [[ -n "$info" ]] && probe; then
        read -r fpid froot fver <<<"$info"
        if [[ "$fver" != "$KAFKA_VERSION" ]]; then
            die "Kafka $fver started from $froot (pid $fpid) already runs on $BROKERS, but this checkout pins $KAFKA_VERSION; stop it first: $froot/$SELF down"
        fi
        log "reusing Kafka $fver on $BROKERS started from $froot (pid $fpid);"
        log "  stop/start/down must be run from there: $froot/$SELF"
        print_env
        return 0
    fi
    require_java
    ensure_kcat
    ensure_libs
    ensure_certificates
    write_server_properties
    ensure_formatted
    launch
    wait_ready "$(cat "$PID_FILE")"
    provision_security
    print_env
}

cmd_stop() {
    take_lock
    if [[ -z "$(running_pid)" ]]; then
        # Callers of `stop` expect the broker to be gone afterwards; failing
        # loudly beats a test that silently keeps talking to a live broker.
        local info fpid froot fver
        info=$(foreign_broker)
        if [[ -n "$info" ]]; then
            read -r fpid froot fver <<<"$info"
            die "the broker on $BROKERS (Kafka $fver, pid $fpid) was started from $froot; stop it with: $froot/$SELF stop"
        fi
    fi
    stop_broker
}

cmd_down() {
    take_lock
    stop_broker
    local info
    info=$(foreign_broker)
    if [[ -n "$info" ]]; then
        log "note: a broker started from another checkout still runs (pid/root/version: $info); not touching it"
    fi
    if [[ -e "$STATE_DIR" ]]; then
        rm -rf "$STATE_DIR"
        log "removed $STATE_DIR"
    fi
}

cmd_status() {
    local pid info fpid froot fver
    if probe; then
        info=""
        [[ -n "$(running_pid)" ]] || info=$(foreign_broker)
        if [[ -n "$info" ]]; then
            read -r fpid froot fver <<<"$info"
            echo "kafka $fver running on $BROKERS (started from $froot, pid $fpid)"
        else
            echo "kafka $KAFKA_VERSION running on $BROKERS"
        fi
        return 0
    fi
    pid=$(running_pid)
    if [[ -n "$pid" ]]; then
        echo "kafka $KAFKA_VERSION process (pid $pid) is alive but not answering on $BROKERS (starting up? see $SERVER_LOG)" >&2
    elif port_in_use "$PORT"; then
        echo "something that is not our Kafka (or not healthy) listens on $BROKERS; stop it, then run: $SELF up" >&2
    else
        echo "kafka is not running on $BROKERS; start it with: $SELF up" >&2
    fi
    return 1
}

usage() {
    sed -n '2,/^#   env/{s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2
    exit 2
}

cmd_quota() {
    local client=$1 rate=$2 change
    [[ -n "$client" && ( "$rate" == none || "$rate" =~ ^[0-9]+$ ) ]] || usage
    cmd_status >/dev/null || die "kafka is not running on $BROKERS"
    if [[ "$rate" == none ]]; then
        change=(--delete-config producer_byte_rate)
    else
        change=(--add-config "producer_byte_rate=$rate")
    fi
    admin_tool kafka.admin.ConfigCommand --bootstrap-server "$BROKERS" --alter \
        "${change[@]}" --entity-type clients --entity-name "$client" \
        || die "could not set the quota of client id $client"
    log "client id $client: producer_byte_rate=$rate"
}

main() {
    if [[ $# -eq 3 && "$1" == quota ]]; then
        cmd_quota "$2" "$3"
        return
    fi
    [[ $# -eq 1 ]] || usage
    case "$1" in
        up | start) cmd_up ;;
        down) cmd_down ;;
        stop) cmd_stop ;;
        restart) cmd_stop; cmd_up ;;
        status) cmd_status ;;
        env) print_env ;;
        -h | --help | help) usage ;;
        *) log "unknown command '$1'"; usage ;;
    esac
}

main "$@"
