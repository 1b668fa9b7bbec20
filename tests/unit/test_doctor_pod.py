"""`onebox doctor` in a Kubernetes pod: it names what the container lacks for the sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from onebox.runtime.services.doctor import check_pod, in_pod, pod_problems

# /proc/self/status lines of a container under the runtime's default profile (seccomp filter
# on, the default capability set: no CAP_SYS_ADMIN) and of a privileged one (every cap)
DEFAULT_POD = "Name:\tpython3\nCapEff:\t00000000a80425fb\nSeccomp:\t2\n"
PRIVILEGED_POD = "Name:\tpython3\nCapEff:\t000001ffffffffff\nSeccomp:\t0\n"


def test_a_default_pod_is_told_each_thing_it_lacks() -> None:
    problems = pod_problems(DEFAULT_POD, cgroup_writable=False, loop_control=False)
    assert len(problems) == 4
    assert any("seccomp" in p for p in problems)
    assert any("CAP_SYS_ADMIN" in p for p in problems)
    assert any("/sys/fs/cgroup" in p for p in problems)
    assert any("loop-control" in p for p in problems)


def test_a_privileged_pod_lacks_nothing() -> None:
    assert pod_problems(PRIVILEGED_POD, cgroup_writable=True, loop_control=True) == []


def test_this_machine_read_as_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check reads this machine's real files when it believes it is in a pod."""
    assert not in_pod({})
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    check = check_pod()
    status = Path("/proc/self/status").read_text()
    if "Seccomp:\t0" in status and Path("/dev/loop-control").exists():
        assert check.ok, check.detail
    else:
        assert not check.ok and "deploy/kubernetes" in (check.fix or "")
