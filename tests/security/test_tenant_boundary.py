"""Tenant boundary, generated from the app's own router: every route x every attacker.

The route list is read from ``create_app``'s router at test time (the OpenAPI document and the
routes it hides: E2B envd, Connect RPC, the code interpreter), so a new route is attacked
without a hand-written test. Each path parameter names a resource kind (RESOURCE_OF), each
query or body field of the schema is mapped in FIELD_OF, each MCP tool argument in MCP_ARGS;
anything unmapped fails a guard test saying what to add.

The victim (globex) owns one of every kind, made through the API with its own key. The
attackers are: no key, a revoked key, another tenant's valid key (acme) naming globex's ids
in every path parameter, sandbox header and resource-naming body or query field, acme's
sandbox access token on globex's sandbox and everywhere, and globex's own sandbox token
outside its sandbox. Every answer must be 401/403/404 (422 for a malformed value): never
2xx, never 5xx. Lists and searches with a valid foreign key (and a field read as a name of
the caller's own tenant) may answer 2xx, only as a never-used name would and without any of
the victim's ids or text. Failures are collected and asserted at the end, naming route,
method, attacker and status. Before the sweep the owner's key reads every resource the
sweep names (the probes reach real targets); after it, they must be as they were. The MCP
HTTP app (``onebox mcp --http``, a separate app) gets the same attackers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from test_e2b_tenancy import _serving as serving

from onebox.api import create_app
from onebox.config import Settings, load_settings
from onebox.llm.embedding import EmbeddingKind, EmbeddingModel, Vector
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services.api_keys import create_key, revoke_key
from onebox.runtime.services.service import Runtime
from onebox.store.db import Database

SECRET = "GLOBEX-VAULT-7731"
PLAN = {"name": "victim-plan", "steps": [
    {"id": "s", "tool": "bash", "code": f"cat in.txt > out.txt; echo {SECRET} >> out.txt"}]}

# path parameter -> the resource kind it names (a dict: by route prefix, for shared names)
RESOURCE_OF: dict[str, str | dict[str, str]] = {
    "run_id": "run",
    "other_id": "run",  # the second run of a comparison
    "step_id": "step",
    "call_id": "model_call",
    "session_id": "session",
    "snapshot_id": "snapshot",
    "document_id": "document",
    "memory_id": "memory",
    "thread_id": "thread",
    "sandbox_id": "sandbox",
    "name": {"/v1/profiles/": "profile", "/v1/environments/": "environment"},
    "path": {"/v1/runs/{run_id}/files/": "run_file", "/v1/runs/{run_id}/artifacts/": "run_file",
             "/v1/sessions/": "session_file"},
    "method": {"/e2b/sandbox/filesystem.Filesystem/": "fs_method",
               "/e2b/sandbox/process.Process/": "process_method"},
    "context_id": "context",  # E2B's code contexts: onebox has none (one interpreter)
}
# routes that name their resource in a header instead of the path
HEADER_RESOURCE = {"/e2b/sandbox/": ("E2b-Sandbox-Id", "sandbox")}
# answered to anyone: liveness, readiness, the schema, the console's redirect
PUBLIC = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/openapi.json"), ("GET", "/")}
# answered before auth with one constant refusal that reads and names nothing: E2B's code
# context calls (the SDK sends them no access token), "code contexts are not supported"
REFUSED_TO_ALL = {("POST", "/e2b/sandbox/contexts"), ("GET", "/e2b/sandbox/contexts"),
                  ("DELETE", "/e2b/sandbox/contexts/{context_id}"),
                  ("POST", "/e2b/sandbox/contexts/{context_id}/restart")}
# a valid foreign key writes its OWN tenant's object of that name (names are per tenant);
# allowed only because the victim's object is checked unchanged afterwards
OWN_NAMESPACE = {("PUT", "/v1/profiles/{name}")}
REFUSED = {401, 403, 404, 422}
# reads the owner's control cannot make either: a plan run calls no model (the call id is a
# random one), and a finished run's workspace is gone (its files are its artifacts)
NO_CONTROL = {"/v1/runs/{run_id}/model-calls/{call_id}", "/v1/runs/{run_id}/files/{path:path}",
              # E2B reads onebox refuses its owner too (409, "does not ..."), after the
              # tenant check: a foreign caller still gets "not found"
              "/e2b/sandboxes/{sandbox_id}/metrics", "/e2b/sandboxes/{sandbox_id}/logs",
              "/e2b/v2/sandboxes/{sandbox_id}/logs"}
# E2B's own answer for a sandbox the caller cannot reach (the SDK's is_running() reads it)
ALSO_REFUSED = {("GET", "/e2b/sandbox/health"): {502}}
# Connect RPC streams answer 200 and put the error in the end-of-stream frame
CONNECT_CODES = {"unauthenticated": 401, "permission_denied": 403, "not_found": 404,
                 "invalid_argument": 422}
PARAM = re.compile(r"{(\w+)(?::\w+)?}")


@dataclass(frozen=True)
class Route:
    method: str
    path: str

    @property
    def params(self) -> list[str]:
        return PARAM.findall(self.path)


def app_routes(app: Any) -> list[Route]:
    """Every (method, path) the app answers: its router walked, schema-hidden routes too."""
    found: list[Route] = []

    def walk(routes: Sequence[Any]) -> None:
        for r in routes:
            inner = getattr(r, "original_router", None)
            if inner is not None:
                walk(inner.routes)
            elif getattr(r, "methods", None):
                found.extend(Route(m, r.path) for m in sorted(r.methods) if m != "HEAD")

    walk(app.router.routes)
    return sorted(set(found), key=lambda r: (r.path, r.method))


def kind_of(param: str, path: str) -> str | None:
    kind = RESOURCE_OF.get(param)
    if isinstance(kind, dict):
        return next((k for prefix, k in kind.items() if path.startswith(prefix)), None)
    return kind


def header_of(path: str) -> tuple[str, str] | None:
    return next((h for prefix, h in HEADER_RESOURCE.items() if path.startswith(prefix)), None)


def _app() -> Any:
    import tempfile
    from pathlib import Path

    return create_app(load_settings(home=Path(tempfile.mkdtemp(prefix="onebox-routes-"))))


def test_every_route_parameter_names_a_resource() -> None:
    """The sweep fills every path parameter with a victim's id: a parameter it cannot map
    would leave a route unattacked, so it fails here instead."""
    app = _app()
    routes = app_routes(app)
    unmapped = sorted({f"add {p!r} to RESOURCE_OF (route {r.method} {r.path}): which "
                       "resource kind does it name?"
                       for r in routes for p in r.params if kind_of(p, r.path) is None})
    assert not unmapped, "\n".join(unmapped)
    schema_ops = {(m.upper(), p) for p, ops in app.openapi()["paths"].items() for m in ops}
    walked = {(r.method, re.sub(r":\w+}", "}", r.path)) for r in routes}
    assert schema_ops <= walked, f"the router walk missed {schema_ops - walked}"
    assert any(r.path.startswith("/e2b/sandbox/") for r in routes), "envd routes not walked"


def _schema_fields(schema: dict[str, Any]) -> dict[str, set[str]]:
    """Every query parameter and request-body property of the schema -> its routes."""
    parts = schema["components"]["schemas"]

    def resolved(node: dict[str, Any]) -> dict[str, Any]:
        return parts[node["$ref"].split("/")[-1]] if "$ref" in node else node

    fields: dict[str, set[str]] = {}
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            where = f"{method.upper()} {path}"
            for param in op.get("parameters", []):
                if param["in"] == "query":
                    fields.setdefault(param["name"], set()).add(where)
            for content in op.get("requestBody", {}).get("content", {}).values():
                body = resolved(content["schema"])
                for alt in body.get("anyOf", [body]):
                    for name in resolved(alt).get("properties", {}):
                        fields.setdefault(name, set()).add(where)
    return fields


def test_every_field_that_names_a_resource_is_probed() -> None:
    """A query or body field of the schema must be in FIELD_OF, and one that names a
    resource kind must be sent the victim's in FIELD_PROBES."""
    fields = _schema_fields(_app().openapi())
    unmapped = sorted(f"add {f!r} to FIELD_OF ({', '.join(sorted(routes))}): which resource "
                      "does it name, if any?" for f, routes in fields.items() if f not in FIELD_OF)
    assert not unmapped, "\n".join(unmapped)
    probed = set().union(*(p[4] for p in FIELD_PROBES))
    missing = sorted(f"add a FIELD_PROBES entry sending the victim's {FIELD_OF[f]} in {f!r}"
                     for f in fields if FIELD_OF[f] not in (None, NAMESPACED) and f not in probed)
    assert not missing, "\n".join(missing)


