#!/usr/bin/env bash
# deploy/dev/helm.sh — Helm for deploy/validate.sh (helm lint, helm template of
# deploy/helm/walrelay), built from its Go module (helm.sh/helm/v4, through
# the Go module proxy) into the git-ignored .deps/helm/<version>/, and its
# path printed on stdout:
#
#   HELM=$(deploy/dev/helm.sh)
#
# Helm publishes no Debian or PyPI package, and its release binaries are not
# reachable here; `go install` of the pinned version is. The first run on a
# machine compiles it (5 min here under load: 4.4 CPU-minutes, plus the
# module downloads, ~120 MB); with Go's build cache warm (another clone on
# the same machine) 20 s; later runs only print the path. deploy/test.sh
# starts it in the background while cargo builds; the lock makes
# validate.sh wait for that build instead of starting a second. Needs Go 1.26+ (helm v4.3.2's go.mod): the
# machine's `go` (/usr/local/go/bin on this kind of machine), or an older
# Go 1.21+ that fetches the 1.26 toolchain itself (GOTOOLCHAIN=auto, also
# through the Go module proxy). Debian bookworm's golang (1.19) is too old.
set -euo pipefail
ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)
HELM_VERSION=v4.3.2
DIR=$ROOT/.deps/helm/$HELM_VERSION
BIN=$DIR/helm
log() { echo "helm.sh: $*" >&2; }

if [[ ! -x $BIN ]]; then
    GO=$(command -v go || true)
    [[ -n $GO ]] || { [[ -x /usr/local/go/bin/go ]] && GO=/usr/local/go/bin/go; }
    [[ -n $GO ]] || { log "error: go not found (Go 1.26+, or 1.21+ with GOTOOLCHAIN=auto, is needed to build helm $HELM_VERSION)"; exit 1; }
    mkdir -p "$DIR"
    exec 9>"$DIR.lock"
    flock -w 1200 9 || { log "error: timed out waiting for $DIR.lock"; exit 1; }
    if [[ ! -x $BIN ]]; then
        log "building helm $HELM_VERSION with $("$GO" version) (first run only: a few minutes) ..."
        if [[ -z ${HOME:-} ]]; then   # go keeps its caches under $HOME
            export GOPATH=${GOPATH:-$ROOT/.deps/go} GOCACHE=${GOCACHE:-$ROOT/.deps/go/cache}
        fi
        tmp=$(mktemp -d "$DIR/.build.XXXXXX")   # same file system: the mv below is a rename
        trap 'rm -rf "$tmp"' EXIT
        GOBIN=$tmp GOFLAGS=-mod=mod "$GO" install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" >&2
        mv "$tmp/helm" "$BIN"
    fi
fi
echo "$BIN"
