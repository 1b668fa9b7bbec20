"""Compile (settings, request) into what the spawner runs: pure functions, no I/O.

Everything a sandbox is allowed to see or do is decided here and nowhere else:
the resolved limits, the bubblewrap argv (namespaces, mounts, seccomp), the
launcher script that sets the environment and execs the user's command, and the
fake ``/proc`` files that make the sandbox's limits visible from inside.
The spawner (``spawner.py``) only spawns, streams, enforces and kills.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from onebox.bounds import LIMIT_CAPS
from onebox.config import SandboxSettings
from onebox.errors import PolicyViolation
from onebox.sandbox.base import ExecRequest, Limits

WORKSPACE = "/workspace"
RUN_DIR = "/run/onebox"
LAUNCHER = f"{RUN_DIR}/launch.sh"
SANDBOX_UID = 1000
SANDBOX_GID = 1000
HOSTNAME = "sandbox"
PROXY_PORT = 3128
PATH = "/usr/local/bin:/usr/bin:/bin"
ENVIRONMENT_DIR = "/opt/onebox/env"  # an environment layer, bound read-only, on PYTHONPATH

# Host paths bound read-only when they exist; nothing else of the host is visible.
# E2B's home: code written for E2B opens /home/user/<file>; it is the workspace here.
HOME_ALIAS = "/home/user"
SYSTEM_RO_PATHS: tuple[str, ...] = (
    "/usr",
    "/etc/alternatives",
    "/etc/ssl/certs",
    "/etc/ca-certificates",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/mime.types",
    "/etc/protocols",
    "/etc/services",
    "/etc/python3",
    "/etc/python3.11",
)

# The host python's third-party packages (Debian's python3-yaml, -apt, -dbus, pip...):
# hidden under an empty read-only tmpfs, so the sandbox's python has its standard library
# and what an environment layer adds, nothing else. Globs, resolved on the host.
HOST_PACKAGE_DIRS: tuple[str, ...] = (
    "/usr/lib/python3/dist-packages",
    "/usr/lib/python3*/dist-packages",
    "/usr/lib/python3*/site-packages",
    "/usr/local/lib/python3*/dist-packages",
    "/usr/local/lib/python3*/site-packages",
)

# Files generated once per (memory, cpus) shape and bound over their usual place inside.
GENERATED_FILES: Mapping[str, str] = {
    "meminfo": "/proc/meminfo",
    "cpuinfo": "/proc/cpuinfo",
    "cpu_online": "/sys/devices/system/cpu/online",
    "passwd": "/etc/passwd",
    "group": "/etc/group",
    "hosts": "/etc/hosts",
}

# /proc entries of the host kernel a sandbox must not change (bound read-only over the
# sandbox's own /proc) or read (masked), as container runtimes do. Only those that exist
# on the host are listed in a HostLayout.
PROC_READ_ONLY: tuple[str, ...] = ("sys", "sysrq-trigger", "irq", "bus", "fs")
PROC_MASKED_FILES: tuple[str, ...] = (
    "kcore", "keys", "key-users", "timer_list", "timer_stats", "sched_debug", "latency_stats",
    "kallsyms", "kmsg", "kpagecgroup", "kpagecount", "kpageflags", "iomem", "ioports",
    "vmallocinfo", "slabinfo", "pagetypeinfo", "config.gz",
)  # fmt: skip
PROC_MASKED_DIRS: tuple[str, ...] = ("acpi", "asound", "scsi", "driver")

ENTRY_NAMES = {"python": "entry.py", "bash": "entry.sh", "node": "entry.js"}
INTERPRETERS = {"python": "/usr/bin/python3", "bash": "/bin/bash", "node": "/usr/bin/node"}


@dataclass(frozen=True)
class ResolvedLimits:
    timeout_s: float
    memory_mb: int
    cpus: float
    pids: int
    disk_mb: int
    max_output_bytes: int

    @property
    def cpu_count(self) -> int:
        """Whole CPUs the sandbox is shown (and pinned to)."""
        return max(1, math.ceil(self.cpus))


@dataclass(frozen=True)
class HostLayout:
    """What of the host exists: read-only paths and the merged-/usr symlinks (/bin -> usr/bin)."""

    ro_paths: tuple[str, ...]
    symlinks: Mapping[str, str] = field(default_factory=dict)
    proc_read_only: tuple[str, ...] = ()
    proc_masked_files: tuple[str, ...] = ()
    proc_masked_dirs: tuple[str, ...] = ()
    package_dirs: tuple[str, ...] = ()  # the HOST_PACKAGE_DIRS that exist here


@dataclass(frozen=True)
class BwrapSpec:
    """Everything needed to build the bubblewrap argv of one sandbox.

    onebox's own directories (the workspace, the run directory, the generated files) are
    given to bwrap as open descriptors (``--bind-fd``), never as host path names: bwrap
    runs as the session's unprivileged user, which cannot traverse the onebox home, and
    a name could be swapped between our check and bwrap's use.
    """

    bwrap: str
    layout: HostLayout
    workspace_fd: int
    run_dir_fd: int
    static_fds: Mapping[str, int]
    limits: ResolvedLimits
    seccomp_fd: int | None
    block_fd: int
    info_fd: int
    environment_fd: int | None = None  # the request's EnvironmentLayer directory (O_PATH)
    host_packages: bool = False  # leave the host's package dirs visible (the env build's pip)


def resolve_limits(defaults: SandboxSettings, limits: Limits) -> ResolvedLimits:
    """Request limits override Settings defaults; a request may not exceed the operator's caps."""
    resolved = ResolvedLimits(
        timeout_s=limits.timeout_s if limits.timeout_s is not None else defaults.timeout_s,
        memory_mb=limits.memory_mb if limits.memory_mb is not None else defaults.memory_mb,
        cpus=limits.cpus if limits.cpus is not None else defaults.cpus,
        pids=limits.pids if limits.pids is not None else defaults.pids,
        disk_mb=limits.disk_mb if limits.disk_mb is not None else defaults.disk_mb,
        max_output_bytes=(
            limits.max_output_bytes
            if limits.max_output_bytes is not None
            else defaults.max_output_bytes
        ),
    )
    _check_positive(resolved)
    check_limit_caps(vars(resolved), defaults)
    return resolved


