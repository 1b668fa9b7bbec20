"""The sandbox's Python has its standard library and nothing of the host's (issue 28,
point 12): the host's third-party packages (Debian's dist-packages: yaml, apt, dbus...)
are hidden, the agent's prompt lists what is really importable, and an environment layer
still adds its own packages.

The probe names real host packages: every top-level module in the host's dist/site-packages
directories, found on the host first (so the test proves something: on main each of them
imports in the sandbox)."""

from __future__ import annotations

import glob
import json
import os

import pytest

from onebox.agent.context import environment_text
from onebox.runtime.engine.step_context import sandbox_facts
from onebox.sandbox.base import ExecRequest
from onebox.sandbox.linux import BwrapSandbox
from onebox.sandbox.policy import HOST_PACKAGE_DIRS

pytestmark = pytest.mark.asyncio(loop_scope="session")

PROBE = """
import importlib.util, json
seen = {name: "found" if importlib.util.find_spec(name) else "missing" for name in NAMES}
try:
    import yaml  # the one issue 28 names, imported for real
    seen["import yaml"] = "imported from " + yaml.__file__
except ImportError:
    seen["import yaml"] = "missing"
import sqlite3, ssl, decimal, ctypes  # the standard library, its C modules too
print(json.dumps(seen))
"""

def host_modules() -> dict[str, str]:
    """Top-level packages of the host's third-party directories: module -> its directory."""
    found = {}
    for pattern in HOST_PACKAGE_DIRS:
        for directory in glob.glob(pattern):
            for entry in sorted(os.listdir(directory)):
                init = os.path.join(directory, entry, "__init__.py")
                if entry.isidentifier() and os.path.isfile(init):
                    found.setdefault(entry, directory)
    return found


async def test_the_hosts_third_party_packages_do_not_import_in_the_sandbox(
        linux: BwrapSandbox) -> None:
    modules = host_modules()
    if not modules:
        pytest.skip("this host's python has no third-party packages to hide")
    wanted = sorted(modules)
    code = PROBE.replace("NAMES", json.dumps(wanted))
    result = await linux.execute(ExecRequest(session_id="pyhost-1", code=code))
    assert result.ok, result.stderr  # the standard library imports, C modules included
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(seen) == {*wanted, "import yaml"}
    imported = [f"{m} ({modules.get(m, state)})" for m, state in seen.items()
                if state != "missing"]
    assert imported == [], f"host packages visible in the sandbox: {imported}"


async def test_the_prompt_lists_only_what_the_sandbox_can_import(linux: BwrapSandbox) -> None:
    facts = await sandbox_facts(linux, "pyhost-2")
    assert facts is not None and facts.python_version.startswith("3.")
    assert facts.packages == ()
    assert "none beyond the standard library" in environment_text(facts, {})
