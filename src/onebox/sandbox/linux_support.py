"""Host facts, run directories and results for the linux backend (kept apart from its control flow)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from onebox.sandbox import policy
from onebox.sandbox.base import BlockedAttempt, ExecRequest, ExecResult
from onebox.sandbox.cgroups import CgroupUsage
from onebox.sandbox.spawner import Outcome

if TYPE_CHECKING:
    from onebox.sandbox.bwrap_host import BwrapHost
    from onebox.sandbox.workspace import Changes

MERGED_USR = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
FULL_DISK_FREE_BYTES = 1024 * 1024


def system_paths(candidates: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The ``candidates`` that exist here plus the top-level dirs, and which of those are
    merged-/usr symlinks (``/bin -> usr/bin``) to recreate rather than bind."""
    ro = [p for p in candidates if os.path.exists(p)]
    links: dict[str, str] = {}
    for path in MERGED_USR:
        if os.path.islink(path):
            links[path] = os.readlink(path)
        elif os.path.isdir(path):
            ro.append(path)
    return ro, links


def host_layout() -> policy.HostLayout:
    """Which system paths exist here, and which top-level dirs are merged-/usr symlinks."""
    ro, links = system_paths(policy.SYSTEM_RO_PATHS)
    return policy.HostLayout(
        tuple(ro), links,
        proc_read_only=_existing(policy.PROC_READ_ONLY, dirs=None),
        proc_masked_files=_existing(policy.PROC_MASKED_FILES, dirs=False),
        proc_masked_dirs=_existing(policy.PROC_MASKED_DIRS, dirs=True),
        package_dirs=package_dirs(policy.HOST_PACKAGE_DIRS),
    )  # fmt: skip


def package_dirs(patterns: Sequence[str]) -> tuple[str, ...]:
    """The host's third-party python package directories (real directories, no symlink)."""
    found = {p for pattern in patterns for p in glob.glob(pattern)
             if os.path.isdir(p) and not os.path.islink(p)}
    return tuple(sorted(found))


def _existing(names: Sequence[str], dirs: bool | None) -> tuple[str, ...]:
    """The /proc entries of ``names`` this kernel has (of the kind wanted, if ``dirs`` says)."""
    found = []
    for name in names:
        path = f"/proc/{name}"
        if os.path.lexists(path) and (dirs is None or os.path.isdir(path) == dirs):
            found.append(name)
    return tuple(found)


def open_static(static_dir: Path) -> dict[str, int]:
    """O_PATH descriptors of the generated files, for ``--ro-bind-fd``."""
    fds: dict[str, int] = {}
    try:
        for name in policy.GENERATED_FILES:
            fds[name] = os.open(static_dir / name, os.O_PATH | os.O_NOFOLLOW)
    except BaseException:
        close_all(fds.values())
        raise
    return fds


def close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


PROBE_DIRS = ("/bin", "/lib", "/lib64")  # beside /usr: symlinks into it on a merged /usr


def probe_bwrap(bwrap: str) -> list[str]:
    """Empty when bubblewrap can create a user namespace here, else what is wrong and the fix."""
    if not os.path.exists(bwrap):
        return ["bubblewrap is not installed: apt-get install bubblewrap"]
    # Only the dirs `true` needs: binding "/" remounts every mount below it read-only, and a
    # mount another process removes meanwhile (a onebox's pool slot) failed the probe, so
    # `auto` fell back to the unisolated backend on a busy machine.
    argv = [bwrap, "--unshare-user", "--unshare-net", "--ro-bind", "/usr", "/usr",
            *(arg for top in PROBE_DIRS for arg in ("--ro-bind-try", top, top)), "true"]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=10, env={})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"bubblewrap does not run: {exc}"]
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        return [
            f"bubblewrap cannot create user namespaces ({err}); enable them with "
            "sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces"
        ]
    return []


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def static_dir_for(root: Path, host_cpuinfo: str, limits: policy.ResolvedLimits) -> Path:
    """The files bound over /proc, /sys and /etc inside, written once per limits shape."""
    path = root / f"m{limits.memory_mb}-c{limits.cpu_count}"
    if (path / "hosts").exists():
        return path
    tmp = root / f".{path.name}-{os.getpid()}-{id(limits)}"
    tmp.mkdir(mode=0o755, parents=True, exist_ok=True)
    os.chmod(tmp, 0o755)
    files = {
        "meminfo": policy.render_meminfo(limits.memory_mb),
        "cpuinfo": policy.render_cpuinfo(host_cpuinfo, limits.cpu_count),
        "cpu_online": policy.render_cpu_online(limits.cpu_count),
        **policy.render_identity_files(),
    }
    for name, text in files.items():
        _write(tmp / name, text)
    try:
        os.rename(tmp, path)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def write_command(
    run_dir: Path,
    request: ExecRequest,
    argv: Sequence[str],
    env: dict[str, str],
    proxy: bool,
    rlimits: Sequence[str],
) -> None:
    """The launcher and the entry script; written just before the sandbox is released."""
    _, entry = policy.command_for(request)
    if entry is not None and request.code is not None:
        _write(run_dir / entry, request.code)
    if proxy:
        source = resources.files("onebox.sandbox").joinpath("forwarder.py").read_text()
        _write(run_dir / "forwarder.py", source)
    script = policy.launcher_script(argv, env, forwarder=proxy, rlimits=rlimits)
    _write(run_dir / "launch.sh", script)