def _check_positive(limits: ResolvedLimits) -> None:
    for name in ("timeout_s", "memory_mb", "cpus", "pids", "disk_mb", "max_output_bytes"):
        if getattr(limits, name) <= 0:
            raise PolicyViolation(f"limits.{name} must be > 0", field=f"limits.{name}")
    if limits.memory_mb < 16:
        raise PolicyViolation("limits.memory_mb must be >= 16", field="limits.memory_mb")


def command_for(request: ExecRequest) -> tuple[list[str], str | None]:
    """The argv to exec inside, and the entry file name the code is written to (if any)."""
    if request.argv:
        return list(request.argv), None
    if request.code is None:
        raise PolicyViolation("a request needs code or argv", field="code")
    if request.language not in ENTRY_NAMES:
        raise PolicyViolation(
            f"unknown language {request.language!r}; use python, bash or node", field="language"
        )
    entry = ENTRY_NAMES[request.language]
    return [INTERPRETERS[request.language], f"{RUN_DIR}/{entry}"], entry


def sandbox_env(request: ExecRequest, limits: ResolvedLimits, proxy: bool) -> dict[str, str]:
    """The command's whole environment: fixed basics, proxy variables, then the request's env."""
    env = {
        "PATH": PATH,
        "HOME": WORKSPACE,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "USER": "sandbox",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "ONEBOX_SESSION_ID": request.session_id,
        "OMP_NUM_THREADS": str(limits.cpu_count),
    }
    if request.environment is not None:
        env["PYTHONPATH"] = ENVIRONMENT_DIR
        env["PATH"] = f"{ENVIRONMENT_DIR}/bin:{PATH}"
    if proxy:
        url = f"http://127.0.0.1:{PROXY_PORT}"
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env[name] = url
        env["NO_PROXY"] = env["no_proxy"] = ""
    for key, value in request.env.items():
        _check_env_name(key)
        env[key] = value
    return env


