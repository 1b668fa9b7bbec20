"""Untrusted documents: parsed in a confined child within limits, never in the supervisor.

Hostile documents are built here (zipfile, hand-written PDF objects); each must be refused
with a reason naming the limit while a heartbeat task on the event loop keeps beating.
The parser child's confinement is probed with the same runner the parser uses: each
probe first runs unconfined to show it reaches its target (a 0600 file, a listening
socket), then confined, where it must not.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import subprocess
import sys
import threading
import zipfile
import zlib
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from onebox.errors import ValidationError
from onebox.knowledge import loaders
from onebox.knowledge.docparse import ParseLimits, parse_document
from onebox.sandbox import confined
from onebox.sandbox.confined import ConfinedLimits, run_confined

pytestmark = pytest.mark.skipif(confined.bwrap_path() is None, reason="bubblewrap unavailable")

LIMITS = ParseLimits(timeout_s=4.0, memory_mb=512, max_bytes=32 << 20, max_text_bytes=8 << 20)
MAX_LAG_S = 1.0


async def with_heartbeat(work: Awaitable[Any]) -> tuple[Any, float]:
    """Await ``work`` while a task measures how late the event loop wakes it up."""
    loop = asyncio.get_running_loop()
    lag = 0.0
    done = asyncio.Event()

    async def beat() -> None:
        nonlocal lag
        while not done.is_set():
            start = loop.time()
            await asyncio.sleep(0.01)
            lag = max(lag, loop.time() - start - 0.01)

    task = asyncio.create_task(beat())
    try:
        outcome: Any = await work
    except ValidationError as exc:
        outcome = exc
    finally:
        done.set()
        await task
    return outcome, lag


# -- documents ---------------------------------------------------------------------


def docx_with_body(body: bytes) -> bytes:
    """A real python-docx document whose word/document.xml body is replaced."""
    import docx

    buf = io.BytesIO()
    docx.Document().save(buf)
    out = io.BytesIO()
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "word/document.xml":
                head, _, _ = data.partition(b"<w:body>")
                data = head + b"<w:body>" + body + b"</w:body></w:document>"
            dst.writestr(item, data)
    return out.getvalue()


def docx_text_bomb(text_mb: int) -> bytes:
    """One paragraph of ``text_mb`` MB of text: a few hundred KB zipped."""
    buf = io.BytesIO(docx_with_body(b"<w:p><w:r><w:t>x</w:t></w:r></w:p>"))
    out = io.BytesIO()
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            if item.filename != "word/document.xml":
                dst.writestr(item, src.read(item))
                continue
            head, _, tail = src.read(item).partition(b"<w:t>x</w:t>")
            with dst.open("word/document.xml", "w", force_zip64=True) as part:
                part.write(head + b"<w:t>")
                for _ in range(text_mb):
                    part.write(b"A" * (1 << 20))
                part.write(b"</w:t>" + tail)
    return out.getvalue()


def docx_many_paragraphs(count: int) -> bytes:
    para = b'<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>h</w:t></w:r></w:p>'
    return docx_with_body(para * count)


def pdf(pages: list[bytes]) -> bytes:
    """A valid PDF with one Helvetica content stream per page (FlateDecode)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    for content in pages:
        packed = zlib.compress(content, 9)
        objects.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed)
                       + packed + b"\nendstream")
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents "
                       b"%d 0 R /Resources << /Font << /F1 << /Type /Font /Subtype /Type1 "
                       b"/BaseFont /Helvetica >> >> >> >>" % (len(objects)))
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(kids))
    return pdf_file(objects)


def pdf_file(objects: list[bytes]) -> bytes:
    """Numbered objects (1 is the catalog) with a correct xref table and trailer."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)


def pdf_deep_page_tree(depth: int) -> bytes:
    """A page tree ``depth`` levels deep: each /Pages node's only kid is the next one."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    for level in range(depth):
        objects.append(b"<< /Type /Pages /Kids [%d 0 R] /Count 1 >>" % (level + 3))
    objects.append(b"<< /Type /Page /MediaBox [0 0 612 792] >>")
    return pdf_file(objects)


def text_page(text: str) -> bytes:
    return b"BT /F1 12 Tf 72 720 Td (" + text.encode() + b") Tj ET"


# -- hostile documents are refused within the limits, the loop keeps beating ------------


async def test_docx_text_bomb_is_refused_by_the_memory_limit(tmp_path: Path) -> None:
    data = docx_text_bomb(700)
    assert len(data) < 4 << 20
    outcome, lag = await with_heartbeat(parse_document(data, "bomb.docx", LIMITS))
    assert isinstance(outcome, ValidationError), outcome
    assert "bomb.docx" in outcome.message
    assert "memory" in outcome.message or "parse_max_text_bytes" in outcome.message
    assert lag < MAX_LAG_S


async def test_docx_that_parses_forever_is_stopped_at_the_timeout() -> None:
    data = docx_many_paragraphs(400_000)
    outcome, lag = await with_heartbeat(parse_document(data, "slow.docx", LIMITS))
    assert isinstance(outcome, ValidationError), outcome
    assert "not parsed within 4 s (knowledge.parse_timeout_s)" in outcome.message
    assert lag < MAX_LAG_S


async def test_pdf_content_stream_bomb_is_stopped_at_the_timeout() -> None:
    data = pdf([b"BT /F1 12 Tf " + b"(x) Tj 1 0 Td " * 3_000_000 + b"ET"] * 2)
    assert len(data) < 1 << 20
    outcome, lag = await with_heartbeat(parse_document(data, "bomb.pdf", LIMITS))
    assert isinstance(outcome, ValidationError), outcome
    assert "bomb.pdf" in outcome.message and "knowledge.parse_" in outcome.message
    assert lag < MAX_LAG_S