class FlatEmbeddingModel(EmbeddingModel):
    """Memories and documents need vectors; this suite never ranks them."""

    name, dim = "test/flat-384", 384

    async def _embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[Vector]:
        return [[1.0] * self.dim for _ in texts]


@dataclass
class Server:
    url: str
    rt: Runtime
    keys: dict[str, str]
    app: Any
    victim: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)

    def client(self, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers=headers or {}, timeout=60)


@pytest.fixture
async def server(db: Database, settings: Settings) -> AsyncIterator[Server]:
    from onebox.sandbox.registry import get_backend

    settings.runtime.poll_s = 0.1
    settings.api.events_poll_s = 0.05
    backend = get_backend(settings)
    rt = Runtime(settings, db, backend)
    keys = {t: (await create_key(db, tenant_id=t, name=f"{t}-boundary"))[0]
            for t in ("acme", "globex")}
    revoked, row = await create_key(db, tenant_id="acme", name="acme-revoked")
    await revoke_key(db, row["prefix"])
    keys["revoked"] = revoked
    stop = asyncio.Event()
    work = Worker(db, backend, settings, objects=rt.objects)
    runner = asyncio.create_task(work.serve(stop, drain_s=2))
    app = create_app(settings, runtime=rt, embedding=FlatEmbeddingModel())
    try:
        async with serving(app) as url:
            yield Server(url, rt, keys, app)
    finally:
        stop.set()
        await runner
        await backend.close()
        await rt.objects.close()


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _ok(r: httpx.Response, what: str) -> Any:
    assert r.status_code < 300, f"victim setup: {what} answered {r.status_code}: {r.text[:400]}"
    return r.json() if r.content else None