def _check_env_name(key: str) -> None:
    if not key or "=" in key or "\0" in key or not key.replace("_", "a").isalnum():
        raise PolicyViolation(f"invalid environment variable name {key!r}", field="env")


def rlimit_lines(limits: ResolvedLimits, cgroups: bool) -> list[str]:
    """``ulimit`` lines for the launcher (dash units: -f in 512-byte blocks, -v in KiB).

    Always: no core dumps, a file-size cap, a descriptor cap. Without cgroups the
    memory, process and CPU limits fall back to rlimits too.
    """
    lines = ["ulimit -c 0", "ulimit -n 4096", f"ulimit -f {limits.disk_mb * 2048}"]
    if not cgroups:
        lines += [
            f"ulimit -v {limits.memory_mb * 1024}",
            f"ulimit -p {limits.pids}",
            f"ulimit -t {math.ceil(limits.timeout_s) + 1}",
        ]
    return [line + " || exit 125" for line in lines]


def launcher_script(
    argv: Sequence[str], env: Mapping[str, str], forwarder: bool, rlimits: Sequence[str] = ()
) -> str:
    """A POSIX sh script: rlimits, the environment, the proxy forwarder if any, exec argv."""
    lines = ["cd " + WORKSPACE + " || exit 125", *rlimits]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in env.items()]
    if forwarder:
        lines.append(
            f"/usr/bin/python3 -I {RUN_DIR}/forwarder.py {PROXY_PORT} {RUN_DIR}/proxy.sock"
            " </dev/null >/dev/null 2>&1 || exit 125"
        )
    lines.append("exec " + " ".join(shlex.quote(arg) for arg in argv))
    return "\n".join(lines) + "\n"


def _namespace_args(spec: BwrapSpec) -> list[str]:
    return [
        "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
        "--unshare-net", "--unshare-cgroup-try",
        "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID), "--hostname", HOSTNAME,
        "--disable-userns", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
    ]  # fmt: skip


def _mount_args(spec: BwrapSpec) -> list[str]:
    args: list[str] = []
    for path in spec.layout.ro_paths:
        args += ["--ro-bind", path, path]
    for link, target in spec.layout.symlinks.items():
        args += ["--symlink", target, link]
    if not spec.host_packages:
        for path in spec.layout.package_dirs:
            args += ["--perms", "0555", "--tmpfs", path, "--remount-ro", path]
    args += ["--proc", "/proc", *_proc_hardening(spec.layout), "--dev", "/dev"]
    args += _tmpfs("/tmp", spec.limits.disk_mb) + _tmpfs("/dev/shm", spec.limits.memory_mb)
    args += ["--bind-fd", str(spec.workspace_fd), WORKSPACE]
    args += ["--dir", "/home", "--symlink", WORKSPACE, HOME_ALIAS]
    args += ["--ro-bind-fd", str(spec.run_dir_fd), RUN_DIR]
    if spec.environment_fd is not None:
        args += ["--ro-bind-fd", str(spec.environment_fd), ENVIRONMENT_DIR]
    args += ["--dir", "/sys/devices/system/cpu"]
    for name, dest in GENERATED_FILES.items():
        args += ["--ro-bind-fd", str(spec.static_fds[name]), dest]
    args += ["--remount-ro", "/", "--chdir", WORKSPACE]
    return args


def _tmpfs(dest: str, size_mb: int) -> list[str]:
    """A private tmpfs whose size is the step's own limit, with or without cgroups."""
    return ["--perms", "1777", "--size", str(size_mb * 1024 * 1024), "--tmpfs", dest]


def _proc_hardening(layout: HostLayout) -> list[str]:
    """Host-wide /proc knobs read-only, kernel internals masked (after ``--proc``)."""
    args: list[str] = []
    for name in layout.proc_read_only:
        args += ["--ro-bind", f"/proc/{name}", f"/proc/{name}"]
    for name in layout.proc_masked_files:
        args += ["--ro-bind", "/dev/null", f"/proc/{name}"]
    for name in layout.proc_masked_dirs:
        args += ["--perms", "0555", "--tmpfs", f"/proc/{name}", "--remount-ro", f"/proc/{name}"]
    return args


