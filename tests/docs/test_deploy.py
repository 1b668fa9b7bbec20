"""deploy/kubernetes: every manifest is valid against the Kubernetes API schemas (strict: an
unknown or misspelt field fails), names only settings onebox has and commands it runs, and
gives every pod that runs sandboxes what bubblewrap needs. No cluster is needed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from onebox.cli.main import main
from onebox.config import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
KUBERNETES = "1.30.0"  # the oldest minor the manifests promise (docs/deploy.md)


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _core() -> list[tuple[str, dict[str, Any]]]:
    """Every object of the manifests kubectl applies (not the kustomization itself)."""
    return [(p.name, d) for p in sorted(DEPLOY.glob("*.yaml")) for d in _documents(p)
            if d.get("kind") != "Kustomization"]


def _pods() -> list[tuple[str, dict[str, Any]]]:
    return [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for _, d in _core()
            if d["kind"] == "Deployment"]


@pytest.mark.parametrize("name,doc", _core(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_manifest_matches_the_kubernetes_schema(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_the_schema_check_catches_a_misspelt_field() -> None:
    """The control: the validation above can fail."""
    deployment = next(d for _, d in _core() if d["kind"] == "Deployment")
    broken = copy.deepcopy(deployment)
    broken["spec"]["replicaz"] = broken["spec"].pop("replicas")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def test_the_kustomization_lists_every_manifest() -> None:
    listed = set(_documents(DEPLOY / "kustomization.yaml")[0]["resources"])
    present = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml",
                                                         "secret.example.yaml"}
    assert listed == present


def test_examples_name_their_resources() -> None:
    for path in sorted((DEPLOY / "examples").glob("*.yaml")):
        for doc in _documents(path):
            assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"], path.name


def _setting_exists(env: str) -> bool:
    """ONEBOX_API__SERVER_LEASE_S -> Settings.api.server_lease_s exists."""
    model: Any = Settings
    for part in env.removeprefix("ONEBOX_").lower().split("__"):
        fields = model.model_fields
        if part not in fields:
            return False
        model = fields[part].annotation
    return True


def test_the_config_names_only_settings_onebox_has() -> None:
    config = next(d for _, d in _core() if d["kind"] == "ConfigMap")
    names = list(config["data"])
    for _, pod in _pods():
        for container in pod["containers"]:
            names += [e["name"] for e in container.get("env", [])]
    unknown = [n for n in names if n.startswith("ONEBOX_") and not _setting_exists(n)]
    assert not unknown, f"no such setting: {unknown}"
    assert not _setting_exists("ONEBOX_API__NO_SUCH_THING")  # the control


def test_every_container_runs_a_real_command_with_real_options() -> None:
    for name, pod in _pods():
        for container in pod["containers"]:
            args = [*container["args"], "--help"]
            result = CliRunner().invoke(main, args)
            assert result.exit_code == 0, f"{name}: `onebox {' '.join(args)}`: {result.output}"


def test_every_pod_running_sandboxes_has_what_bubblewrap_needs() -> None:
    for name, pod in _pods():
        for container in pod["containers"]:
            security = container.get("securityContext", {})
            assert security.get("privileged") is True, name
        assert pod["automountServiceAccountToken"] is False, f"{name}: no API token in pods"


def test_api_servers_advertise_their_pod_address() -> None:
    api = dict(_pods())["onebox-api"]["containers"][0]
    env = {e["name"]: e for e in api["env"]}
    assert env["ONEBOX_API__ADVERTISE_URL"]["value"] == "http://$(POD_IP):8420"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