async def _make_victim(s: Server) -> None:
    """globex owns one of every kind, each made through the API with its own key."""
    v = s.victim
    async with s.client(_bearer(s.keys["globex"])) as g:
        up = _ok(await g.post("/v1/uploads", files={"files": ("in.txt", b"victim input\n")}),
                 "upload")
        v["upload"] = str(up["uploads"][0]["id"])
        v["idempotency"] = "victim-idempotency-key"
        v["run"] = _ok(await g.post("/v1/runs", json={
            "plan": PLAN, "files": [v["upload"]], "idempotency_key": v["idempotency"]}),
            "run")["run_id"]
        for _ in range(600):
            detail = _ok(await g.get(f"/v1/runs/{v['run']}"), "run detail")
            if detail["run"]["status"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                break
            await asyncio.sleep(0.1)
        assert detail["run"]["status"] == "SUCCEEDED", detail["run"]
        v["step"], v["run_file"] = "s", "out.txt"
        v["model_call"] = str(uuid.uuid4())  # a plan run calls no model: any id is foreign
        v["session"] = _ok(await g.post("/v1/sessions"), "session")["id"]
        _ok(await g.post(f"/v1/sessions/{v['session']}/execute",
                         json={"language": "bash", "code": f"echo {SECRET} > secret.txt"}),
            "session execute")
        v["session_file"] = "secret.txt"
        snaps = _ok(await g.get("/v1/snapshots", params={"run_id": v["run"]}), "snapshots")
        if not snaps["snapshots"]:
            from onebox.objects import get_object_store
            from onebox.snapshots.archive import record_snapshot

            store = get_object_store(s.rt.settings)
            await record_snapshot(s.rt.db, store, s.rt.backend.workspace(v["session"]),
                                  session_id=v["session"])
            await store.close()
            snaps = _ok(await g.get("/v1/snapshots"), "snapshots")
        v["snapshot"] = str(snaps["snapshots"][0]["id"])
        v["thread"] = _ok(await g.post("/v1/threads", json={"title": "victim thread"}),
                          "thread")["id"]
        v["environment"] = "victim-env"
        _ok(await g.post("/v1/environments", json={"name": v["environment"], "packages": ["six"],
                                                   "wait": False}), "environment")
        # (no wait: the build needs the network, which tests may not have; the row exists
        # from the request on, BUILDING, then READY or FAILED: either is globex's)
        v["profile"] = "victim-profile"
        _ok(await g.put(f"/v1/profiles/{v['profile']}", json={"model": "victim-model", "memory_scope": "victim"}),
            "profile")
        v["memory"] = str(_ok(await g.post("/v1/memory", json={
            "scope": "victim", "content": f"The vault code is {SECRET}."}), "memory")["id"])
        v["document"] = str(_ok(await g.post("/v1/knowledge/documents", json={
            "source": "vault.md", "collection": "victim", "text": f"Vault: {SECRET}."}),
            "document")["document_id"])
        sbx = _ok(await g.post("/e2b/v2/sandboxes", json={"templateID": "base"},
                               headers={"X-API-Key": s.keys["globex"]}), "e2b sandbox")
        v["sandbox"] = sbx["sandboxID"]
        s.tokens["globex"] = sbx["envdAccessToken"]
        _ok(await g.post("/e2b/sandbox/files", params={"path": "/home/user/secret.txt"},
                         files={"file": ("secret.txt", SECRET.encode())},
                         headers=_sandbox_headers(v["sandbox"], sbx["envdAccessToken"])),
            "e2b file")
    v["fs_method"], v["process_method"], v["context"] = "Remove", "SendInput", "default"
    async with s.client(_bearer(s.keys["acme"])) as a:
        own = _ok(await a.post("/e2b/v2/sandboxes", json={"templateID": "base"},
                               headers={"X-API-Key": s.keys["acme"]}), "attacker's sandbox")
        s.tokens["acme"] = own["envdAccessToken"]


def _sandbox_headers(sandbox_id: str, token: str) -> dict[str, str]:
    return {"E2b-Sandbox-Id": sandbox_id, "X-Access-Token": token}


# a body that would do harm (or read the secret) for the owner, per route
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/v1/sessions/{session_id}/execute"): {"language": "bash", "code": "cat secret.txt"},
    ("POST", "/v1/threads/{thread_id}/messages"): {"message": "what is the vault code?"},
    ("POST", "/e2b/sandbox/filesystem.Filesystem/{method}"): {"path": "/home/user/secret.txt"},
    ("POST", "/e2b/sandbox/execute"): {"code": "print(open('/home/user/secret.txt').read())"},
    ("POST", "/e2b/sandbox/process.Process/Start"): {
        "process": {"cmd": "cat", "args": ["/home/user/secret.txt"]}},
    ("POST", "/e2b/sandboxes/{sandbox_id}/timeout"): {"timeout": 1},
    ("POST", "/e2b/v2/sandboxes/{sandbox_id}/connect"): {"timeout": 1},
    ("POST", "/e2b/sandboxes/{sandbox_id}/connect"): {"timeout": 1},
    ("PUT", "/v1/profiles/{name}"): {"model": "m", "memory_scope": "attacker"},
    ("POST", "/v1/runs/{run_id}/fork"): {"at": "s", "set": {"s.code": "cat out.txt"}},
    ("POST", "/v1/runs/{run_id}/steps/{step_id}/approve"): {},
    ("POST", "/v1/runs/{run_id}/steps/{step_id}/reject"): {},
}
QUERIES: dict[tuple[str, str], dict[str, str]] = {
    ("GET", "/e2b/sandbox/files"): {"path": "/home/user/secret.txt"},
    ("POST", "/e2b/sandbox/files"): {"path": "/home/user/secret.txt"},
}
# query and body fields of the schema -> what they name: a resource kind (probed below with
# the victim's), NAMESPACED (a name inside the caller's own tenant: acme's "victim" scope is
# not globex's; searched and listed in the sweep) or None (names nothing)
NAMESPACED = "namespaced"
FIELD_OF: dict[str, str | None] = {
    "run_id": "run", "session_id": "session", "files": "upload", "profile": "profile",
    "environment": "environment", "templateID": "environment", "idempotency_key": "idempotency",
    "to": "step", "from": "step", "at": "step",  # steps of the path's run: it is checked first
    "set": None,  # a fork's changes: fields of the plan's steps
    "turn": None,  # a turn number of the path's thread, which is checked first
    "wait_s": None,  # how long a replay request waits for its run
    "collection": NAMESPACED, "collections": NAMESPACED, "scope": NAMESPACED,
    "user_id": NAMESPACED, "name": NAMESPACED, "path": NAMESPACED, "file": None,
    **dict.fromkeys((
        "after", "allow_domains", "before", "by", "code", "comment", "content", "envVars",
        "format", "happened_at", "include_superseded", "k", "kind", "language", "limit",
        "max_access", "max_cost", "memory_mb", "message", "metadata", "older_than_days",
        "packages", "plan", "post", "q", "query", "question", "since", "source", "state", "stateless",
        "status", "stdin", "task", "text", "timeout", "timeout_s", "title", "until", "wait",
        "zip")),
    # Sandbox.list's filters and page: they narrow the caller's own list, naming nothing
    **dict.fromkeys(("template", "startedAfter", "order", "nextToken")),
}
FIELD_PROBES: list[tuple[str, str, str, Any, set[str]]] = [
    ("GET /v1/snapshots?run_id", "/v1/snapshots", "params",
     lambda ids: {"run_id": ids["run"]}, {"run_id"}),
    ("GET /v1/snapshots?session_id", "/v1/snapshots", "params",
     lambda ids: {"session_id": ids["session"]}, {"session_id"}),
    ("POST /v1/runs files=[upload]", "/v1/runs", "json",
     lambda ids: {"plan": PLAN, "files": [ids["upload"]]}, {"files"}),
    ("POST /v1/runs profile=", "/v1/runs", "json",
     lambda ids: {"task": "hi", "profile": ids["profile"]}, {"profile"}),
    ("POST /v1/runs idempotency_key=", "/v1/runs", "json",
     lambda ids: {"plan": PLAN, "idempotency_key": ids["idempotency"]}, {"idempotency_key"}),
    ("POST /v1/sessions environment=", "/v1/sessions", "json",
     lambda ids: {"environment": ids["environment"]}, {"environment"}),
    ("POST /v1/threads profile=", "/v1/threads", "json",
     lambda ids: {"profile": ids["profile"]}, {"profile"}),
    ("POST /e2b/v2/sandboxes templateID=", "/e2b/v2/sandboxes", "json",
     lambda ids: {"templateID": ids["environment"]}, {"templateID"}),
    ("GET /v1/runs/{run_id}/diff?to", "/v1/runs/{run}/diff", "params",
     lambda ids: {"to": ids["step"], "from": ids["step"]}, {"to", "from"}),
    ("POST /v1/runs/{run_id}/fork at=", "/v1/runs/{run}/fork", "json",
     lambda ids: {"at": ids["step"]}, {"at"}),
]
MULTIPART = {("POST", "/v1/sessions/{session_id}/files"), ("POST", "/e2b/sandbox/files"),
             ("POST", "/v1/uploads"), ("POST", "/v1/knowledge/upload")}


