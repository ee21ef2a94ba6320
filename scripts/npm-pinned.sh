# Sourced by the install scripts (needs their log and die): installs a folder's npm packages
# exactly as pinned in its package-lock.json, once; a second call only checks.
#
#   npm_pinned_install DIR STAMP_FILE PRESENT_FUNCTION
#
# PRESENT_FUNCTION returns 0 when what the folder provides is there. Without a lock yet (a new
# pin), it runs `npm install --save-exact`; commit the package-lock.json that writes.
npm_pinned_install() {
    local dir="$1" stamp="$2" present="$3" where
    where="${dir#"$ROOT"/}"
    digest() { cat "$dir/package.json" "$dir/package-lock.json" 2>/dev/null | sha256sum | cut -d' ' -f1; }
    if [[ -f "$dir/package-lock.json" && -f "$stamp" && "$(cat "$stamp")" == "$(digest)" ]] && "$present"; then
        log "$where: already installed from package-lock.json: nothing to do"
    elif [[ -f "$dir/package-lock.json" ]]; then
        log "npm ci in $where (exact versions from package-lock.json)"
        (cd "$dir" && npm ci --no-audit --no-fund)
        digest >"$stamp"
    else
        log "no package-lock.json yet: npm install in $where (commit the lock file it writes)"
        (cd "$dir" && npm install --no-audit --no-fund --save-exact)
        digest >"$stamp"
    fi
    "$present" || die "npm finished but something is missing from $where/node_modules"
}
