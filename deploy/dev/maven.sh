# shellcheck shell=bash
# Sourced by deploy/dev/kafka.sh and deploy/dev/connect.sh (not run on its own):
# resolving a pom's runtime jars from Maven Central into a directory.
# The caller defines die().

# maven_copy_deps POM DIR: copies POM's runtime dependencies into DIR (made
# fresh), or removes DIR and returns 1. -B: no progress bars in CI logs.
# Debian's Maven 3.8 still emits bare ESC[0m resets even with -q -B, hence the
# sed. Output goes to stderr (kafka.sh keeps stdout for its env lines); the
# caller's `set -o pipefail` keeps mvn's exit status.
maven_copy_deps() {
    local pom=$1 dir=$2
    need_command mvn maven "mvn (Maven)"
    rm -rf "$dir"
    mkdir -p "$(dirname -- "$dir")"
    if ! mvn -q -B -f "$pom" dependency:copy-dependencies \
            -DoutputDirectory="$dir" -DincludeScope=runtime </dev/null 2>&1 \
            | sed 's/\x1b\[[0-9;]*m//g' >&2; then
        rm -rf "$dir"
        return 1
    fi
}