def _probes(routes: list[Route], v: dict[str, str]) -> Iterator[tuple[Route, dict[str, Any]]]:
    """Each route that names a resource (path or header), filled with the victim's ids, plus
    the body and query fields that name one (first: the sweep's PUT of a profile of the
    victim's name makes the attacker one of its own)."""
    # body and query fields that name a resource: each with its twin naming a fresh one
    fresh = {k: str(uuid.uuid4()) for k in ("run", "session", "upload")} | {
        "profile": "never-made", "environment": "never-built", "idempotency": "never-used",
        "step": "s"}
    for label, url, where, build, _fields in FIELD_PROBES:
        method, name = label.split(" ", 1)
        yield Route(method, name), {"url": url.format(**v), where: build(v), "fresh": {
            "url": url.format(**fresh), where: build(fresh)}}
    for r in routes:
        url = r.path
        for p in r.params:
            kind = kind_of(p, r.path)
            assert kind is not None
            url = re.sub("{" + p + r"(?::\w+)?}", v[kind], url, count=1)
        header = header_of(r.path)
        if not r.params and header is None:
            continue
        req: dict[str, Any] = {"url": url, "params": QUERIES.get((r.method, r.path))}
        if (r.method, r.path) in MULTIPART:
            req["files"] = {"file": ("secret.txt", b"overwritten")}
        elif r.method in ("POST", "PUT", "PATCH"):
            req["json"] = BODIES.get((r.method, r.path), {})
        if header is not None:
            req["headers"] = {header[0]: v[header[1]]}
        yield r, req


