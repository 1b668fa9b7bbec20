"""docs/api.md's endpoint reference, generated from the OpenAPI spec (a test checks they agree).

    python -m onebox.api.docs docs/api.md     # rewrite the generated part in place
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BEGIN = "<!-- BEGIN GENERATED: python -m onebox.api.docs docs/api.md -->"
END = "<!-- END GENERATED -->"
METHODS = ("get", "post", "put", "patch", "delete")


def current_spec() -> dict[str, Any]:
    from onebox.api.app import create_app
    from onebox.config import load_settings

    return create_app(load_settings()).openapi()


def _type(schema: dict[str, Any], spec: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " | ".join(_type(s, spec) for s in schema["anyOf"])
    if "enum" in schema:
        return " | ".join(repr(v) for v in schema["enum"])
    if schema.get("type") == "array":
        return f"list[{_type(schema.get('items', {}), spec)}]"
    return str(schema.get("type", "any"))


def _params(op: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    rows = []
    for p in op.get("parameters", []):
        if p["in"] == "header" and p["name"].lower() in ("authorization", "x-api-key"):
            continue
        need = "required" if p.get("required") else "optional"
        rows.append(f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}), spec)} | {need} |")
    return rows


def _body(op: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    content = op.get("requestBody", {}).get("content", {})
    for media, entry in content.items():
        schema = entry.get("schema", {})
        if "$ref" in schema:
            schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
        if "anyOf" in schema:  # optional body
            refs = [s for s in schema["anyOf"] if "$ref" in s]
            schema = spec["components"]["schemas"][refs[0]["$ref"].rsplit("/", 1)[-1]] \
                if refs else schema
        required = set(schema.get("required", []))
        rows = [f"| `{name}` | body ({media}) | {_type(prop, spec)} | "
                f"{'required' if name in required else 'optional'} |"
                for name, prop in schema.get("properties", {}).items()]
        return rows
    return []


def render(spec: dict[str, Any]) -> str:
    lines = [BEGIN, "", f"API version {spec['info']['version']}. "
             f"{sum(1 for p in spec['paths'].values() for m in p if m in METHODS)} operations.", ""]
    lines += ["| method | path | what |", "|---|---|---|"]
    ops = [(path, m, op) for path, item in spec["paths"].items() for m, op in item.items()
           if m in METHODS]
    for path, method, op in ops:
        lines.append(f"| {method.upper()} | `{path}` | {op.get('summary', '')} |")
    for path, method, op in ops:
        lines += ["", f"### {method.upper()} `{path}`", "", op.get("summary", "")]
        rows = _params(op, spec) + _body(op, spec)
        if rows:
            lines += ["", "| name | in | type | |", "|---|---|---|---|", *rows]
        codes = ", ".join(sorted(op.get("responses", {})))
        lines += ["", f"Responses: {codes}."]
    lines += ["", END]
    return "\n".join(lines)


def splice(document: str, generated: str) -> str:
    if BEGIN not in document or END not in document:
        raise ValueError(f"the document has no generated section ({BEGIN} ... {END})")
    head = document[: document.index(BEGIN)]
    tail = document[document.index(END) + len(END):]
    return head + generated + tail


def main(argv: list[str]) -> int:
    path = Path(argv[1] if len(argv) > 1 else "docs/api.md")
    path.write_text(splice(path.read_text(), render(current_spec())))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
