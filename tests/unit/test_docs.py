"""The docs match the code: every setting is documented in docs/configuration.md."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from onebox.config import Settings

DOCS = Path(__file__).resolve().parents[2] / "docs"


def env_names(model: type[BaseModel], prefix: str = "ONEBOX_") -> list[str]:
    names = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names += env_names(annotation, f"{prefix}{name.upper()}__")
        else:
            names.append(f"{prefix}{name.upper()}")
    return names


def test_every_setting_is_documented() -> None:
    text = (DOCS / "configuration.md").read_text()
    missing = [n for n in env_names(Settings) if f"`{n}`" not in text]
    assert not missing, f"add these settings to docs/configuration.md: {missing}"


def test_readme_starts_with_the_two_commands() -> None:
    head = (DOCS.parent / "README.md").read_text().splitlines()[:8]
    assert any(line.startswith("make demo") for line in head)
    assert any(line.startswith("make test") for line in head)