async def _send(c: httpx.AsyncClient, method: str, req: dict[str, Any],
                headers: dict[str, str]) -> httpx.Response:
    kw = {k: req[k] for k in ("params", "json", "files") if req.get(k) is not None}
    hdrs = {**headers, **req.get("headers", {})}
    async with c.stream(method, req["url"], headers=hdrs, **kw) as r:  # type: ignore[arg-type]
        if r.status_code < 300 and r.headers.get("content-type", "").startswith(
                "text/event-stream"):
            return r  # a stream that opened is already the finding
        await r.aread()
        return r


def status_of(r: httpx.Response) -> int:
    """The HTTP status, or for a Connect stream the status its end-of-stream error means."""
    if not r.headers.get("content-type", "").startswith("application/connect+"):
        return r.status_code
    body, code = r.content, None
    while len(body) >= 5:
        size = int.from_bytes(body[1:5], "big")
        frame, body = body[5:5 + size], body[5 + size:]
        with contextlib.suppress(ValueError):
            code = (json.loads(frame).get("error") or {}).get("code", code)
    return CONNECT_CODES.get(code or "", r.status_code)


def _leaks(text: str, v: dict[str, str]) -> list[str]:
    secrets = [SECRET] + [v[k] for k in ("run", "session", "snapshot", "thread", "memory",
                                         "document", "sandbox", "upload")]
    return [s for s in secrets if s in text]


