#!/usr/bin/env bash
# Installs the third-party MCP servers that tests/servers/test_servers_smoke.py (and later integration
# tests) start as real subprocesses. Every version is pinned; nothing is downloaded but npm and PyPI
# packages.
#
#   npm:  @modelcontextprotocol/server-everything, -filesystem, -memory  -> tests/servers/node/node_modules
#         (versions pinned exactly in tests/servers/node/package.json, resolved in its package-lock.json)
#   PyPI: mcp-server-time, mcp-server-git                                 -> the current Python environment
#
# Usage: scripts/install-test-servers.sh        (PYTHON=/path/to/python overrides the interpreter)
# Idempotent: a second run only checks that what is installed matches the pins.
set -euo pipefail

MCP_SERVER_TIME_VERSION="2026.10.19"
MCP_SERVER_GIT_VERSION="2026.10.19"
NPM_PACKAGES=(
    "@modelcontextprotocol/server-everything"
    "@modelcontextprotocol/server-filesystem"
    "@modelcontextprotocol/server-memory"
)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NODE_DIR="$ROOT/tests/servers/node"
STAMP="$NODE_DIR/node_modules/.install-test-servers.stamp"

log() { printf '[install-test-servers] %s\n' "$*"; }
die() {
    printf '[install-test-servers] ERROR: %s\n' "$*" >&2
    exit 1
}
# shellcheck source=scripts/npm-pinned.sh
source "$ROOT/scripts/npm-pinned.sh"

# --- Node: the npm reference servers -------------------------------------------------------------
command -v node >/dev/null 2>&1 || die "node is not installed (Node >= 18 is needed for the npm servers)"
command -v npm >/dev/null 2>&1 || die "npm is not installed"
log "node $(node --version), npm $(npm --version)"
[[ -f "$NODE_DIR/package.json" ]] || die "missing $NODE_DIR/package.json"

bins_present() {
    local name
    for name in mcp-server-everything mcp-server-filesystem mcp-server-memory; do
        [[ -x "$NODE_DIR/node_modules/.bin/$name" ]] || return 1
    done
}

npm_pinned_install "$NODE_DIR" "$STAMP" bins_present
cd "$NODE_DIR"
for pkg in "${NPM_PACKAGES[@]}"; do
    version="$(node -p "require('./node_modules/$pkg/package.json').version")"
    log "  $pkg@$version"
done
log "  (TypeScript SDK @modelcontextprotocol/sdk@$(node -p "require('./node_modules/@modelcontextprotocol/sdk/package.json').version"))"
log "  binaries: tests/servers/node/node_modules/.bin/mcp-server-{everything,filesystem,memory}"
cd "$ROOT"

# --- Python: mcp-server-time and mcp-server-git into the current environment ---------------------
PYTHON="${PYTHON:-$(command -v python || command -v python3 || true)}"
[[ -n "$PYTHON" ]] || die "no python or python3 on PATH (set PYTHON=...)"
log "python: $("$PYTHON" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
command -v git >/dev/null 2>&1 || die "git is not installed (mcp-server-git drives it)"

installed_version() {
    "$PYTHON" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || true
}

for pinned in "mcp-server-time==$MCP_SERVER_TIME_VERSION" "mcp-server-git==$MCP_SERVER_GIT_VERSION"; do
    name="${pinned%%==*}"
    version="${pinned##*==}"
    if [[ "$(installed_version "$name")" == "$version" ]]; then
        log "$pinned already installed: nothing to do"
    else
        log "pip install $pinned"
        "$PYTHON" -m pip install --quiet --disable-pip-version-check "$pinned"
    fi
    [[ "$(installed_version "$name")" == "$version" ]] || die "$pinned is not installed"
    "$PYTHON" -c "import ${name//-/_}" || die "${name//-/_} does not import"
    log "  $pinned"
done
log "  (start: $PYTHON -m mcp_server_time --local-timezone UTC; $PYTHON -m mcp_server_git --repository REPO)"
log "  with mcp==$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("mcp"))')"
log "done"
