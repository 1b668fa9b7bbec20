"""Facts about host processes that several layers need (one rule, one place)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one owned by another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _boot_and_namespace() -> str | None:
    """This kernel's boot id and this process's pid namespace: two processes whose pids can
    be compared share both (another machine, a reboot or another container has others)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot}/{namespace}"


def _started(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # the name may hold spaces and parentheses
    return fields[19] if len(fields) > 19 else None


def process_key(pid: int | None = None) -> str | None:
    """A name for a running process that no other process ever has: boot id, pid namespace,
    pid and start time (a pid alone is reused). None where /proc cannot say."""
    pid = os.getpid() if pid is None else pid
    where, started = _boot_and_namespace(), _started(pid)
    if where is None or started is None:
        return None
    return f"{where}/{pid}/{started}"


def process_key_alive(key: str | None) -> bool | None:
    """Whether the process ``key`` names still runs: True or False when it belongs to this
    kernel boot and pid namespace, None when this process cannot tell (another machine,
    container or boot, or no key)."""
    if not key or key.count("/") != 3:
        return None
    boot, namespace, pid, started = key.split("/")
    if _boot_and_namespace() != f"{boot}/{namespace}" or not pid.isdigit():
        return None
    return _started(int(pid)) == started


def key_pid(key: str | None) -> int | None:
    """The pid in a :func:`process_key`."""
    parts = (key or "").split("/")
    return int(parts[2]) if len(parts) == 4 and parts[2].isdigit() else None
