"""Limits above the operator's caps never reach the real sandbox, whoever asks (a plan, the agent, the API)."""

from __future__ import annotations

import pytest
from sbx_helpers import sh

from onebox.errors import PolicyViolation
from onebox.sandbox.linux import BwrapSandbox

pytestmark = pytest.mark.asyncio(loop_scope="session")

MARKER = "import pathlib; pathlib.Path('ran.txt').write_text('yes'); print('ran')"
OVER_CAPS = [
    ("memory_mb", 4_000_000), ("pids", 4_000_000), ("cpus", 64.0), ("disk_mb", 10_000_000),
    ("timeout_s", 30 * 24 * 3600.0), ("max_output_bytes", 1 << 40),
]


@pytest.mark.parametrize(("name", "value"), OVER_CAPS)
async def test_a_limit_above_its_cap_is_refused_before_anything_runs(
    linux: BwrapSandbox, name: str, value: float
) -> None:
    session = f"caps-{name.replace('_', '-')}"
    with pytest.raises(PolicyViolation) as caught:
        await sh(linux, MARKER, session=session, **{name: value})
    assert caught.value.field == f"limits.{name}"
    assert "operator cap" in caught.value.message and "ONEBOX_SANDBOX__MAX_" in caught.value.message
    probe = await sh(linux, "import os; print(os.path.exists('ran.txt'))", session=session)
    assert probe.stdout.strip() == "False", "the refused code must not have run"
    ran = await sh(linux, MARKER, session=session)  # the probe reaches its target within caps
    assert ran.stdout.strip() == "ran"
    again = await sh(linux, "import os; print(os.path.exists('ran.txt'))", session=session)
    assert again.stdout.strip() == "True"


async def test_a_limit_exactly_at_its_cap_runs(linux: BwrapSandbox) -> None:
    cap = linux.cfg.max_pids
    result = await sh(linux, "print('ok')", session="caps-at", pids=cap)
    assert result.exit_code == 0 and result.stdout.strip() == "ok"
