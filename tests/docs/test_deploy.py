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


def _config_data() -> dict[str, str]:
    return next(d for _, d in _core() if d["kind"] == "ConfigMap")["data"]


def test_every_pod_of_a_node_takes_its_uid_slice_from_one_node_directory() -> None:
    """Each pod keeps its own uid registry (an emptyDir): without a node-wide slot, two pods
    on one node gave one host uid to two tenants' sessions."""
    slots_dir = _config_data()["ONEBOX_SANDBOX__UID_SLOTS_DIR"]
    assert int(_config_data()["ONEBOX_SANDBOX__UID_SLOTS"]) >= 2
    for name, pod in _pods():
        host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]
                      if "hostPath" in v}
        mounts = {m["mountPath"]: m["name"] for c in pod["containers"]
                  for m in c["volumeMounts"]}
        covering = [path for path, volume in mounts.items() if volume in host_paths
                    and (slots_dir == path or slots_dir.startswith(path.rstrip("/") + "/"))]
        assert covering, f"{name}: {slots_dir} is not on a hostPath every pod of the node mounts"
        assert len(set(host_paths.values())) == len(host_paths)


def test_workers_have_a_liveness_probe_on_the_file_they_touch() -> None:
    worker = dict(_pods())["onebox-worker"]["containers"][0]
    args = worker["args"]
    alive = args[args.index("--alive-file") + 1]
    probe = worker["livenessProbe"]["exec"]["command"]
    assert alive in " ".join(probe), probe


def test_a_network_policy_denies_by_default_and_workers_take_no_traffic() -> None:
    policies = {d["metadata"]["name"]: d["spec"] for _, d in _core()
                if d["kind"] == "NetworkPolicy"}
    for name, _pod in _pods():
        labels = next(d for _, d in _core() if d["kind"] == "Deployment"
                      and d["metadata"]["name"] == name)["spec"]["template"]["metadata"]["labels"]
        mine = [p for p in policies.values()
                if p["podSelector"]["matchLabels"].items() <= labels.items()]
        assert mine, f"{name}: no NetworkPolicy selects its pods"
        assert all(set(p["policyTypes"]) == {"Ingress", "Egress"} for p in mine), name
    assert policies["onebox-worker"]["ingress"] == []
    ports = {p["port"] for rule in policies["onebox-worker"]["egress"] for p in rule["ports"]}
    assert ports == {53, 5432, 443}, ports


CREDENTIAL = ("DATABASE_URL", "KEY", "SECRET", "PASSWORD", "TOKEN")


def test_credentials_come_from_secret_references_never_plain_values() -> None:
    for name, pod in _pods():
        for container in pod["containers"]:
            env = {e["name"]: e for e in container.get("env", [])}
            for var, entry in env.items():
                if any(word in var for word in CREDENTIAL):
                    assert "value" not in entry, f"{name}: {var} is a plain value"
                    assert entry["valueFrom"]["secretKeyRef"]["name"] == "onebox", var
            assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"].get("optional") is not True
            assert not [s for s in container.get("envFrom", []) if "secretRef" in s], \
                f"{name}: a whole Secret as environment hides a missing key"
    assert not [k for k in _config_data() if any(word in k for word in CREDENTIAL[1:])]
    secret = _documents(DEPLOY / "secret.example.yaml")[0]["stringData"]
    for _, pod in _pods():
        for container in pod["containers"]:
            for entry in container.get("env", []):
                ref = entry.get("valueFrom", {}).get("secretKeyRef")
                assert ref is None or ref["key"] in secret, ref


def test_the_containerfile_copies_and_runs_what_the_repository_has() -> None:
    """No image builder runs here (no Docker engine; the base image is on Docker Hub): the
    Containerfile is linted instead: every path it copies exists, the command it runs is
    the project's, the packages it installs are named by the project, and its settings
    exist."""
    import shlex
    import tomllib

    root = DEPLOY.parents[1]
    lines = (root / "deploy" / "Containerfile").read_text().replace("\\\n", " ").splitlines()
    steps = [line.split(None, 1) for line in lines if line.strip() and not line.startswith("#")]
    kinds = [k for k, _ in steps]
    assert kinds[0] == "FROM" and "ENTRYPOINT" in kinds and "RUN" in kinds
    assert all(k in {"FROM", "RUN", "WORKDIR", "COPY", "ENV", "ENTRYPOINT", "CMD", "USER",
                     "EXPOSE", "LABEL", "ARG"} for k in kinds), kinds
    project = tomllib.loads((root / "pyproject.toml").read_text())
    for kind, rest in steps:
        if kind == "COPY":
            *sources, _ = shlex.split(rest)
            for source in sources:
                assert (root / source).exists(), f"COPY {source}: not in the repository"
        if kind == "ENV":
            name = rest.split("=", 1)[0]
            assert not name.startswith("ONEBOX_") or _setting_exists(name) \
                or name == "ONEBOX_HOME", name
        if kind == "ENTRYPOINT":
            command = yaml.safe_load(rest)[0]
            assert command in project["project"]["scripts"], command
        if kind == "RUN" and "pip install" in rest:
            for word in shlex.split(rest):
                if "==" in word:
                    package = word.split("==")[0]
                    named = " ".join([*project["project"].get("dependencies", []),
                                      *sum(project["project"].get("optional-dependencies",
                                                                  {}).values(), []),
                                      (root / "Makefile").read_text()])
                    assert package in named, f"{word}: the project never names {package}"
