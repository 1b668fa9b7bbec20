#!/usr/bin/env bash
# Run E2B's own Python test suites, unmodified, against a fresh `onebox serve`, and print
# their pass / fail / error / skip counts (docs/e2b.md publishes them). It fetches nothing:
# give it checkouts of the suites and a Python that has the SDKs and pytest.
#
#   scripts/e2b-suites.sh --e2b ~/src/E2B --code-interpreter ~/src/code-interpreter \
#       --python ~/venvs/e2b/bin/python [--out DIR] [--onebox onebox] [-- PYTEST_ARGS...]
#
#   --e2b DIR               a checkout of github.com/e2b-dev/E2B: runs packages/python-sdk/tests
#   --code-interpreter DIR  a checkout of github.com/e2b-dev/code-interpreter: runs python/tests
#   --python PY             a Python with `e2b`, `e2b-code-interpreter`, pytest, pytest-asyncio,
#                           pytest-timeout, pytest-xdist and pytest-dotenv (default: python3)
#   --out DIR               where the JUnit XML of each suite is kept (default: e2b-suites-out)
#   --onebox CMD            the onebox command to serve with (default: onebox)
#   -- PYTEST_ARGS          passed to both pytest runs (e.g. -k files)
#
# Check out the suites at the tags of the SDK versions the Python has (`pip show e2b`):
# E2B's tag is `@e2b/python-sdk@X.Y.Z`, code-interpreter's `@e2b/code-interpreter-python@X.Y.Z`.
# Either suite may be left out. The server gets its own ONEBOX_HOME (and embedded PostgreSQL)
# in a temporary directory, removed at the end.
set -euo pipefail

e2b="" ci="" python="python3" out="e2b-suites-out" onebox="onebox"
while [ $# -gt 0 ]; do
    case "$1" in
        --e2b) e2b="$2"; shift 2 ;;
        --code-interpreter) ci="$2"; shift 2 ;;
        --python) python="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --onebox) onebox="$2"; shift 2 ;;
        --) shift; break ;;
        *) echo "unknown argument '$1' (see the top of $0)" >&2; exit 2 ;;
    esac
done
if [ -z "$e2b" ] && [ -z "$ci" ]; then
    echo "give --e2b DIR and/or --code-interpreter DIR (checkouts of E2B's repositories)" >&2
    exit 2
fi
for dir in ${e2b:+"$e2b/packages/python-sdk/tests"} ${ci:+"$ci/python/tests"}; do
    [ -d "$dir" ] || { echo "no test suite at $dir" >&2; exit 2; }
done
"$python" -c "import e2b, e2b_code_interpreter, pytest, pytest_asyncio, pytest_timeout, xdist" \
    || { echo "$python lacks the SDKs or pytest plugins listed at the top of $0" >&2; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"

home="$(mktemp -d)"
chmod 755 "$home"
export ONEBOX_HOME="$home/home"
port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
key="$("$onebox" keys create --tenant default --name e2b-suites --json \
       | "$python" -c 'import json, sys; print(json.load(sys.stdin)["key"])')"
"$onebox" serve --port "$port" >"$out/serve.log" 2>&1 &
server=$!
stop() {
    kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
    "$onebox" db stop >/dev/null 2>&1 || true
    rm -rf "$home"
}
trap stop EXIT
for _ in $(seq 300); do
    "$python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/readyz')" \
        2>/dev/null && break
    kill -0 "$server" 2>/dev/null || { echo "onebox serve exited: see $out/serve.log" >&2; exit 1; }
    sleep 0.2
done

export E2B_API_URL="http://127.0.0.1:$port/e2b" E2B_SANDBOX_URL="http://127.0.0.1:$port/e2b/sandbox"
export E2B_API_KEY="$key"
export E2B_VALIDATE_API_KEY=false  # SDKs 2.4x check for an `e2b_` key; later ones do not
unset E2B_DEBUG E2B_DOMAIN E2B_ACCESS_TOKEN

run_suite() {  # name, directory (holds pytest.ini), extra pytest args...
    local name="$1" dir="$2"
    shift 2
    echo "== $name: $dir" >&2
    # -P: the SDK the Python has installed, never the checkout's own copy beside the tests
    (cd "$dir" && "$python" -P -m pytest tests -n 0 -p no:cacheprovider -q --tb=native \
        --continue-on-collection-errors --junitxml="$out/$name.xml" "$@" \
        >"$out/$name.log" 2>&1) || true
}
[ -z "$e2b" ] || run_suite e2b-python-sdk "$e2b/packages/python-sdk" "$@"
[ -z "$ci" ] || run_suite code-interpreter "$ci/python" --timeout 120 "$@"

"$python" - "$out" ${e2b:+e2b-python-sdk} ${ci:+code-interpreter} <<'EOF'
"""Counts per suite and per test directory, from each suite's JUnit XML."""
import collections
import importlib.metadata as md
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

out = Path(sys.argv[1])
print(f"SDKs: e2b {md.version('e2b')}, e2b-code-interpreter {md.version('e2b-code-interpreter')}")
for name in sys.argv[2:]:
    path = out / f"{name}.xml"
    if not path.exists():
        print(f"{name}: no result (see {out / (name + '.log')})")
        continue
    counts = collections.defaultdict(collections.Counter)
    failed = []
    for case in ET.parse(path).getroot().iter("testcase"):
        where = "/".join(case.get("classname", "").split(".")[:-1][:3]) or "tests"
        outcome = next((tag for tag in ("failure", "error", "skipped")
                        if case.find(tag) is not None), "passed")
        counts[where][outcome] += 1
        counts["all"][outcome] += 1
        if outcome in ("failure", "error"):
            message = (case.find(outcome).get("message") or "").splitlines()
            failed.append(f"{case.get('classname')}::{case.get('name')}: "
                          f"{message[0][:200] if message else ''}")
    def line(c):
        return (f"{c['passed']} passed, {c['failure']} failed, {c['error']} errors, "
                f"{c['skipped']} skipped")
    print(f"{name}: {line(counts['all'])}")
    for where in sorted(k for k in counts if k != "all"):
        print(f"  {where}: {line(counts[where])}")
    (out / f"{name}-failures.txt").write_text("\n".join(failed) + "\n")
    print(f"  (each failure's first line: {out / (name + '-failures.txt')})")
EOF
