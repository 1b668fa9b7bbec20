"""docs/api.md's endpoint reference is the OpenAPI spec's: this fails when they drift."""

from __future__ import annotations

from pathlib import Path

from onebox.api.docs import BEGIN, END, current_spec, render

DOC = Path(__file__).parents[2] / "docs" / "api.md"


def test_docs_reference_matches_the_openapi_spec() -> None:
    text = DOC.read_text()
    documented = text[text.index(BEGIN): text.index(END) + len(END)]
    assert documented == render(current_spec()), (
        "docs/api.md is out of date: run `python -m onebox.api.docs docs/api.md`")


def test_every_operation_is_documented_with_its_path() -> None:
    spec = current_spec()
    text = DOC.read_text()
    for path, item in spec["paths"].items():
        for method in item:
            assert f"### {method.upper()} `{path}`" in text