async def test_no_route_crosses_the_tenant_boundary(server: Server) -> None:
    s = server
    await _make_victim(s)
    v = s.victim
    before = await _victim_intact(s)
    assert not before, "the owner cannot read its own resources: " + "\n".join(before)
    routes = app_routes(s.app)
    attackers = {
        "no key": {},
        "revoked key": {**_bearer(s.keys["revoked"]), "X-API-Key": s.keys["revoked"]},
        "another tenant's key": {**_bearer(s.keys["acme"]), "X-API-Key": s.keys["acme"]},
        "another sandbox's access token": {"X-Access-Token": s.tokens["acme"],
                                           **_bearer(s.tokens["acme"])},
        "the victim's sandbox token on other routes": {"X-Access-Token": s.tokens["globex"],
                                                       **_bearer(s.tokens["globex"])},
    }
    failures: list[str] = []
    sent = 0
    async with s.client() as c:
        # control: with the owner's key every read the sweep makes reaches a real resource
        owner = {**_bearer(s.keys["globex"]), "X-API-Key": s.keys["globex"]}
        for r, req in _probes(routes, v):
            if r.method == "GET" and "fresh" not in req and r.path not in NO_CONTROL \
                    and not r.path.endswith("/stream") and (r.method, r.path) not in REFUSED_TO_ALL:
                resp = await _send(c, r.method, req, owner)
                assert resp.status_code < 300, f"owner's {r.method} {req['url']}: {resp.text}"
        # 1, 2: every route refuses a missing or revoked key, and a sandbox's token outside
        # its sandbox, with 401 (public routes aside)
        for r in routes:
            if (r.method, r.path) in PUBLIC | REFUSED_TO_ALL:
                continue
            req = next((q for rr, q in _probes([r], v) if rr == r), {
                "url": r.path, "json": {} if r.method in ("POST", "PUT") else None})
            if (r.method, r.path) in MULTIPART:
                req = {**req, "json": None, "files": {"file": ("x.txt", b"x")}}
            for name in ("no key", "revoked key", "the victim's sandbox token on other routes"):
                if name.startswith("the victim's") and r.path.startswith("/e2b/sandbox/"):
                    continue  # its own sandbox (named in the probe's header): the token's use
                resp = await _send(c, r.method, req, attackers[name])
                sent += 1
                if status_of(resp) != 401:
                    failures.append(f"{r.method} {r.path} [{name}] -> {resp.status_code} "
                                    f"(want 401): {resp.text[:200]}")
        # 3, 4: valid credentials of someone else, naming the victim's resources
        for r, req in _probes(routes, v):
            for name in ("another tenant's key", "another sandbox's access token",
                         "the victim's sandbox token on other routes"):
                if name.startswith("the victim's") and r.path.startswith("/e2b/sandbox/"):
                    continue  # its own sandbox: the token's purpose
                resp = await _send(c, r.method, req, attackers[name])
                sent += 1
                status = status_of(resp)
                if "fresh" in req and status < 300:
                    # a field naming a resource may be accepted as a name of the caller's own
                    # namespace: only if the answer is the one a never-used name gets
                    fresh = await _send(c, r.method, req["fresh"], attackers[name])
                    sent += 1
                    if status_of(fresh) == status and not _leaks(resp.text, v):
                        continue
                if (r.method, r.path) in OWN_NAMESPACE and name == "another tenant's key" \
                        and status < 300:
                    continue
                if status not in REFUSED | ALSO_REFUSED.get((r.method, r.path), set()):
                    failures.append(f"{r.method} {r.path} as {req['url']} [{name}] -> {status}: "
                                    f"{resp.text[:200]}")
        # lists and searches: a valid foreign key sees none of the victim's ids
        async with s.client(_bearer(s.keys["acme"])) as a:
            for r in routes:
                if r.method != "GET" or r.params or header_of(r.path) or \
                        (r.method, r.path) in PUBLIC or r.path.endswith("/stream"):
                    continue
                resp = await a.get(r.path)
                sent += 1
                if resp.status_code >= 500 or _leaks(resp.text, v):
                    failures.append(f"GET {r.path} [another tenant's key, list] -> "
                                    f"{resp.status_code} leaks {_leaks(resp.text, v)}")
            for url, body in (("/v1/knowledge/search", {"query": "vault", "collections":
                                                        ["victim"]}),
                              ("/v1/memory/recall", {"scope": "victim", "query": "vault"}),
                              ("/v1/cache/lookup", {"question": "vault code?",
                                                    "scope": "victim"})):
                resp = await a.post(url, json=body)
                sent += 1
                if resp.status_code >= 500 or _leaks(resp.text, v):
                    failures.append(f"POST {url} [another tenant's key, search] -> "
                                    f"{resp.status_code} leaks {_leaks(resp.text, v)}")
    failures += await _victim_intact(s)
    print(f"tenant boundary: {len(routes)} routes, {sent} attacks")
    assert not failures, f"{len(failures)} boundary failures:\n" + "\n".join(failures)


