#!/usr/bin/env bash
# deploy/docker/test_image.sh — builds the container image of
# deploy/docker/Dockerfile and runs it against the dev services, without a
# Docker engine or Docker Hub (CI runs it from deploy/test.sh):
#
#   1. a Debian bookworm root filesystem from Debian's mirror (mmdebstrap,
#      variant minbase), imported as docker.io/library/debian:bookworm-slim
#      into a private image store (.state/containers, Debian's podman as root,
#      no daemon), so the Dockerfile's FROM resolves without a registry;
#   2. the Dockerfile's runtime stage, verbatim (its apt-get install reaches
#      Debian's mirror over the host's network), with the walrelay binary
#      built on the host in place of the build stage, which needs Docker Hub's
#      rust image (the Dockerfile's header says so);
#   3. the image run as it ships (USER, ENTRYPOINT and CMD) and as the
#      Kubernetes manifests run it (read-only root filesystem, a writable
#      /tmp), on the host network, the config mounted:
#      `check` passes, `run` streams an outbox row to Kafka (id header
#      checked), /healthz answers, and SIGTERM stops it with exit 0;
#   4. the build context that the repository's .dockerignore lets through,
#      measured (it must stay small: no target/, .deps/, .state/).
#
#   deploy/docker/test_image.sh [path/to/walrelay]   default: target/debug/walrelay
#
# Needs the dev services' environment (eval "$(deploy/dev/postgres.sh up)",
# eval "$(deploy/dev/kafka.sh up)"): WALRELAY_PG_PORT, WALRELAY_KAFKA_BROKERS.
# Installs podman, runc and mmdebstrap (Debian) when missing. Its own
# database, slot, topic and connector name; the image store and the root
# filesystem (made once per day) stay in .state/containers.
#
# What this machine needs podman to be told: runc, not crun (crun refuses
# cgroups in hybrid v1/v2 mode), cgroupfs (no systemd as init), ulimits below
# the hard limits (podman's defaults exceed them and root here lacks
# CAP_SYS_RESOURCE), chroot isolation for the build's RUN steps.
set -euo pipefail
ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)
log() { echo "test_image.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=deploy/dev/lib.sh
. "$ROOT/deploy/dev/lib.sh"

BIN=${1:-"${CARGO_TARGET_DIR:-$ROOT/target}/debug/walrelay"}
[[ -x $BIN ]] || die "$BIN is not built: cargo build first"
[[ -n ${WALRELAY_PG_PORT:-} && -n ${WALRELAY_KAFKA_BROKERS:-} ]] ||
    die "WALRELAY_PG_PORT and WALRELAY_KAFKA_BROKERS are unset: eval \"\$(deploy/dev/postgres.sh up)\" and \"\$(deploy/dev/kafka.sh up)\" first"

need_command podman podman
need_command runc runc
need_command mmdebstrap mmdebstrap
need_command psql postgresql-client
need_command kcat kcat
need_command curl curl

STORE=$ROOT/.state/containers
# podman refuses a runroot path over 50 characters, and a checkout's path can
# be longer (CI's was): the run state (sockets, locks) goes to a short path
# of its own per checkout instead.
RUNROOT=/tmp/walrelay-podman-$(printf '%s' "$ROOT" | md5sum | cut -c1-8)
mkdir -p "$STORE" "$RUNROOT"
PODMAN=(podman --root "$STORE/storage" --runroot "$RUNROOT" --storage-driver "${WALRELAY_IMAGE_STORAGE_DRIVER:-overlay}"
    --cgroup-manager cgroupfs --runtime runc --events-backend file)
ULIMITS=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
IMAGE=localhost/walrelay:test
NAME=walrelay-image-test
DB=walrelay_image_test
tmp=$(mktemp -d)
cleanup() {
    "${PODMAN[@]}" rm -f -t 0 "$NAME" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
# One user of the store at a time (two CI lanes, a developer beside CI).
exec 9>"$STORE/lock"
flock -w 600 9 || die "timed out waiting for $STORE/lock"

# 1. The base image: Debian bookworm, minbase (what debian:bookworm-slim is
#    made from), refreshed daily so security updates come in.
base=$STORE/bookworm-minbase-$(date -u +%Y%m%d).tar
if ! "${PODMAN[@]}" image exists docker.io/library/debian:bookworm-slim || [[ ! -f $base ]]; then
    if [[ ! -f $base ]]; then
        log "making a Debian bookworm root filesystem with mmdebstrap (about 30 s) ..."
        rm -f "$STORE"/bookworm-minbase-*.tar
        # (the .tar ending tells mmdebstrap to write a tarball)
        mmdebstrap --quiet --variant=minbase --mode=root bookworm "${base%.tar}.part.tar" http://deb.debian.org/debian >&2
        mv "${base%.tar}.part.tar" "$base"
    fi
    "${PODMAN[@]}" import --quiet "$base" docker.io/library/debian:bookworm-slim >/dev/null
    "${PODMAN[@]}" image prune -f >/dev/null   # the previous day's base
fi

# 2. The runtime stage as the Dockerfile has it; the build stage replaced by
#    the host's binary (debug information stripped: smaller layers).
dockerfile=$ROOT/deploy/docker/Dockerfile
grep -qx 'COPY --from=build /usr/local/bin/walrelay /usr/local/bin/walrelay' "$dockerfile" ||
    die "the Dockerfile no longer copies /usr/local/bin/walrelay from its build stage: update this script"
mkdir -p "$tmp/context"
objcopy --strip-debug "$BIN" "$tmp/context/walrelay"
{
    echo "FROM scratch AS build"
    echo "COPY walrelay /usr/local/bin/walrelay"
    sed -n '/^FROM debian:bookworm-slim$/,$p' "$dockerfile"
} >"$tmp/Dockerfile"
grep -q '^FROM debian:bookworm-slim$' "$tmp/Dockerfile" || die "no 'FROM debian:bookworm-slim' runtime stage in $dockerfile"
log "building the runtime stage of deploy/docker/Dockerfile (podman build, chroot isolation) ..."
build_start=$SECONDS
"${PODMAN[@]}" build --quiet --no-cache --isolation chroot --network host --pull=never "${ULIMITS[@]}" \
    -f "$tmp/Dockerfile" -t "$IMAGE" "$tmp/context" >/dev/null
log "built $IMAGE in $((SECONDS - build_start)) s"
user=$("${PODMAN[@]}" image inspect --format '{{.Config.User}}' "$IMAGE")
[[ $user == 10001:10001 ]] || die "the image runs as '$user', not 10001:10001"

# 3. Run it against the dev services.
export PGPASSWORD=walrelay PGOPTIONS="-c client_min_messages=warning"
SUPER_PSQL=(psql -X -q -v ON_ERROR_STOP=1 "${WALRELAY_PG_SUPERUSER_URL:-postgres://postgres:postgres@127.0.0.1:$WALRELAY_PG_PORT/postgres}")
APP_PSQL=(psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$WALRELAY_PG_PORT" -U walrelay -d "$DB")
"${SUPER_PSQL[@]}" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null
"${SUPER_PSQL[@]}" -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '$DB'" >/dev/null
"${SUPER_PSQL[@]}" -c "CREATE DATABASE $DB OWNER walrelay" >/dev/null
"${APP_PSQL[@]}" -c "CREATE TABLE outbox (id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL, payload jsonb)"
health_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
run_id=$(date +%s)-$$
topic=image-test-$run_id
cat >"$tmp/walrelay.toml" <<EOF
[connector]
name = "image-test-$run_id"

[postgres]
host = "127.0.0.1"
port = $WALRELAY_PG_PORT
user = "walrelay"
password = "\${WALRELAY_PG_PASSWORD}"
database = "$DB"
slot = "$DB"
publication = "$DB"

[kafka]
brokers = "$WALRELAY_KAFKA_BROKERS"

[health]
listen = "127.0.0.1:$health_port"

[log]
format = "json"

[[outbox]]
table = "public.outbox"
topic = "$topic"
EOF
chmod 0644 "$tmp/walrelay.toml"
# As the Kubernetes manifests run it: the root filesystem read-only but /tmp
# (postgres.stream_spill_dir; without it `run` exits 1 at start).
RUN=("${PODMAN[@]}" run --network host "${ULIMITS[@]}" --read-only --read-only-tmpfs=false --tmpfs /tmp
    -v "$tmp/walrelay.toml:/etc/walrelay/walrelay.toml:ro" -e WALRELAY_PG_PASSWORD=walrelay)

log "walrelay check in the image"
if ! out=$("${RUN[@]}" --rm "$IMAGE" check --config /etc/walrelay/walrelay.toml 2>&1); then
    echo "$out" >&2
    die "walrelay check failed in the image"
fi
grep -q '^ok ' <<<"$out" || { echo "$out" >&2; die "walrelay check printed no ok line"; }

log "walrelay run in the image (its default command)"
"${RUN[@]}" -d --name "$NAME" "$IMAGE" >/dev/null
deadline=$((SECONDS + 120))
until "${PODMAN[@]}" logs "$NAME" 2>&1 | grep -q '"message":"streaming"'; do
    [[ $("${PODMAN[@]}" inspect --format '{{.State.Running}}' "$NAME") == true ]] ||
        { "${PODMAN[@]}" logs "$NAME" >&2; die "the container stopped before streaming"; }
    ((SECONDS < deadline)) || { "${PODMAN[@]}" logs "$NAME" >&2; die "no 'streaming' line within 120 s"; }
    sleep 1
done
id=$("${APP_PSQL[@]}" -At -c "INSERT INTO outbox (aggregatetype, aggregateid, type, payload)
    VALUES ('order', 'image-1', 'Created', '{\"from\": \"the image\"}') RETURNING id")
deadline=$((SECONDS + 60))
until kcat -b "$WALRELAY_KAFKA_BROKERS" -C -t "$topic" -o beginning -e -q -f '%k %h\n' 2>/dev/null | grep -q "image-1 .*id=$id"; do
    ((SECONDS < deadline)) || { "${PODMAN[@]}" logs "$NAME" >&2; die "the outbox row $id did not reach topic $topic within 60 s"; }
    sleep 1
done
log "record $id on $topic"
curl -fsS "http://127.0.0.1:$health_port/healthz" >/dev/null || die "GET /healthz failed"

"${PODMAN[@]}" stop -t 30 "$NAME" >/dev/null
code=$("${PODMAN[@]}" inspect --format '{{.State.ExitCode}}' "$NAME")
[[ $code == 0 ]] || { "${PODMAN[@]}" logs "$NAME" >&2; die "walrelay exited $code on SIGTERM, not 0"; }
"${PODMAN[@]}" rm "$NAME" >/dev/null
"${SUPER_PSQL[@]}" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null
"${SUPER_PSQL[@]}" -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '$DB'" >/dev/null

# 4. The build context the repository's .dockerignore lets through.
log "the build context under .dockerignore"
printf 'FROM debian:bookworm-slim\nCOPY . /context\nRUN du -sk /context | cut -f1 > /size\n' >"$tmp/Dockerfile.context"
"${PODMAN[@]}" build --quiet --no-cache --isolation chroot --network host --pull=never "${ULIMITS[@]}" \
    -f "$tmp/Dockerfile.context" -t localhost/walrelay-context:test "$ROOT" >/dev/null
kib=$("${PODMAN[@]}" run --rm "${ULIMITS[@]}" localhost/walrelay-context:test cat /size)
listing=$("${PODMAN[@]}" run --rm "${ULIMITS[@]}" localhost/walrelay-context:test ls -A /context | tr '\n' ' ')
"${PODMAN[@]}" rmi localhost/walrelay-context:test >/dev/null
"${PODMAN[@]}" image prune -f >/dev/null   # earlier runs' walrelay:test layers
log "build context: $((kib / 1024)) MiB ($listing)"
[[ $listing == "Cargo.lock Cargo.toml build.rs src " ]] || die "the build context holds other than Cargo.toml, Cargo.lock, build.rs and src/: $listing"
((kib < 50 * 1024)) || die "the build context is $kib KiB"
log "the image builds, checks, streams and stops cleanly"
