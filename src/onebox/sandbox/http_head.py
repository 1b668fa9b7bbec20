"""Strict reading of the HTTP/1.1 request heads a sandbox sends to the egress proxy.

A proxy and the server behind it must agree on where one request ends, or a
second request can be smuggled past the proxy's checks inside the first one's
body. So the head is read one way only (RFC 9112) and anything two parsers
could read differently is refused rather than repaired:

- lines end in CRLF; a bare CR or LF anywhere is refused;
- a header name is an RFC 9110 token directly followed by ``:`` (no whitespace
  before the colon: ``Transfer-Encoding : chunked`` is refused);
- no obs-fold continuation lines, no control characters in values;
- at most one ``Content-Length``, plain decimal digits;
- the whole head is at most :data:`MAX_HEAD_BYTES`.

``Transfer-Encoding`` itself is well-formed HTTP; the proxy refuses it (411)
because it forwards bodies by ``Content-Length`` only.

    head = parse_head(b"GET http://example.com/ HTTP/1.1\\r\\nAccept: */*\\r\\n\\r\\n")
    head.method, head.target, head.content_length      # 'GET', 'http://example.com/', 0
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_HEAD_BYTES = 32 * 1024
MAX_CONTENT_LENGTH_DIGITS = 15  # up to ~1 PB; more digits is not a real body
_TCHARS = rb"!#$%&'*+\-.^_`|~0-9A-Za-z"
_TOKEN = re.compile(rb"[" + _TCHARS + rb"]+")
_REQUEST_LINE = re.compile(rb"([" + _TCHARS + rb"]+) ([\x21-\x7e]+) (HTTP/1\.[01])")
_BAD_VALUE_BYTE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


class MalformedHead(ValueError):
    """A request head the proxy will not interpret; the message says what is wrong."""


@dataclass(frozen=True)
class RequestHead:
    """A parsed request head. Header names are lower-cased; values are trimmed of spaces."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[bytes, bytes], ...]
    raw_lines: tuple[bytes, ...]  # the header lines as sent, in order

    def values(self, name: bytes) -> list[bytes]:
        return [value for key, value in self.headers if key == name]

    @property
    def has_transfer_encoding(self) -> bool:
        return bool(self.values(b"transfer-encoding"))

    @property
    def content_length(self) -> int:
        found = self.values(b"content-length")
        return int(found[0]) if found else 0


def parse_head(head: bytes) -> RequestHead:
    """Parse a complete head (ending with an empty line); MalformedHead on anything ambiguous."""
    if len(head) > MAX_HEAD_BYTES:
        raise MalformedHead(f"request head over {MAX_HEAD_BYTES} bytes")
    if not head.endswith(b"\r\n\r\n"):
        raise MalformedHead("request head does not end with an empty CRLF line")
    lines = head[:-4].split(b"\r\n")
    if any(b"\r" in line or b"\n" in line for line in lines):
        raise MalformedHead("bare CR or LF in the request head (lines must end in CRLF)")
    method, target, version = _request_line(lines[0])
    headers = tuple(_header(line) for line in lines[1:])
    parsed = RequestHead(method, target, version, headers, tuple(lines[1:]))
    _check_content_length(parsed)
    return parsed


def _request_line(line: bytes) -> tuple[str, str, str]:
    match = _REQUEST_LINE.fullmatch(line)
    if match is None:
        raise MalformedHead("request line must be 'METHOD TARGET HTTP/1.1' with single spaces")
    method, target, version = (part.decode("ascii") for part in match.groups())
    return method, target, version


def _header(line: bytes) -> tuple[bytes, bytes]:
    if line[:1] in (b" ", b"\t"):
        raise MalformedHead("obs-fold continuation line (a header line starting with whitespace)")
    name, colon, value = line.partition(b":")
    if not colon:
        raise MalformedHead(f"header line without a colon: {_shown(line)}")
    if not _TOKEN.fullmatch(name):
        raise MalformedHead(f"header name {_shown(name)} is not a token "
                            "(no whitespace or control characters before the colon)")
    value = value.strip(b" \t")
    if _BAD_VALUE_BYTE.search(value):
        raise MalformedHead(f"control character in the value of header {_shown(name)}")
    return name.lower(), value


def _check_content_length(head: RequestHead) -> None:
    found = head.values(b"content-length")
    if len(found) > 1:
        raise MalformedHead("more than one Content-Length header")
    if found and not (found[0].isdigit() and len(found[0]) <= MAX_CONTENT_LENGTH_DIGITS):
        raise MalformedHead(f"Content-Length {_shown(found[0])} is not a plain decimal number")


def _shown(data: bytes) -> str:
    return repr(data[:60].decode("latin-1"))


def parse_target(head: bytes) -> tuple[str, str, int, bytes]:
    """(method, host, port, request head to send upstream) from a proxy request head."""
    return target_of(parse_head(head))


def target_of(head: RequestHead) -> tuple[str, str, int, bytes]:
    if head.method.upper() == "CONNECT":
        host, port = _split_hostport(head.target, 443)
        return "CONNECT", host, port, b""
    if not head.target.lower().startswith("http://"):
        raise MalformedHead("only absolute http:// URLs and CONNECT are proxied")
    authority, _, path = head.target[7:].partition("/")
    host, port = _split_hostport(authority, 80)
    origin = f"{head.method} /{path} {head.version}\r\n".encode("latin-1")
    return head.method, host, port, origin + _upstream_headers(head.raw_lines, authority)


HOP_HEADERS = (b"host:", b"connection:", b"proxy-connection:", b"proxy-authorization:",
               b"keep-alive:")  # fmt: skip


def _upstream_headers(lines: tuple[bytes, ...], authority: str) -> bytes:
    """The client's headers with Host forced to the checked authority and one request only.

    A different Host header (or a second request on a kept-alive connection) could
    otherwise reach another virtual host on the same allowed address.
    """
    kept = [ln for ln in lines if ln and not ln.lower().startswith(HOP_HEADERS)]
    kept += [b"Host: " + authority.encode("latin-1"), b"Connection: close"]
    return b"\r\n".join(kept) + b"\r\n\r\n"


def _split_hostport(text: str, default: int) -> tuple[str, int]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, _port(rest[1:]) if rest.startswith(":") else default
    host, sep, port = text.rpartition(":")
    return (host, _port(port)) if sep and port.isdigit() else (text, default)


def _port(text: str) -> int:
    if not (text.isdigit() and 0 < int(text) < 65536):
        raise MalformedHead(f"invalid port {text[:10]!r} in the request target")
    return int(text)
