"""`onebox provider add` says when this host's settings declare the same name (they win
here over the stored declaration, which other hosts without that setting use)."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner

from onebox.cli.main import main
from onebox.config import Settings
from onebox.store.db import Database


async def test_adding_a_provider_the_settings_also_declare_says_which_wins(
        db: Database, settings: Settings) -> None:
    env = {"ONEBOX_HOME": str(settings.home), "COLUMNS": "200",
           "ONEBOX_DATABASE_URL": settings.database_url.get_secret_value(),  # type: ignore[union-attr]
           "ONEBOX_PROVIDERS": json.dumps([{"name": "op", "base_url": "http://127.0.0.1:9/v1"}])}
    runner = CliRunner()
    same = await asyncio.to_thread(runner.invoke, main, [
        "provider", "add", "op", "--base-url", "http://127.0.0.1:8/v1"], env=env)
    other = await asyncio.to_thread(runner.invoke, main, [
        "provider", "add", "elsewhere", "--base-url", "http://127.0.0.1:8/v1"], env=env)
    assert same.exit_code == 0 and other.exit_code == 0, same.output + other.output
    assert "also declared by this host's settings" in same.stderr
    assert "also declared" not in other.stderr
