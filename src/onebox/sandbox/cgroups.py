"""One cgroup per execution: memory, pids and CPU limits, peak memory and CPU time read back.

Handles cgroup v1 (one hierarchy per controller, as on the machines onebox is
developed on) and v2 (one unified hierarchy). Cgroups are created beneath the
cgroup the supervisor itself runs in, so any limit placed on onebox still holds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")
V2_CONTROLLERS = "+memory +pids +cpu"


@dataclass(frozen=True)
class CgroupUsage:
    memory_peak_mb: float | None
    cpu_time_ms: float | None
    oom_killed: bool


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _own_path(controller: str | None) -> str:
    """This process's cgroup path in a v1 controller's hierarchy (or in v2 when None)."""
    text = _read(Path("/proc/self/cgroup")) or ""
    for line in text.splitlines():
        _, names, path = line.split(":", 2)
        if controller is None and names == "":
            return path
        if controller is not None and controller in names.split(","):
            return path
    return "/"


class CgroupManager:
    """Creates, limits, measures, kills and removes per-execution cgroups."""

    def __init__(self, version: int, bases: dict[str, Path]) -> None:
        self.version = version
        self.bases = bases

    @classmethod
    def detect(cls, tag: str) -> CgroupManager | None:
        """A manager rooted at a fresh ``onebox-<tag>`` cgroup, or None when none is writable."""
        if (ROOT / "cgroup.controllers").exists():
            return cls._detect_v2(tag)
        if all((ROOT / c).is_dir() for c in V1_CONTROLLERS):
            return cls._detect_v1(tag)
        return None

    @classmethod
    def _detect_v1(cls, tag: str) -> CgroupManager | None:
        bases: dict[str, Path] = {}
        for ctrl in V1_CONTROLLERS:
            parent = ROOT / ctrl / _own_path(ctrl).lstrip("/")
            if not os.access(parent, os.W_OK):
                return None
            _sweep_stale(parent)
            bases[ctrl] = parent / f"onebox-{tag}"
        return cls(1, bases)

    @classmethod
    def _detect_v2(cls, tag: str) -> CgroupManager | None:
        own = ROOT / _own_path(None).lstrip("/")
        base = own / f"onebox-{tag}"
        try:
            # Controllers must be enabled on every level down to the execution cgroups.
            # Fails (EBUSY) when our own cgroup holds processes and is not the root:
            # then onebox needs a delegated cgroup, and rlimits take over meanwhile.
            _write(own / "cgroup.subtree_control", V2_CONTROLLERS)
            base.mkdir(exist_ok=True)
            _write(base / "cgroup.subtree_control", V2_CONTROLLERS)
        except OSError:
            return None
        return cls(2, {"unified": base})

    def _dirs(self, name: str) -> list[Path]:
        return [base / name for base in self.bases.values()]

    def create(self, name: str, memory_mb: int, pids: int, cpus: float) -> None:
        """Make the cgroup ``name`` with its limits (OSError when the kernel refuses)."""
        for path in self._dirs(name):
            path.mkdir(parents=True, exist_ok=True)
        limit = str(memory_mb * 1024 * 1024)
        quota = str(max(1000, int(cpus * 100_000)))
        if self.version == 1:
            mem = self.bases["memory"] / name
            _write(mem / "memory.limit_in_bytes", limit)
            with contextlib.suppress(OSError):
                _write(mem / "memory.memsw.limit_in_bytes", limit)
            _write(self.bases["pids"] / name / "pids.max", str(pids))
            _write(self.bases["cpu"] / name / "cpu.cfs_period_us", "100000")
            _write(self.bases["cpu"] / name / "cpu.cfs_quota_us", quota)
        else:
            path = self.bases["unified"] / name
            _write(path / "memory.max", limit)
            with contextlib.suppress(OSError):
                _write(path / "memory.swap.max", "0")
            _write(path / "pids.max", str(pids))
            _write(path / "cpu.max", f"{quota} 100000")

    def add(self, name: str, pid: int) -> None:
        for path in self._dirs(name):
            _write(path / "cgroup.procs", str(pid))

    def reset_peak(self, name: str) -> None:
        """Forget peak memory and CPU so far (a pre-spawned sandbox's setup is not the user's).

        v1 only: v2's memory.peak reset is per open file and cpu.stat cannot be reset,
        so on v2 the (small) setup cost of a pre-spawned sandbox stays included.
        """
        if self.version != 1:
            return
        with contextlib.suppress(OSError):
            _write(self.bases["memory"] / name / "memory.max_usage_in_bytes", "0")
            _write(self.bases["cpuacct"] / name / "cpuacct.usage", "0")

    def usage(self, name: str) -> CgroupUsage:
        if self.version == 1:
            return self._usage_v1(name)
        return self._usage_v2(name)

    def _usage_v1(self, name: str) -> CgroupUsage:
        peak = _read(self.bases["memory"] / name / "memory.max_usage_in_bytes")
        cpu = _read(self.bases["cpuacct"] / name / "cpuacct.usage")
        oom = _read(self.bases["memory"] / name / "memory.oom_control") or ""
        return CgroupUsage(
            memory_peak_mb=round(int(peak) / 2**20, 2) if peak else None,
            cpu_time_ms=round(int(cpu) / 1e6, 2) if cpu else None,
            oom_killed=_counter(oom, "oom_kill") > 0,
        )

    def _usage_v2(self, name: str) -> CgroupUsage:
        path = self.bases["unified"] / name
        peak = _read(path / "memory.peak")
        stat = _read(path / "cpu.stat") or ""
        events = _read(path / "memory.events") or ""
        usec = _counter(stat, "usage_usec")
        return CgroupUsage(
            memory_peak_mb=round(int(peak) / 2**20, 2) if peak else None,
            cpu_time_ms=round(usec / 1000, 2) if stat else None,
            oom_killed=_counter(events, "oom_kill") > 0,
        )

    def pids(self, name: str) -> list[int]:
        base = self.bases.get("pids") or self.bases["unified"]
        text = _read(base / name / "cgroup.procs") or ""
        return [int(p) for p in text.split()]

    def kill(self, name: str) -> None:
        """SIGKILL every process in the cgroup."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                _write(self.bases["unified"] / name / "cgroup.kill", "1")
                return
        for _ in range(5):
            pids = self.pids(name)
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self, name: str) -> None:
        """Delete the cgroup, killing stragglers first; gives up quietly after ~1 s."""
        for attempt in range(50):
            try:
                for path in self._dirs(name):
                    if path.exists():
                        path.rmdir()
                return
            except OSError:
                self.kill(name)
                time.sleep(0.002 * (attempt + 1))

    def close(self) -> None:
        for base in self.bases.values():
            with contextlib.suppress(OSError):
                for child in base.iterdir():
                    if child.is_dir():
                        child.rmdir()
                base.rmdir()


def _sweep_stale(parent: Path) -> None:
    """Remove empty ``onebox-<pid>-<n>`` cgroups of processes that are gone."""
    for base in parent.glob("onebox-*"):
        pid = base.name.split("-")[1]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        with contextlib.suppress(OSError):
            for child in base.iterdir():
                if child.is_dir():
                    child.rmdir()
            base.rmdir()


def _counter(text: str, key: str) -> int:
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            return int(parts[1])
    return 0