def enforcement_of(backend: BwrapHost, limits: policy.ResolvedLimits) -> dict[str, str]:
    """Which mechanism enforced what, for this execution."""
    cg = backend.cgroups
    kind = f"cgroup v{cg.version}" if cg else None
    return {
        "filesystem": "bubblewrap mount namespace: read-only system, writable /workspace only",
        "memory": f"{kind} memory limit {limits.memory_mb} MB" if kind else "RLIMIT_AS",
        "pids": f"{kind} pids limit {limits.pids}" if kind else "RLIMIT_NPROC",
        "cpu": f"{kind} CPU quota {limits.cpus} cpus" if kind else "RLIMIT_CPU",
        "disk": f"loop-mounted ext4 image {backend.cfg.disk_mb} MB"
        if backend.disk_enabled
        else f"RLIMIT_FSIZE {limits.disk_mb} MB per file",
        "timeout": f"SIGKILL of the sandbox pid namespace after {limits.timeout_s} s",
        "output": f"head+tail capture of {limits.max_output_bytes} bytes per stream",
        "syscalls": "seccomp deny list" if backend.seccomp_enabled else "none (no seccomp)",
        "network": "no network (empty network namespace)",
        "privileges": "no capabilities, no_new_privs, user namespaces disabled",
    }


def _error_of(
    outcome: Outcome, usage: CgroupUsage, limits: policy.ResolvedLimits, disk_full: bool
) -> str | None:
    if outcome.timed_out:
        return f"timed out after {limits.timeout_s} s; the whole process tree was killed"
    if usage.oom_killed:
        return f"killed: out of memory (limit {limits.memory_mb} MB)"
    if disk_full:
        return "workspace disk cap reached: no space left on device"
    if outcome.exit_code == 125 and outcome.stdout.total == 0:
        return "the sandbox launcher failed before running the command"
    return None


def _disk_full(workspace: Path) -> bool:
    try:
        st = os.statvfs(workspace)
    except OSError:
        return False
    return os.path.ismount(workspace) and st.f_bavail * st.f_frsize < FULL_DISK_FREE_BYTES


def build_result(
    backend: BwrapHost,
    outcome: Outcome,
    usage: CgroupUsage,
    changes: Changes,
    blocked: tuple[BlockedAttempt, ...],
    reset: bool,
    limits: policy.ResolvedLimits,
    enforcement: dict[str, str],
    workspace: Path,
) -> ExecResult:
    error = _error_of(outcome, usage, limits, _disk_full(workspace))
    stderr = outcome.stderr.text()
    notes = ""
    for attempt in blocked:
        notes += f"\n[onebox] blocked network access to {attempt.host}:{attempt.port}: "
        notes += attempt.reason
    if error and error not in stderr + notes:
        notes += f"\n[onebox] {error}"
    stderr += notes
    return ExecResult(
        ok=outcome.exit_code == 0 and not outcome.timed_out,
        exit_code=None if outcome.timed_out else outcome.exit_code,
        stdout=outcome.stdout.text(),
        stderr=stderr,
        stdout_bytes=outcome.stdout.data(),
        stderr_bytes=outcome.stderr.data() + notes.encode("utf-8", "replace"),
        duration_ms=round(outcome.duration_ms, 3),
        timed_out=outcome.timed_out,
        truncated=outcome.stdout.truncated or outcome.stderr.truncated,
        memory_peak_mb=usage.memory_peak_mb,
        cpu_time_ms=usage.cpu_time_ms,
        files_written=changes.files,
        files_truncated=changes.truncated,
        blocked_network=blocked,
        session_reset=reset,
        backend=backend.name,
        isolation=backend.isolation,
        enforcement=enforcement,
        error=error,
    )
