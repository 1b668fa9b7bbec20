#!/usr/bin/env bash
# Install the Debian packages onebox needs (bubblewrap for the sandbox, iproute2 for its
# network namespaces) when they are missing. As root this uses apt-get; otherwise it
# prints the command to run.
set -euo pipefail
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)  # the web console browser test
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "onebox needs: ${missing[*]}. Install them with:" >&2
    echo "    sudo apt-get install -y ${missing[*]}" >&2
    echo "(without bubblewrap onebox falls back to the weak 'process' sandbox; see onebox doctor)" >&2
    exit 0
fi
echo "installing ${missing[*]} with apt-get"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || true
apt-get install -y -qq "${missing[@]}" >/dev/null
