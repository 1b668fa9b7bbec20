#!/usr/bin/env bash
# Install the Debian packages onebox needs when they are missing: bubblewrap (the sandbox)
# and iproute2 (its network namespaces); with --test also chromium (the web console's
# browser test, which skips without it). As root this uses apt-get; otherwise it prints
# the command to run.
set -euo pipefail
missing=()
optional=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
if [ "${1:-}" = "--test" ]; then
    command -v chromium >/dev/null 2>&1 || optional+=(chromium)
fi
if [ ${#missing[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "onebox needs: ${missing[*]} ${optional[*]}. Install them with:" >&2
    echo "    sudo apt-get install -y ${missing[*]} ${optional[*]}" >&2
    echo "(without bubblewrap onebox falls back to the weak 'process' sandbox; see onebox doctor)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || true
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]} with apt-get"
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ${#optional[@]} -gt 0 ]; then
    echo "installing ${optional[*]} with apt-get (for the browser test)"
    apt-get install -y -qq "${optional[@]}" >/dev/null \
        || echo "could not install ${optional[*]}; the browser test will be skipped" >&2
fi