def bind_fds(spec: BwrapSpec) -> tuple[int, ...]:
    """Every descriptor the bwrap argv of ``spec`` refers to (bwrap must inherit them)."""
    fds = [spec.workspace_fd, spec.run_dir_fd, *spec.static_fds.values()]
    if spec.environment_fd is not None:
        fds.append(spec.environment_fd)
    if spec.seccomp_fd is not None:
        fds.append(spec.seccomp_fd)
    return tuple(fds)


COMMAND = ("/bin/sh", LAUNCHER)


def compile_bwrap(spec: BwrapSpec) -> list[str]:
    """bubblewrap's options (without the program name and the command, see COMMAND).

    The spawner hands these to bwrap through ``--args FD``, so the sandbox's
    ``/proc/1/cmdline`` does not show host paths.
    """
    args = [*_namespace_args(spec), *_mount_args(spec)]
    if spec.seccomp_fd is not None:
        args += ["--seccomp", str(spec.seccomp_fd)]
    args += ["--block-fd", str(spec.block_fd), "--info-fd", str(spec.info_fd)]
    return args


def render_meminfo(memory_mb: int) -> str:
    """A /proc/meminfo whose totals are the sandbox's memory limit."""
    kb = memory_mb * 1024
    rows = [
        ("MemTotal", kb), ("MemFree", kb), ("MemAvailable", kb), ("Buffers", 0),
        ("Cached", 0), ("SwapCached", 0), ("Active", 0), ("Inactive", 0),
        ("SwapTotal", 0), ("SwapFree", 0), ("Dirty", 0), ("Shmem", 0),
    ]  # fmt: skip
    return "".join(f"{name + ':':<16}{value:>8} kB\n" for name, value in rows)


def render_cpuinfo(host_cpuinfo: str, cpu_count: int) -> str:
    """The host's /proc/cpuinfo cut down to ``cpu_count`` processors."""
    blocks = [b for b in host_cpuinfo.strip().split("\n\n") if b.strip()]
    if not blocks:
        blocks = ["processor\t: 0"]
    kept = [blocks[i % len(blocks)] for i in range(cpu_count)]
    out = []
    for index, block in enumerate(kept):
        lines = block.splitlines()
        lines = [f"processor\t: {index}" if ln.startswith("processor") else ln for ln in lines]
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n\n"


def render_cpu_online(cpu_count: int) -> str:
    return "0\n" if cpu_count == 1 else f"0-{cpu_count - 1}\n"


def render_identity_files() -> dict[str, str]:
    """/etc/passwd, /etc/group and /etc/hosts as the sandbox sees them."""
    return {
        "passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"sandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:sandbox:{WORKSPACE}:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "group": f"root:x:0:\nsandbox:x:{SANDBOX_GID}:\nnogroup:x:65534:\n",
        "hosts": f"127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t{HOSTNAME}\n",
    }


def pick_cpus(available: Sequence[int], cpu_count: int, turn: int) -> set[int]:
    """Rotate which host CPUs a sandbox is pinned to, so sandboxes spread over the machine."""
    if not available:
        return set()
    n = min(cpu_count, len(available))
    return {available[(turn + i) % len(available)] for i in range(n)}


def check_limit_caps(limits: Mapping[str, Any], sandbox: SandboxSettings, *,
                     prefix: str = "limits") -> None:
    """PolicyViolation naming the first limit above its operator cap (unset limits pass)."""
    for name, cap_name in LIMIT_CAPS:
        value, cap = limits.get(name), getattr(sandbox, cap_name)
        if value is not None and value > cap:
            raise PolicyViolation(
                f"{prefix}.{name} {_number(value)} is above the operator cap {_number(cap)} "
                f"(ONEBOX_SANDBOX__{cap_name.upper()}); ask for less or raise the cap",
                field=f"{prefix}.{name}")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
