"""Untrusted documents become text without being parsed in the supervisor.

    doc = await parse_document(data, "report.pdf", ParseLimits.from_settings(settings.knowledge))

PDF, DOCX and HTML (parsers whose cost is not linear in the input: decompression,
XML trees, page trees) are parsed by :mod:`onebox.knowledge.parse_child` in a confined
child process (:mod:`onebox.sandbox.confined`: bubblewrap, seccomp, rlimits, host uid
65534 when onebox is root), with the document on stdin and its text back as bounded
JSON. Text, code and Markdown are parsed here, off the event loop, in linear time.

Every way a document can fail (too large, a parser error, out of memory, over the
time limit, too much text, a crash) is a ValidationError naming the document and the
setting involved; a sandbox that cannot start is SandboxUnavailable. Nothing waits
longer than ``knowledge.parse_timeout_s``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from onebox.config import KnowledgeSettings
from onebox.errors import SandboxUnavailable, ValidationError
from onebox.knowledge.loaders import LoadedDocument, from_extracted, source_type_of, text_document
from onebox.sandbox.confined import ConfinedLimits, ConfinedResult, run_confined

SANDBOXED_TYPES = frozenset({"pdf", "docx", "html"})
CHILD_SCRIPT = str(Path(__file__).with_name("parse_child.py"))
START_FAILURES = (b"bwrap:", b"setpriv:", b"prlimit:")
READ_BYTES = 1 << 20


@dataclass(frozen=True)
class ParseLimits:
    timeout_s: float = 30.0
    memory_mb: int = 512
    max_bytes: int = 32 << 20
    max_text_bytes: int = 16 << 20

    @classmethod
    def from_settings(cls, knowledge: KnowledgeSettings) -> ParseLimits:
        return cls(knowledge.parse_timeout_s, knowledge.parse_memory_mb,
                   knowledge.parse_max_bytes, knowledge.parse_max_text_bytes)


async def parse_document(data: bytes, name: str, limits: ParseLimits,
                         field: str = "file") -> LoadedDocument:
    """``data`` (a file called ``name``) as a document; ValidationError when it is refused."""
    kind = source_type_of(Path(name))
    if kind is None:
        raise ValidationError(f"cannot index {name!r}: unsupported file type; supported: "
                              "text, Markdown, HTML, PDF, DOCX and source code", field=field)
    if len(data) > limits.max_bytes:
        raise ValidationError(f"{name}: {len(data)} bytes is over the {limits.max_bytes}-byte "
                              "limit (knowledge.parse_max_bytes)", field=field)
    if kind not in SANDBOXED_TYPES:
        raw = data.decode("utf-8", errors="replace")
        return await asyncio.to_thread(text_document, raw, name, kind)
    argv = [sys.executable, "-I", "-B", CHILD_SCRIPT, kind, _stem(name), str(limits.max_bytes)]
    confined = ConfinedLimits(limits.timeout_s, limits.memory_mb, limits.max_text_bytes)
    result = await run_confined(argv, data, confined, extra_ro=(CHILD_SCRIPT,))
    return _document(result, name, kind, limits, field)


async def load_file(path: Path, limits: ParseLimits, field: str = "path") -> LoadedDocument:
    """A local file (``kb add``): a regular file, size checked before reading, then parsed."""
    data = await asyncio.to_thread(read_regular, path, limits.max_bytes, field)
    return await parse_document(data, path.name, limits, field)


def read_regular(path: Path, max_bytes: int, field: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ValidationError(f"{path}: cannot read it ({exc.strerror})", field=field) from exc
    with os.fdopen(fd, "rb") as handle:
        return read_bounded(handle.fileno(), str(path), max_bytes, field)


def read_bounded(fd: int, name: str, max_bytes: int, field: str) -> bytes:
    """All of a regular file's bytes; refuses FIFOs, devices and files over ``max_bytes``."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ValidationError(f"{name} is not a regular file", field=field)
    if st.st_size > max_bytes:
        raise ValidationError(f"{name}: {st.st_size} bytes is over the {max_bytes}-byte limit "
                              "(knowledge.parse_max_bytes)", field=field)
    os.set_blocking(fd, True)
    chunks: list[bytes] = []
    size = 0
    while size <= max_bytes and (chunk := os.read(fd, min(READ_BYTES, max_bytes + 1 - size))):
        chunks.append(chunk)
        size += len(chunk)
    if size > max_bytes:
        raise ValidationError(f"{name} grew past {max_bytes} bytes while being read",
                              field=field)
    return b"".join(chunks)


def _stem(name: str) -> str:
    return PurePosixPath(name).stem or name


def _document(result: ConfinedResult, name: str, kind: str, limits: ParseLimits,
              field: str) -> LoadedDocument:
    if result.timed_out:
        raise ValidationError(f"{name}: not parsed within {limits.timeout_s:g} s "
                              "(knowledge.parse_timeout_s); the document was not ingested",
                              field=field)
    if result.output_exceeded:
        raise ValidationError(f"{name}: its text is over {limits.max_text_bytes} bytes "
                              "(knowledge.parse_max_text_bytes); the document was not ingested",
                              field=field)
    reply = _reply(result.stdout)
    if reply is None:
        raise _failure(result, name, limits, field)
    if "error" in reply:
        raise ValidationError(f"{name}: {str(reply['error'])[:500]}", field=field)
    return from_extracted(reply, kind)


def _reply(stdout: bytes) -> dict[str, Any] | None:
    """The child's JSON if it has the expected shape (the child is not trusted either)."""
    try:
        reply = json.loads(stdout) if stdout else None
    except ValueError:
        return None
    if not isinstance(reply, dict):
        return None
    if "error" in reply:
        return {"error": reply["error"]}
    sections = reply.get("sections")
    ok = (isinstance(reply.get("title"), str) and isinstance(reply.get("metadata"), dict)
          and isinstance(sections, list)
          and all(isinstance(s, list) and len(s) == 2 and isinstance(s[1], str)
                  and (s[0] is None or isinstance(s[0], str)) for s in sections))
    return reply if ok else None


def _failure(result: ConfinedResult, name: str, limits: ParseLimits,
             field: str) -> Exception:
    tail = result.stderr_tail.decode(errors="replace").strip()[-500:]
    if result.stderr_tail.lstrip().startswith(START_FAILURES) or result.exit_code in (126, 127):
        return SandboxUnavailable(f"the document parser sandbox could not start ({tail}); "
                                  "run `onebox doctor`")
    if result.exit_code < 0:
        sig = _signal_name(-result.exit_code)
        return ValidationError(
            f"{name}: the parser was killed by {sig} (limits: {limits.memory_mb} MB memory, "
            f"{limits.timeout_s:g} s CPU; knowledge.parse_memory_mb / parse_timeout_s); "
            "the document was not ingested", field=field)
    return ValidationError(f"{name}: the parser failed (exit {result.exit_code}): {tail}",
                           field=field)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
