"""The stateful interpreter's server: runs INSIDE the sandbox as ``/usr/bin/python3 -I``.

Standard library only (it runs on the sandbox's python, not onebox's). It connects to
the unix socket the host listens on in the run directory, then loops: read one frame
(a 4-byte big-endian length, then UTF-8 JSON ``{"op": "run", "code": ...}``), run the
code in one persistent namespace, answer with frames: ``result`` (rich outputs, the
last expression's value), ``error`` (the exception, traceback without this file's
frames), then ``done``. User prints go straight to fds 1 and 2 (the sandbox's stdout
and stderr pipes), so raw writes by subprocesses are captured too; before every frame
this server flushes them, and the host drains the pipes before reading the frame: output
and results keep their order. Nothing here is trusted by the host.
"""

from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import io
import json
import linecache
import os
import socket
import struct
import sys
import threading
import traceback
from typing import Any

SOCKET_PATH = "/run/onebox/interp.sock"
MAX_REQUEST_BYTES = 64 * 1024 * 1024
HEADER = struct.Struct(">I")
REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
)
_send_lock = threading.Lock()
_channel: socket.socket | None = None


def _send(frame: dict[str, Any], wait_ack: bool = False) -> None:
    """Send a frame; with ``wait_ack`` (outputs shown mid-cell) wait until the host has
    taken the output printed before it, so later prints cannot overtake it."""
    _flush_streams()
    payload = json.dumps(frame, ensure_ascii=False, default=str).encode("utf-8", "replace")
    assert _channel is not None
    with _send_lock:
        _channel.sendall(HEADER.pack(len(payload)) + payload)
        if wait_ack and _recv() != {"op": "ack"}:
            os._exit(70)  # the host broke the protocol: nothing sensible is left to do


def _recv_exact(size: int) -> bytes | None:
    assert _channel is not None
    chunks, left = [], size
    while left:
        chunk = _channel.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv() -> object:
    header = _recv_exact(HEADER.size)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    if size > MAX_REQUEST_BYTES:
        return None
    body = _recv_exact(size)
    return None if body is None else json.loads(body)


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # swallow-ok: user code replaced or closed it
            stream.flush()


def _text_stream(fd: int) -> io.TextIOWrapper:
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace",
                            write_through=True)


def _encode(mime: str, value: object) -> str | None:
    if isinstance(value, tuple) and value:  # (data, metadata) as IPython allows
        value = value[0]
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if mime == "application/json" and not isinstance(value, str):
        return json.dumps(value, default=str)
    return str(value)


def formats(obj: object) -> dict[str, str]:
    """Every representation the object offers, by MIME type (text/plain always)."""
    try:
        data = {"text/plain": repr(obj)}
    except Exception as exc:  # swallow-ok: a user object's broken __repr__ is shown as such
        data = {"text/plain": f"<unrepresentable {type(obj).__name__}: {exc!r}>"}
    if isinstance(obj, type):
        return data
    for mime, name in REPR_METHODS:
        method = getattr(obj, name, None)
        if not callable(method):
            continue
        try:
            encoded = _encode(mime, method())
        except Exception:  # swallow-ok: a user object's broken _repr_*_ only drops that MIME type
            continue
        if encoded is not None:
            data[mime] = encoded
    return data


def display(*objs: object) -> None:
    """Show objects as rich outputs of the running cell (as IPython's display())."""
    for obj in objs:
        _send({"type": "result", "data": formats(obj), "main": False}, wait_ack=True)


def _figures() -> None:
    """Open matplotlib figures come back as PNG results, then are closed."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        numbers = list(plt.get_fignums())
    except Exception:  # swallow-ok: user code broke pyplot's state; no figures to show
        return
    for number in numbers:
        try:
            figure = plt.figure(number)
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", bbox_inches="tight")
            png = base64.b64encode(buffer.getvalue()).decode("ascii")
            _send({"type": "result", "data": {"image/png": png, "text/plain": repr(figure)},
                   "main": False}, wait_ack=True)
        except Exception as exc:  # swallow-ok: said on the cell's stderr
            print(f"[onebox] could not render figure {number}: {exc!r}", file=sys.stderr)
    plt.close("all")


def _user_traceback(exc: BaseException) -> str:
    """The traceback without this server's frames (the cell's own frames first)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _report(exc: BaseException) -> None:
    _send({"type": "error", "name": type(exc).__name__, "value": str(exc),
           "traceback": _user_traceback(exc)})


def _compile(code: str, filename: str) -> tuple[Any, Any]:
    """(statements, last expression or None) of the cell."""
    tree = ast.parse(code, filename, "exec")
    last = None
    tail = tree.body[-1] if tree.body else None
    if isinstance(tail, ast.Expr):
        tree.body.pop()
        last = ast.Expression(tail.value)
    body = compile(tree, filename, "exec")
    return body, (compile(last, filename, "eval") if last is not None else None)


def run_cell(code: str, namespace: dict[str, Any], count: int) -> None:
    filename = f"<cell {count}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        body, last = _compile(code, filename)
        exec(body, namespace)
        value = eval(last, namespace) if last is not None else None
    except BaseException as exc:  # noqa: BLE001 # swallow-ok: SystemExit too; sent as the cell's error
        _figures()
        _report(exc)
        return
    _figures()
    if value is not None:
        namespace["_"] = value
        _send({"type": "result", "data": formats(value), "main": True})


def _python_path() -> None:
    """-I ignores PYTHONPATH; honour it (environment layers) and the working directory."""
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for entry in reversed(["", *entries]):
        if entry not in sys.path:
            sys.path.insert(0, entry)


def _setup() -> dict[str, Any]:
    global _channel
    _channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    _channel.connect(SOCKET_PATH)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the interpreter
    sys.stdout, sys.stderr = _text_stream(1), _text_stream(2)
    os.environ.setdefault("MPLBACKEND", "Agg")
    _python_path()
    builtins.display = display  # type: ignore[attr-defined]
    return {"__name__": "__main__", "__builtins__": builtins, "display": display}


def main() -> None:
    namespace = _setup()
    _send({"type": "ready", "pid": os.getpid()})
    count = 0
    while True:
        request = _recv()
        if not isinstance(request, dict) or request.get("op") != "run":
            return
        count += 1
        run_cell(str(request.get("code", "")), namespace, count)
        _send({"type": "done", "count": count})


if __name__ == "__main__":
    main()
