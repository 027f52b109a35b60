#!/usr/bin/env bash
# deploy/dev/prereqs.sh — build prerequisites that cargo cannot install.
#
# librdkafka (built by the rdkafka crate) links OpenSSL and zlib and finds
# them with pkg-config. Installs the Debian packages when missing (as root),
# otherwise says what to install. Idempotent and quick when all is there.
set -euo pipefail

missing=()
command -v cc >/dev/null || missing+=(build-essential)
command -v make >/dev/null || missing+=(make)
command -v pkg-config >/dev/null || missing+=(pkg-config)
if command -v pkg-config >/dev/null; then
  pkg-config --exists openssl || missing+=(libssl-dev)
  pkg-config --exists zlib || missing+=(zlib1g-dev)
else
  missing+=(libssl-dev zlib1g-dev)
fi
command -v cargo >/dev/null || {
  echo "prereqs.sh: cargo not found: install Rust with rustup (https://rustup.rs), then re-run" >&2
  exit 1
}
[[ ${#missing[@]} -eq 0 ]] && exit 0

# shellcheck source=deploy/dev/lib.sh
. "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)/lib.sh"
for package in "${missing[@]}"; do
  apt_install_package "$package" "build package $package"
done
