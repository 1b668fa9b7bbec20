"""Environment layers on the host: package lists checked, pip's output copied out of a hostile
build workspace into a read-only, content-addressed directory.

The build ran untrusted code (an sdist's setup.py) in the sandbox, so the workspace may hold
symlinks to host files, FIFOs, devices, or names swapped while we look. The copy goes through
:mod:`onebox.sandbox.hostfs`: no symlink is followed on any component, only regular files are
opened (and the file read is the one checked), bounded in count, depth, bytes and time.
Symlinks and other special files are not copied (the build log names them).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import uuid
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from onebox.errors import StorageError, ValidationError
from onebox.sandbox import hostfs

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_VERSION_CLAUSE = r"(?:===|==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+"
REQUIREMENT = re.compile(
    rf"^{_NAME}(?:\[{_NAME}(?:\s*,\s*{_NAME})*\])?"
    rf"(?:\s*{_VERSION_CLAUSE}(?:\s*,\s*{_VERSION_CLAUSE})*)?$")
MAX_PACKAGES = 100
MAX_REQUIREMENT_CHARS = 200
COPY_CHUNK_BYTES = 1 << 20
COPY_DEADLINE_S = 300.0


def check_requirements(packages: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The package list, stripped, de-duplicated and sorted; a ValidationError naming the first
    entry that is not a plain requirement (``name[extra]>=1.0,<2``: no option such as
    ``--index-url``, no file (``-r``), URL or path, no environment marker)."""
    if not packages:
        raise ValidationError("an environment needs at least one package: "
                              "`onebox env build NAME --package six`", field="packages")
    if len(packages) > MAX_PACKAGES:
        raise ValidationError(f"at most {MAX_PACKAGES} packages per environment",
                              field="packages")
    clean = []
    for index, raw in enumerate(packages):
        text = str(raw).strip()
        if len(text) > MAX_REQUIREMENT_CHARS or not REQUIREMENT.match(text):
            raise ValidationError(
                f"packages[{index}] {text[:80]!r} is not a package requirement: give a name "
                "with optional extras and versions (pandas, requests[socks]>=2,<3); options, "
                "files, URLs and paths are refused", field=f"packages[{index}]")
        clean.append(text)
    return tuple(sorted(set(clean), key=str.lower))


@cache
def python_version() -> str:
    """The sandbox's python (/usr/bin/python3, bound read-only from the host) as 'X.Y'."""
    out = subprocess.run(["/usr/bin/python3", "-I", "-c",
                          "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.strip()


def spec_sha256(packages: tuple[str, ...], python: str) -> str:
    """What decides a layer's content: the normalized package list and the python version."""
    text = json.dumps({"packages": list(packages), "python": python}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Copied:
    """A layer staged on the host: its content hash, size and what was left out."""

    sha256: str
    size_bytes: int
    file_count: int
    skipped: list[str] = field(default_factory=list)


def copy_layer(source: Path, staging: Path, max_bytes: int, max_files: int) -> Copied:
    """Copy the regular files and directories under ``source`` (a hostile workspace directory)
    into ``staging`` (created here) and hash them. Raises StorageError past a bound."""
    staging.mkdir(mode=0o755)
    digest, copied = hashlib.sha256(), Copied("", 0, 0)
    bounds = hostfs.Bounds(max_files, 64, COPY_DEADLINE_S)
    try:
        with hostfs.root(source) as src_fd:
            for item in hostfs.walk(src_fd, bounds):
                _copy_item(src_fd, staging, item, digest, copied, max_bytes)
    except hostfs.BoundExceeded as exc:
        raise StorageError(f"the layer is too large to keep: {exc}") from exc
    copied.sha256 = digest.hexdigest()
    return copied


def _copy_item(src_fd: int, staging: Path, item: hostfs.Item, digest: hashlib._Hash,
               copied: Copied, max_bytes: int) -> None:
    if item.kind == "dir":
        (staging / item.path).mkdir(mode=0o755)
        digest.update(f"d\0{item.path}\n".encode())
        return
    if item.kind != "file":
        copied.skipped.append(f"{item.path} ({item.kind})")
        return
    executable = bool(item.st.st_mode & 0o111)
    sha, size = _copy_file(src_fd, item.path, staging / item.path, max_bytes - copied.size_bytes)
    copied.size_bytes += size
    copied.file_count += 1
    digest.update(f"f\0{item.path}\0{int(executable)}\0{sha}\n".encode())
    # pip's .pyc files name their source's mtime: keep it, or every import recompiles
    os.utime(staging / item.path, ns=(item.st.st_mtime_ns, item.st.st_mtime_ns))
    os.chmod(staging / item.path, 0o555 if executable else 0o444)


def _copy_file(src_fd: int, rel: str, dest: Path, budget_bytes: int) -> tuple[str, int]:
    """Copy one regular file (opened without following symlinks); its sha256 and size."""
    try:
        fd, _st = hostfs.open_regular(src_fd, rel)
    except OSError as exc:
        raise StorageError(f"could not read {rel!r} from the build workspace: {exc}") from exc
    sha, total = hashlib.sha256(), 0
    with hostfs.opened(fd), open(dest, "xb") as out:
        while chunk := os.read(fd, COPY_CHUNK_BYTES):
            total += len(chunk)
            if total > budget_bytes:
                raise StorageError("the layer is larger than environments.build_disk_mb allows")
            sha.update(chunk)
            out.write(chunk)
    return sha.hexdigest(), total


def install_layer(staging: Path, layers_dir: Path, sha256: str) -> Path:
    """Move a staged layer to ``layers_dir/<sha256>`` and make it read-only; an existing
    layer with that hash is kept (same content) and the staging copy removed."""
    final = layers_dir / sha256
    if final.is_dir():
        remove_tree(staging)
        return final
    _make_read_only(staging)
    try:
        staging.rename(final)
    except OSError:  # another build installed the same content first
        remove_tree(staging)
    return final


def _make_read_only(root: Path) -> None:
    for dirpath, _dirs, _files in os.walk(root, topdown=False):
        os.chmod(dirpath, 0o555)


def staging_dir(layers_dir: Path) -> Path:
    layers_dir.mkdir(parents=True, exist_ok=True)
    layers_dir.chmod(0o755)
    return layers_dir / f".staging-{uuid.uuid4().hex}"


def remove_tree(path: Path) -> None:
    """Remove a layer (read-only directories made writable first)."""
    if not path.exists():
        return
    for dirpath, _dirs, _files in os.walk(path):
        mode = os.lstat(dirpath).st_mode
        if stat.S_ISDIR(mode):
            os.chmod(dirpath, 0o755)
    shutil.rmtree(path, ignore_errors=True)


def private_index_addresses(domains: list[str]) -> list[str]:
    """The non-public addresses the package index hosts resolve to here (a mirror on a
    private network): what ``sandbox.egress_allow_private`` must list for builds to reach it."""
    found: set[str] = set()
    for domain in domains:
        try:
            infos = socket.getaddrinfo(domain, 443, proto=socket.IPPROTO_TCP)
        except OSError:  # swallow-ok: a name that does not resolve has no address to allow
            continue
        found.update(str(info[4][0]) for info in infos
                     if not ipaddress.ip_address(info[4][0]).is_global)
    return sorted(found)
