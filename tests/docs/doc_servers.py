"""What the docs' examples talk to, served on 127.0.0.1: the public APIs their http steps call
and the scripted replies of the model their goals and tasks need."""

from __future__ import annotations

import copy
import http.server
import json
import threading
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from onebox.testing import ServerReply

# The replies a plausible model gives per `onebox run "<task>"` of the docs.
AGENT_SCRIPTS: dict[str, list[ServerReply]] = {
    "read sales.csv from the knowledge base and chart revenue per region": [
        ServerReply.json({"goal": "chart revenue per region of sales.csv", "entities": ["sales.csv"],
                          "capabilities": ["python"], "formats": ["csv"], "risks": [],
                          "fallbacks": []}),
        ServerReply.json({"steps": [
            {"id": "sales", "tool": "python", "code": (
                "import json, os\n"
                "rows = [('north', 120.0), ('south', 80.5), ('north', 30.0)]\n"
                "totals = {}\n"
                "for region, revenue in rows:\n"
                "    totals[region] = totals.get(region, 0) + revenue\n"
                "for region, total in sorted(totals.items()):\n"
                "    print(f\"{region:6} {'#' * int(total // 10)} {total}\")\n"
                "json.dump(totals, open(os.environ['ONEBOX_RESULT'], 'w'))\n")},
            {"id": "done", "kind": "final", "depends_on": ["sales"],
             "input": {"answer": "{{ sales.stdout }}"}}]}),
    ],
}

# A goal step's code, per goal text: what the model writes for it.
GOAL_CODE: dict[str, str] = {
    'sum the "amount" column of the CSV file given as item': (
        "import csv, json, os\n"
        "item = json.load(open(os.environ['ONEBOX_INPUTS']))['item']\n"
        "total = sum(float(row['amount']) for row in csv.DictReader(open(item)))\n"
        "json.dump(total, open(os.environ['ONEBOX_RESULT'], 'w'))\n"),
}


def script_for(plan: dict[str, Any]) -> list[ServerReply]:
    """Enough code replies for every goal of the plan (a foreach goal asks once per item)."""
    steps = plan.get("steps", [])
    return [ServerReply.json({"code": GOAL_CODE[step["goal"]]})
            for step in steps if "goal" in step for _ in range(8)]


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = json.dumps({"path": self.path, "rate": 1.0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


class PlanServer:
    """Serves the public APIs a plan's http steps call: each such step's URL is mapped to this
    server on 127.0.0.1 (same path), and its allowed domains to 127.0.0.1."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self.original = plan
        self.plan = copy.deepcopy(plan)
        self._httpd: http.server.ThreadingHTTPServer | None = None

    def __enter__(self) -> PlanServer:
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        port = self._httpd.server_address[1]
        for step in self.plan.get("steps", []):
            if step.get("kind") == "http":
                url = urlsplit(step["input"]["url"])
                step["input"]["url"] = f"http://127.0.0.1:{port}{url.path}"
                # plan validation matches the bare host, the egress proxy the port too
                step["allow_domains"] = ["127.0.0.1", f"127.0.0.1:{port}"]
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def env(self, model_url: str) -> dict[str, str]:
        env = {"ONEBOX_SANDBOX__EGRESS_ALLOW_PRIVATE": '["127.0.0.1"]'}
        if any("goal" in step for step in self.plan.get("steps", [])):
            env.update(ONEBOX_LLM__MODEL="scripted-1", OPENAI_BASE_URL=model_url,
                       OPENAI_API_KEY="sk-test")
        return env