async def _victim_intact(s: Server) -> list[str]:
    """After the sweep (cancels, deletes, restores, removes...): globex still has everything."""
    v, bad = s.victim, []
    async with s.client(_bearer(s.keys["globex"])) as g:
        checks = {
            "run": (f"/v1/runs/{v['run']}", lambda b: b["run"]["status"] == "SUCCEEDED"),
            "run artifact": (f"/v1/runs/{v['run']}/artifacts/out.txt", lambda b: SECRET in b),
            "session file": (f"/v1/sessions/{v['session']}/files/secret.txt",
                             lambda b: b.strip() == SECRET),
            "thread": (f"/v1/threads/{v['thread']}", lambda b: True),
            "environment": (f"/v1/environments/{v['environment']}", lambda b: True),
            "profile": (f"/v1/profiles/{v['profile']}",
                        lambda b: b["spec"].get("memory_scope") == "victim"),
            "snapshot": (f"/v1/snapshots/{v['snapshot']}/download", lambda b: True),
            "sandbox": (f"/e2b/sandboxes/{v['sandbox']}", lambda b: True),
            "memories": ("/v1/memory", lambda b: v["memory"] in str(b)),
            "documents": ("/v1/knowledge/documents", lambda b: v["document"] in str(b)),
        }
        for what, (url, check) in checks.items():
            r = await g.get(url, headers={"X-API-Key": s.keys["globex"]})
            body: Any = r.text
            with contextlib.suppress(ValueError):
                body = r.json() if "json" in r.headers.get("content-type", "") else r.text
            if r.status_code != 200 or not check(body):
                bad.append(f"victim's {what} changed by the sweep: {url} -> {r.status_code} "
                           f"{r.text[:200]}")
        r = await g.get("/e2b/sandbox/files", params={"path": "/home/user/secret.txt"},
                        headers=_sandbox_headers(v["sandbox"], s.tokens["globex"]))
        if r.status_code != 200 or r.text != SECRET:
            bad.append(f"victim's sandbox file changed: {r.status_code} {r.text[:200]}")
    return bad


# MCP tool argument -> the resource kind it names (None: names no resource of a tenant)
MCP_ARGS: dict[str, str | None] = {
    "run_id": "run", "session_id": "session", "path": "run_file", "scope": "memory_scope",
    "profile": "profile", "collection": "collection", "collections": "collection",
    "code": None, "language": None, "timeout_s": None, "allow_domains": None, "task": None,
    "files": None, "plan": None, "query": None, "k": None, "text": None, "wait_s": None,
    "timeout": None, "name": None, "metadata": None, "max_bytes": None, "yaml": None,
    "run_a": "run", "run_b": "run", "at": None, "set": None,  # at: a step of run_id's
}
MCP_CALL_ARGS = {"code": "print(open('secret.txt').read())", "language": "python",
                 "query": "vault code", "text": "attacker note", "task": "hi"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-03-26", "capabilities": {},
    "clientInfo": {"name": "tenant-boundary", "version": "1"}}}
MCP_ACCEPT = "application/json, text/event-stream"


