"""The ``linux`` backend: bubblewrap namespaces + a cgroup per execution + seccomp.

Each execution gets its own bubblewrap sandbox (new user, pid, ipc, uts, net,
mount and cgroup namespaces), a read-only view of the system, the session's
workspace at ``/workspace`` as the only writable host path, a private ``/tmp``,
a seccomp deny list, no capabilities, ``no_new_privs``, and its own cgroup.
The sandbox user (uid 1000 inside) is never host root: when onebox runs as root,
bubblewrap itself is started as the session's own unprivileged host uid
(``identity.py``); otherwise it maps to the supervisor's user. It has no
capabilities; only the mounts listed in ``policy.py`` are visible. onebox's own
directories are handed to bwrap as descriptors, and as root they live on a private
tmpfs, so no host path of the onebox home shows in the sandbox's mount table.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from onebox.config import Settings
from onebox.errors import SandboxError
from onebox.sandbox import homes, policy, seccomp
from onebox.sandbox.base import (
    CellRequest,
    CellResult,
    ExecRequest,
    ExecResult,
    Health,
    SandboxBackend,
)
from onebox.sandbox.cgroups import CgroupManager, CgroupUsage
from onebox.sandbox.disk import LoopDiskQuota
from onebox.sandbox.egress import EgressLimits, EgressProxy, ExecutionEgress
from onebox.sandbox.identity import (
    ensure_reachable,
    identities_for,
    make_run_dir,
)
from onebox.sandbox.interpreter_sessions import SessionInterpreters
from onebox.sandbox.linux_support import (
    build_result,
    close_all,
    enforcement_of,
    host_layout,
    open_static,
    probe_bwrap,
    static_dir_for,
    write_command,
)
from onebox.sandbox.pool import WarmPool
from onebox.sandbox.sessions import Session, SessionTable
from onebox.sandbox.spawner import (
    Blocked,
    SpawnFds,
    kill_tree,
    make_pipes,
    release,
    spawn_blocked,
)
from onebox.sandbox.successors import SessionSuccessors
from onebox.sandbox.sweep import DeadOwnerSweeper, OwnerLock
from onebox.sandbox.workspace import changes_since, state, write_files

_instances = itertools.count()
SUCCESSOR_LINGER_S = 5.0
RUN_TMPFS_MB = 256


class BwrapSandbox(SandboxBackend):
    """Runs every request in a fresh bubblewrap sandbox inside its session's workspace."""

    name = "linux"
    isolation = "namespaces"
    supports_network = True
    has_interpreter = True

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.cfg = settings.sandbox
        self.state_dir = settings.sandbox_dir
        self.owner_lock = OwnerLock(self.state_dir)
        self.run_root = self.state_dir / "run" / self.owner_lock.token
        self.bwrap = shutil.which("bwrap") or "/usr/bin/bwrap"
        self.owner = (os.getuid(), os.getgid())
        self.identities = identities_for(self.cfg)
        self._run_tmpfs = False
        self.layout = host_layout()
        self.cgroups = CgroupManager.detect(f"{os.getpid()}-{next(_instances)}")
        self.disk = LoopDiskQuota(self.state_dir / "images", self.owner, self.owner_lock.token)
        self.disk_enabled = LoopDiskQuota.supported()
        self.seccomp_enabled = seccomp.available()
        self.host_cpuinfo = _read_text("/proc/cpuinfo")
        self.cpus_available = sorted(os.sched_getaffinity(0))
        self.sessions = SessionTable(
            settings.workspaces_dir,
            self.cfg.idle_timeout_s,
            self.make_workspace,
            self.drop_workspace,
        )
        self.egress = EgressProxy(self.cfg.egress_allow_private,
                                  EgressLimits.from_settings(self.cfg))
        self.pool = WarmPool(self, self.cfg.pool_size)
        linger_s = min(SUCCESSOR_LINGER_S, self.cfg.idle_timeout_s)
        self.successors = SessionSuccessors(self, linger_s, enabled=self.cfg.pool_size > 0)
        self._running: dict[str, set[Blocked]] = {}
        self.interpreters = SessionInterpreters(self)
        self._turn = itertools.count()
        self._cleanups: set[asyncio.Task[None]] = set()
        self._io = ThreadPoolExecutor(max_workers=16, thread_name_prefix="onebox-cgroup")
        self._prepare_dirs()
        homes.start(self.state_dir, settings.home, self.identities)  # of deleted homes
        self.sweeper = DeadOwnerSweeper(self.state_dir, self.identities, self.owner_lock)
        self.sweeper.sweep()
        with contextlib.suppress(RuntimeError):  # no event loop: a backend for health() only
            asyncio.get_running_loop()
            self.sweeper.start()

    def _prepare_dirs(self) -> None:
        for path in (self.state_dir, self.run_root, self.settings.workspaces_dir):
            path.mkdir(parents=True, exist_ok=True)
        if self.identities.per_session:  # session users must reach their workspace
            ensure_reachable(self.state_dir)
        os.chmod(self.run_root.parent, 0o711)
        os.chmod(self.run_root, 0o711)
        os.chmod(self.settings.workspaces_dir, 0o711)

    def _mount_run_root(self) -> None:
        """As root, run dirs live on a tmpfs of their own: bound into a sandbox, their mount
        shows "/<exec_id>" on "onebox-run", not a path of the onebox home. Mounted at the
        first spawn (a backend built only for health() mounts nothing); one per backend
        (``run/<owner token>``), so no other process ever unmounts it under us, and later
        spawns need no check."""
        if self._run_tmpfs or not self.identities.per_session:
            return
        if not os.path.ismount(self.run_root):
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"nosuid,nodev,mode=0711,size={RUN_TMPFS_MB}m",
                 "onebox-run", str(self.run_root)], check=True, capture_output=True)
        os.chmod(self.run_root, 0o711)
        self._run_tmpfs = True

    # -- the interface -------------------------------------------------------

    def workspace(self, session_id: str) -> Path:
        return self.sessions.path(session_id)

    def live_sessions(self) -> int:
        return self.sessions.live()

    async def execute(self, request: ExecRequest) -> ExecResult:
        limits = policy.resolve_limits(self.cfg, request.limits)
        argv, _ = policy.command_for(request)
        blocked, session, reset = await self._sandbox_for(request, limits)
        try:
            return await self._run(request, limits, argv, blocked, session, reset)
        finally:
            self.sessions.release(session)
            if session.session_id in self.sessions.ids():
                self.successors.prepare(session)
            self.pool.start()

    async def run_cell(self, request: CellRequest) -> CellResult:
        """Python in the session's long-lived interpreter (interpreter_sessions.py)."""
        return await self.interpreters.run_cell(request)

    def interrupt(self, session_id: str) -> int:
        running = list(self._running.get(session_id, ()))
        for blocked in running:
            kill_tree(blocked)
        return len(running) + self.interpreters.interrupt(session_id)

    def local_owner(self) -> str | None:
        return self.owner_lock.claim

    def local_owner_gone(self, owner: str) -> bool:
        return self.sweeper.gone(owner)

    def interpreter_lost(self, session_id: str, why: str) -> None:
        self.interpreters.lost_elsewhere(session_id, why)

    async def cleanup(self, session_id: str) -> None:
        for blocked in list(self._running.get(session_id, ())):
            kill_tree(blocked)
        await self.interpreters.session_gone(session_id, "the session was deleted")
        await self.successors.drop(session_id)
        await self.sessions.remove(session_id)

    def health(self) -> Health:
        problems = probe_bwrap(self.bwrap)
        if self.cgroups is None:
            problems.append(
                "no writable cgroup hierarchy: limits fall back to rlimits and peak memory / "
                "CPU time are not measured; run onebox as root or delegate a cgroup"
            )
        if not self.seccomp_enabled:
            problems.append("seccomp unavailable: install libseccomp2 (pyseccomp needs it)")
        if not self.disk_enabled:
            problems.append("workspace disk cap is per file only (RLIMIT_FSIZE); run as root")
        details = {
            "bwrap": self.bwrap,
            "cgroups": f"v{self.cgroups.version}" if self.cgroups else "none",
            "seccomp": self.seccomp_enabled,
            "disk_cap": "loop-mounted ext4 image" if self.disk_enabled else "RLIMIT_FSIZE",
            "host_uid": self.owner[0],
            "sandbox_identity": self.identities.info().describe(),
            "live_sessions": self.live_sessions(),
            "pool_ready": self.pool.ready(),
            "session_successors_ready": self.successors.ready(),
        }
        ok = not any(p.startswith("bubblewrap") for p in problems)
        return Health(ok, self.name, self.isolation, details, tuple(problems))

    async def close(self) -> None:
        await self.interpreters.close()
        if self._cleanups:
            await asyncio.gather(*self._cleanups, return_exceptions=True)
        await self.pool.close()
        await self.successors.close()
        await self.sessions.close()
        await self.egress.close()
        self.identities.close()
        for session_id in self.sessions.ids():
            for blocked in self._running.get(session_id, ()):
                kill_tree(blocked)
        if self.disk_enabled:
            for session_id in self.sessions.ids():
                # Keep the images: a later process re-mounts them (interrupted runs resume).
                await self.disk.unmount(self.workspace(session_id))
        if self.cgroups is not None:
            self.cgroups.close()
        self._io.shutdown(wait=False)
        await self.sweeper.close()
        self._unmount_run_root()
        self.owner_lock.close()

    def _unmount_run_root(self) -> None:
        """Unmount and remove this backend's own run tmpfs (no other process uses it)."""
        if self._run_tmpfs:
            subprocess.run(["umount", "-l", str(self.run_root)], capture_output=True)
            self._run_tmpfs = False
        shutil.rmtree(self.run_root, ignore_errors=True)

    # -- sessions and workspaces ---------------------------------------------

    async def make_workspace(self, path: Path) -> None:
        """Create or adopt a workspace; with disk caps, (re)mount its image on it."""
        path.mkdir(mode=0o755, exist_ok=True)
        if self.disk_enabled:
            async with self.disk.mounting():  # another process of this home may mount it too
                if not os.path.ismount(path):
                    image = self.disk.image_of(path)
                    if image.exists():
                        await self.disk.mount(image, path)
                    elif not any(path.iterdir()):
                        await self.disk.attach(path, self.cfg.disk_mb)
        await asyncio.to_thread(self.identities.claim, path)

    async def drop_workspace(self, path: Path) -> None:
        await self.interpreters.session_gone(path.name, "the session was removed (idle or "
                                             "deleted) with its workspace")
        await self.successors.drop(path.name)
        uids = await asyncio.to_thread(self.identities.uids_of, path)
        if self.disk_enabled:
            async with self.disk.mounting():
                await self.disk.detach(path)
        await asyncio.to_thread(shutil.rmtree, path, True)
        await asyncio.to_thread(self.identities.free_removed, path, uids)

    # -- one execution ---------------------------------------------------------

    async def _sandbox_for(
        self, request: ExecRequest, limits: policy.ResolvedLimits
    ) -> tuple[Blocked, Session, bool]:
        warm = await self.pool.take(request, limits)
        if warm is not None:
            return warm
        session, reset = await self.sessions.acquire(request.session_id)
        try:
            successor = None if reset else await self.successors.take(session, request, limits)
            blocked = successor or await self.spawn(session.path, limits, request)
        except BaseException:
            self.sessions.release(session)
            raise
        # A session past its first call is likely to get another: build that sandbox
        # while this one runs (a brand-new session from the pool gets it afterwards).
        self.successors.prepare(session)
        return blocked, session, reset

    async def spawn(
        self, workspace: Path, limits: policy.ResolvedLimits, request: ExecRequest | None
    ) -> Blocked:
        """Start a sandbox on ``workspace`` blocked before its command, in its own cgroup."""
        exec_id = uuid.uuid4().hex[:16]
        run_dir = self.run_root / exec_id
        owner = self.identities.owner_of(workspace)
        self._mount_run_root()
        make_run_dir(run_dir, owner[1] if self.identities.per_session else None)
        egress = await self.egress.open(run_dir, request) if request is not None else None
        opened: list[int] = []
        try:
            fds = make_pipes()
            spec = self._spec(workspace, run_dir, limits, fds, opened)
            spec = self._with_environment(spec, request, opened)
            fds = dataclasses.replace(fds, extra=policy.bind_fds(spec))
            await self._make_cgroup(exec_id, limits)
            options = policy.compile_bwrap(spec)
            run_as = owner if self.identities.per_session else None
            blocked = await spawn_blocked(self.bwrap, options, policy.COMMAND, fds, run_as)
        except BaseException:
            await self._cleanup_run(exec_id, egress)
            raise
        finally:
            close_all(opened)
        blocked.tag, blocked.egress = exec_id, egress
        try:
            await self._confine(blocked, exec_id, limits)
        except BaseException:  # including cancellation: never leave a sandbox behind
            blocked.discard()
            await self.discard(blocked)
            raise
        return blocked

    def _spec(
        self,
        workspace: Path,
        run_dir: Path,
        limits: policy.ResolvedLimits,
        fds: SpawnFds,
        opened: list[int],
    ) -> policy.BwrapSpec:
        """Open what bwrap binds (descriptors, appended to ``opened``) and describe it."""
        static = static_dir_for(self.run_root / "static", self.host_cpuinfo, limits)
        dir_flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW
        workspace_fd = os.open(workspace, dir_flags)
        opened.append(workspace_fd)
        run_fd = os.open(run_dir, dir_flags)
        opened.append(run_fd)
        static_fds = open_static(static)
        opened.extend(static_fds.values())
        sfd = seccomp.filter_fd() if self.seccomp_enabled else None
        if sfd is not None:
            opened.append(sfd)
        return policy.BwrapSpec(
            self.bwrap, self.layout, workspace_fd, run_fd, static_fds, limits, sfd,
            fds.block_r, fds.info_w,
        )  # fmt: skip

    @staticmethod
    def _with_environment(spec: policy.BwrapSpec, request: ExecRequest | None,
                          opened: list[int]) -> policy.BwrapSpec:
        """The request's environment layer (if any) opened for a read-only bind, and the
        host's python packages left visible if the request is the environment build's."""
        if request is not None and request.host_python_packages:
            spec = dataclasses.replace(spec, host_packages=True)
        layer = request.environment if request is not None else None
        if layer is None:
            return spec
        try:
            fd = os.open(layer.path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as exc:
            raise SandboxError(f"environment {layer.name!r} v{layer.version}: its layer "
                               f"{layer.sha256[:12]} cannot be opened ({exc.strerror}); "
                               f"rebuild it with `onebox env build {layer.name}`") from exc
        opened.append(fd)
        return dataclasses.replace(spec, environment_fd=fd)

    async def _in_thread(self, func: Callable[..., None], *args: object) -> None:
        """cgroup v1 writes can sleep for an RCU grace period: keep them off the event loop."""
        await asyncio.get_running_loop().run_in_executor(self._io, func, *args)

    async def _make_cgroup(self, exec_id: str, limits: policy.ResolvedLimits) -> None:
        if self.cgroups is None:
            return
        try:
            await self._in_thread(
                self.cgroups.create, exec_id, limits.memory_mb, limits.pids, limits.cpus
            )
        except OSError as exc:
            raise SandboxError(f"could not create the execution's cgroup: {exc}") from exc

    async def _confine(self, blocked: Blocked, exec_id: str, limits: policy.ResolvedLimits) -> None:
        """Cgroup and CPU pinning, applied to the sandbox's init before it runs.

        (Rlimits are set by the launcher inside: the supervisor may lack CAP_SYS_RESOURCE.)
        """
        pid = blocked.child_pid
        try:
            if self.cgroups is not None:
                await self._in_thread(self.cgroups.add, exec_id, pid)
            cpus = policy.pick_cpus(self.cpus_available, limits.cpu_count, next(self._turn))
            os.sched_setaffinity(pid, cpus)
        except OSError as exc:
            raise SandboxError(f"could not confine sandbox pid {pid}: {exc}") from exc

    async def _run(
        self,
        request: ExecRequest,
        limits: policy.ResolvedLimits,
        argv: list[str],
        blocked: Blocked,
        session: Session,
        reset: bool,
    ) -> ExecResult:
        exec_id, run_dir = blocked.tag, self.run_root / blocked.tag
        running = self._running.setdefault(session.session_id, set())
        running.add(blocked)
        proxy = blocked.egress is not None
        try:
            if request.files:
                await asyncio.to_thread(write_files, session.path, request.files,
                                        self.identities.owner_of(session.path))
            before = await state(session.path)
            env = policy.sandbox_env(request, limits, proxy=proxy)
            rlimits = policy.rlimit_lines(limits, cgroups=self.cgroups is not None)
            write_command(run_dir, request, argv, env, proxy, rlimits)
            if self.cgroups is not None:
                self.cgroups.reset_peak(exec_id)
            outcome = await release(blocked, request.stdin, limits.timeout_s,
                                    limits.max_output_bytes, request.on_output)
            usage = self._usage(exec_id)
            changes = await changes_since(session.path, before)
        except BaseException:
            kill_tree(blocked)
            raise
        finally:
            running.discard(blocked)
            if not running and self._running.get(session.session_id) is running:
                del self._running[session.session_id]  # one entry per live session, no more
            self.discard_later(blocked)
        blocked_net = blocked.egress.attempts() if blocked.egress is not None else ()
        enforcement = enforcement_of(self, limits)
        if proxy:
            domains = ", ".join(request.network.allow_domains)
            enforcement["network"] = f"egress proxy (HTTP, HTTPS CONNECT) allowing {domains}"
        return build_result(
            self, outcome, usage, changes, blocked_net, reset, limits, enforcement, session.path
        )

    def _usage(self, exec_id: str) -> CgroupUsage:
        if self.cgroups is None:
            return CgroupUsage(None, None, False)
        return self.cgroups.usage(exec_id)

    async def discard(self, blocked: Blocked) -> None:
        """Release what a spawned sandbox holds: its egress listener, cgroup and run dir."""
        await self._cleanup_run(blocked.tag, blocked.egress)

    def discard_later(self, blocked: Blocked) -> None:
        """Remove the cgroup and run dir after the result is returned (close() waits for it)."""
        task = asyncio.get_running_loop().create_task(self.discard(blocked))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def _cleanup_run(self, exec_id: str, egress: ExecutionEgress | None) -> None:
        if egress is not None:
            await egress.close()
            self.egress.forget(egress)
        if self.cgroups is not None:
            await self._in_thread(self.cgroups.remove, exec_id)
        shutil.rmtree(self.run_root / exec_id, ignore_errors=True)


def _read_text(path: str) -> str:
    with contextlib.suppress(OSError):
        return Path(path).read_text()
    return ""
