"""Pure parts of the sandbox: output capture, egress rules, workspace snapshots and writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from onebox.errors import PolicyViolation
from onebox.sandbox.capture import BoundedCapture
from onebox.sandbox.egress import DomainRule, address_refusal, allowed, parse_target
from onebox.sandbox.workspace import check_session_id, diff, snapshot, write_files


def test_capture_keeps_head_and_tail_within_the_limit() -> None:
    cap = BoundedCapture(100)
    cap.feed(b"HEAD")
    for _ in range(10_000):
        cap.feed(b"x" * 97)
    cap.feed(b"TAIL")
    text = cap.text()
    assert cap.truncated and cap.total == 4 + 970_000 + 4
    assert text.startswith("HEAD") and text.endswith("TAIL")
    assert len(cap.head) + sum(len(c) for c in cap.tail) <= 100 + 97


def test_capture_small_output_is_untouched() -> None:
    cap = BoundedCapture(100)
    cap.feed(b"hello ")
    cap.feed(b"world")
    assert not cap.truncated and cap.text() == "hello world"


@pytest.mark.parametrize(
    "rules,host,port,ok",
    [
        (["api.example.com"], "api.example.com", 443, True),
        (["api.example.com"], "API.example.com.", 80, True),
        (["api.example.com"], "api.example.com", 8080, False),
        (["api.example.com:8080"], "api.example.com", 8080, True),
        (["api.example.com:8080"], "api.example.com", 443, False),
        (["*.example.org"], "a.b.example.org", 443, True),
        (["*.example.org"], "example.org", 443, False),
        (["*.example.org"], "evilexample.org", 443, False),
        (["api.example.com"], "api.example.com.evil.net", 443, False),
    ],
)
def test_domain_rules(rules: list[str], host: str, port: int, ok: bool) -> None:
    assert allowed([DomainRule.parse(r) for r in rules], host, port) is ok


@pytest.mark.parametrize(
    "ip,refused",
    [("127.0.0.1", "loopback"), ("169.254.169.254", "link-local"), ("10.1.2.3", "private"),
     ("192.168.1.1", "private"), ("::1", "loopback"), ("::ffff:10.0.0.1", "private"),
     ("0.0.0.0", "unspecified"), ("93.184.215.14", None)],
)  # fmt: skip
def test_private_addresses_are_refused(ip: str, refused: str | None) -> None:
    reason = address_refusal(ip, [])
    assert (reason is None) if refused is None else (refused in (reason or ""))


def test_private_allowlist_lets_tests_reach_localhost() -> None:
    import ipaddress

    assert address_refusal("127.0.0.1", [ipaddress.ip_network("127.0.0.1/32")]) is None


def test_parse_proxy_requests() -> None:
    assert parse_target(b"CONNECT api.example.com:443 HTTP/1.1\r\n\r\n")[:3] == (
        "CONNECT", "api.example.com", 443,
    )  # fmt: skip
    method, host, port, head = parse_target(
        b"GET http://h.example.com:8080/a?b=1 HTTP/1.1\r\nHost: h\r\n\r\n"
    )
    assert (method, host, port) == ("GET", "h.example.com", 8080)
    assert head.startswith(b"GET /a?b=1 HTTP/1.1\r\n")
    with pytest.raises(ValueError):
        parse_target(b"GET /relative HTTP/1.1\r\n\r\n")


def test_session_ids_are_checked() -> None:
    assert check_session_id("run-1.step_2") == "run-1.step_2"
    for bad in ("", "..", "../x", "a/b", "x" * 200):
        with pytest.raises(PolicyViolation):
            check_session_id(bad)


def test_snapshot_diff(tmp_path: Path) -> None:
    (tmp_path / "keep").write_text("1")
    (tmp_path / "change").write_text("1")
    (tmp_path / "remove").write_text("1")
    before = snapshot(tmp_path)
    (tmp_path / "change").write_text("22")
    (tmp_path / "remove").unlink()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "new").write_text("333")
    os.symlink("/etc/passwd", tmp_path / "link")
    changes = {c.path: c for c in diff(tmp_path, before, snapshot(tmp_path))}
    assert set(changes) == {"change", "remove", "sub/new", "link"}
    assert changes["change"].change == "modified" and changes["change"].size == 2
    assert changes["remove"].change == "deleted"
    assert changes["sub/new"].sha256 is not None
    assert changes["link"].sha256 is None


def test_write_files_refuses_links_and_escapes(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(outside, ws / "d")
    os.symlink(outside / "f", ws / "f")
    for name in ("d/x", "f", "../x", "/abs"):
        with pytest.raises(PolicyViolation):
            write_files(ws, {name: b"x"}, None)
    assert list(outside.iterdir()) == []
    write_files(ws, {"a/b/c.txt": b"ok"}, None)
    assert (ws / "a" / "b" / "c.txt").read_bytes() == b"ok"


def test_proxied_http_cannot_switch_virtual_host_or_keep_alive() -> None:
    head = (
        b"GET http://api.example.com/x HTTP/1.1\r\nHost: internal.example.net\r\n"
        b"Connection: keep-alive\r\nProxy-Authorization: secret\r\nAccept: */*\r\n\r\n"
    )
    _, host, _, upstream = parse_target(head)
    assert host == "api.example.com"
    lines = upstream.split(b"\r\n")
    assert b"Host: api.example.com" in lines and b"Connection: close" in lines
    assert not any(b"internal" in ln or b"Proxy-" in ln or b"keep-alive" in ln for ln in lines)
    assert b"Accept: */*" in lines