def _rpc(r: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a streamable-HTTP response (plain JSON or one SSE event)."""
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:] for line in r.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1]) if data else {}
    return r.json() if r.content else {}


async def test_mcp_http_refuses_other_tenants_resources(server: Server) -> None:
    """`onebox mcp --http`: its one route refuses a missing, revoked or sandbox-token key
    with 401, and each tool (listed by the server itself) that takes a resource id answers a
    tool error for the victim's, leaking nothing and changing nothing."""
    from onebox.mcp.state import McpState
    from onebox.mcp.transports import HTTP_PATH, http_app

    s = server
    await _make_victim(s)
    v = {**s.victim, "memory_scope": "victim", "collection": "victim"}
    failures: list[str] = []
    state = McpState(s.rt.settings, s.rt, auth=True)
    async with serving(http_app(state, "127.0.0.1")) as url, \
            httpx.AsyncClient(base_url=url, timeout=60) as c:
        for name, key in (("no key", None), ("revoked key", s.keys["revoked"]),
                          ("a sandbox's access token", s.tokens["globex"])):
            headers = {"Accept": MCP_ACCEPT, **(_bearer(key) if key else {})}
            for method in ("POST", "GET", "DELETE"):
                r = await c.request(method, HTTP_PATH, headers=headers,
                                    json=INIT if method == "POST" else None)
                if r.status_code != 401:
                    failures.append(f"MCP {method} {HTTP_PATH} [{name}] -> {r.status_code}")
        headers = {"Accept": MCP_ACCEPT, **_bearer(s.keys["acme"])}
        init = await c.post(HTTP_PATH, json=INIT, headers=headers)
        assert init.status_code == 200, init.text
        headers |= {"mcp-session-id": init.headers["mcp-session-id"],
                    "mcp-protocol-version": "2025-03-26"}
        await c.post(HTTP_PATH, headers=headers,
                     json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools = _rpc(await c.post(HTTP_PATH, headers=headers, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/list"}))["result"]["tools"]
        unmapped = sorted(f"add {arg!r} (tool {t['name']}) to MCP_ARGS: which resource kind "
                          "does it name, if any?" for t in tools
                          for arg in t["inputSchema"].get("properties", {}) if arg not in MCP_ARGS)
        assert not unmapped, "\n".join(unmapped)
        calls = 0
        for n, tool in enumerate(tools, start=3):
            props = tool["inputSchema"].get("properties", {})
            named = [a for a in props if MCP_ARGS[a]]
            if not any(MCP_ARGS[a] in ("run", "session", "run_file") for a in named):
                continue  # namespaced names only (scope, collection, profile): below
            args = {a: MCP_CALL_ARGS[a] for a in tool["inputSchema"].get("required", [])
                    if a in MCP_CALL_ARGS}
            args |= {a: v[str(MCP_ARGS[a])] for a in named}
            r = await c.post(HTTP_PATH, headers=headers, json={
                "jsonrpc": "2.0", "id": n, "method": "tools/call",
                "params": {"name": tool["name"], "arguments": args}})
            calls += 1
            answer = _rpc(r)
            refused = "error" in answer or answer.get("result", {}).get("isError")
            if r.status_code >= 500 or not refused or SECRET in r.text:
                failures.append(f"MCP tool {tool['name']}({args}) [another tenant's key] -> "
                                f"{r.status_code} {r.text[:300]}")
        assert calls >= 4, f"only {calls} MCP tools take a run or session id: the list changed?"
        for tool, args in (("recall", {"query": "vault code", "scope": "victim"}),
                           ("search_knowledge", {"query": "vault code"})):
            r = await c.post(HTTP_PATH, headers=headers, json={
                "jsonrpc": "2.0", "id": 99, "method": "tools/call",
                "params": {"name": tool, "arguments": args}})
            if r.status_code >= 500 or SECRET in r.text:
                failures.append(f"MCP tool {tool}({args}) [another tenant's key] leaks: "
                                f"{r.text[:300]}")
        # control: the owner's key reaches the same file through the same tool
        own = {"Accept": MCP_ACCEPT, **_bearer(s.keys["globex"])}
        init = await c.post(HTTP_PATH, json=INIT, headers=own)
        own |= {"mcp-session-id": init.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-03-26"}
        await c.post(HTTP_PATH, headers=own,
                     json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        mine = await c.post(HTTP_PATH, headers=own, json={
            "jsonrpc": "2.0", "id": 100, "method": "tools/call", "params": {
                "name": "read_run_file", "arguments": {"run_id": v["run"], "path": "out.txt"}}})
        assert SECRET in mine.text, f"the owner's own read did not reach the file: {mine.text}"
    failures += await _victim_intact(s)
    assert not failures, f"{len(failures)} MCP boundary failures:\n" + "\n".join(failures)