async def test_pdf_with_a_huge_page_tree_is_refused_within_the_limits() -> None:
    data = pdf_deep_page_tree(200_000)
    assert len(data) < LIMITS.max_bytes
    outcome, lag = await with_heartbeat(parse_document(data, "pages.pdf", LIMITS))
    assert isinstance(outcome, ValidationError), outcome
    assert "pages.pdf" in outcome.message
    assert lag < MAX_LAG_S


async def test_markdown_heading_of_spaces_does_not_stall_the_loop() -> None:
    data = b"# a" + b" " * 3000 + b"b\n\nbody\n"
    outcome, lag = await with_heartbeat(parse_document(data, "notes.md", LIMITS))
    assert outcome.sections[0].heading == "a" + " " * 3000 + "b"
    assert lag < MAX_LAG_S


async def test_oversized_document_is_refused_before_parsing() -> None:
    limits = ParseLimits(max_bytes=1024)
    with pytest.raises(ValidationError, match="knowledge.parse_max_bytes"):
        await parse_document(b"x" * 2048, "big.pdf", limits)


# -- normal documents give the same text as the in-process loaders ----------------------


async def test_normal_pdf_docx_html_give_the_same_text_as_before(tmp_path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Intro", 1)
    document.add_paragraph("Hello from docx.")
    document.save(str(tmp_path / "d.docx"))
    (tmp_path / "p.html").write_text("<html><head><title>T</title><script>x()</script></head>"
                                     "<body><h1>One</h1><p>First.</p><h2>Two</h2><p>2nd.</p>")
    (tmp_path / "r.pdf").write_bytes(pdf([text_page("Leases renew"), text_page("every 10 s")]))
    for name in ("d.docx", "p.html", "r.pdf"):
        before = loaders.load_path(tmp_path / name)
        after = await parse_document((tmp_path / name).read_bytes(), name, LIMITS)
        assert after == before
        assert after.text.strip()
    assert "Leases renew" in after.text and after.metadata == {"pages": 2}


# -- the parser child's confinement -----------------------------------------------------

PROBE = r"""
import json, os, socket, sys
out = {}
def attempt(name, fn):
    try:
        out[name] = repr(fn())
    except OSError as exc:
        out[name] = "denied " + type(exc).__name__
attempt("secret", lambda: open(sys.argv[1]).read())
attempt("shadow", lambda: open("/etc/shadow").read(1))
attempt("connect", lambda: socket.create_connection(("127.0.0.1", int(sys.argv[2])), 2).close())
def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    return os.waitpid(pid, 0)
attempt("fork", fork)
out["uid_map"] = open("/proc/self/uid_map").read().split()
out["caps"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")]
print(json.dumps(out))
"""


@pytest.fixture()
def listener() -> Any:
    server = socket.create_server(("127.0.0.1", 0))
    hits: list[int] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            hits.append(1)
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1], hits
    server.close()


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    os.chmod(secret, 0o600)
    return secret


async def test_parser_child_cannot_read_host_files_or_reach_the_network(
    tmp_path: Path, listener: tuple[int, list[int]]
) -> None:
    port, hits = listener
    secret = _secret(tmp_path)
    argv = [sys.executable, "-I", "-c", PROBE, str(secret), str(port)]
    plain = json.loads(subprocess.run(argv, capture_output=True, check=True).stdout)
    assert plain["secret"] == repr("host secret") and hits == [1]  # the probe reaches both
    result = await run_confined(argv, b"", ConfinedLimits(20.0, 512, 1 << 20))
    inside = json.loads(result.stdout)
    assert inside["secret"].startswith("denied"), inside
    assert inside["shadow"].startswith("denied"), inside
    assert inside["connect"].startswith("denied"), inside
    assert hits == [1]
    assert inside["fork"].startswith("denied"), inside  # RLIMIT_NPROC: no new processes
    assert inside["caps"] == ["0000000000000000"]


@pytest.mark.skipif(os.geteuid() != 0, reason="identity change applies when onebox is root")
async def test_parser_child_is_never_host_root() -> None:
    argv = [sys.executable, "-I", "-c", PROBE, "/nonexistent", "1"]
    result = await run_confined(argv, b"", ConfinedLimits(20.0, 512, 1 << 20))
    inside = json.loads(result.stdout)
    outside_uid = inside["uid_map"][1]
    assert outside_uid == "0" and os.getuid() == 0  # init user namespace: ids are host ids
    probe = [sys.executable, "-I", "-c", "import os; print(os.getuid(), os.getgid())"]
    who = await run_confined(probe, b"", ConfinedLimits(20.0, 512, 1 << 20))
    assert who.stdout.split() == [b"65534", b"65534"]


async def test_timeout_kills_the_child_and_returns() -> None:
    argv = [sys.executable, "-I", "-c", "import time; time.sleep(600)"]
    result, lag = await with_heartbeat(run_confined(argv, b"", ConfinedLimits(1.0, 512, 1024)))
    assert result.timed_out and result.exit_code < 0
    assert lag < MAX_LAG_S


async def test_output_over_the_cap_is_cut_and_the_child_killed() -> None:
    argv = [sys.executable, "-I", "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"]
    result = await run_confined(argv, b"", ConfinedLimits(20.0, 512, 1 << 20))
    assert result.output_exceeded and result.stdout == b"" and result.exit_code < 0
