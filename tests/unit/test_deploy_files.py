"""The deployment files in deploy/ are valid, agree with each other and with `wasmexec serve`.

Checked offline: the Kubernetes manifests against the API schemas shipped in `kubernetes-validate`,
the HAProxy config with `haproxy -c` (Debian's haproxy, installed by .ci/run), every `serve` flag they
use against the real parser. The container image is not built here (see deploy/Containerfile).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.helpers import haproxy, serve_options
from wasmexec._server.shutdown import CLOSE_GRACE_S, STOP_GRACE_S

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
#: The oldest Kubernetes release still supported upstream when this was written, and the newest the
#: package knows: a field that only one of them has would fail one of the two.
KUBERNETES_VERSIONS = ["1.32", kubernetes_validate.latest_version()]
#: After the drain, the stop: runs get STOP_GRACE_S, open responses CLOSE_GRACE_S, then the tool servers
#: (up to the SDK's 2 s each) and the cleanup; the pod's grace period must cover it all.
AFTER_DRAIN_S = STOP_GRACE_S + CLOSE_GRACE_S + 5


def _resources() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, doc) for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def _by_kind(kind: str) -> dict[str, Any]:
    (resource,) = [doc for _, doc in _resources() if doc["kind"] == kind]
    return resource


def _container() -> dict[str, Any]:
    (container,) = _by_kind("Deployment")["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _flags(args: list[str]) -> dict[str, str | None]:
    flags: dict[str, str | None] = {}
    for arg in args:
        if arg.startswith("--"):
            name, _, value = arg.partition("=")
            flags[name] = value or None
    return flags


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(("name", "resource"), _resources(), ids=[f"{n}:{d['kind']}" for n, d in _resources()])
def test_every_manifest_is_valid_against_the_kubernetes_api_schema(
    name: str, resource: dict[str, Any], version: str
) -> None:
    kubernetes_validate.validate(resource, version, strict=True)  # raises on any error, unknown fields included


def test_the_manifests_are_a_deployment_a_service_a_shared_claim_and_a_secret() -> None:
    assert sorted(doc["kind"] for _, doc in _resources()) == ["Deployment", "PersistentVolumeClaim", "Secret",
                                                               "Service"]  # fmt: skip
    assert _by_kind("PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteMany"]
    deployment = _by_kind("Deployment")
    assert deployment["spec"]["replicas"] >= 2
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert _by_kind("Service")["spec"]["selector"] == selector == deployment["spec"]["template"]["metadata"]["labels"]


def test_readiness_reads_healthz_and_the_grace_period_covers_the_prestop_and_the_drain() -> None:
    container = _container()
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert "httpGet" not in container["livenessProbe"], "a draining replica's 503 must not get it restarted"
    flags = _flags(container["args"])
    drain = int(flags["--drain-timeout"] or 0)
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    grace = _by_kind("Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert drain > 0 and grace >= pre_stop + drain + AFTER_DRAIN_S, (pre_stop, drain, grace)


def test_the_mounts_match_the_paths_the_flags_name() -> None:
    container = _container()
    flags = _flags(container["args"])
    mounts = [mount["mountPath"] for mount in container["volumeMounts"]]
    for flag in ("--state-dir", "--state-key-file", "--auth-token-file", "--audit-log"):
        path = flags[flag]
        assert path is not None and any(path.startswith(mount + "/") for mount in mounts), (flag, path, mounts)
    secret_keys = set(_by_kind("Secret")["stringData"])
    assert {Path(flags[f] or "").name for f in ("--state-key-file", "--auth-token-file")} == secret_keys


def test_the_secrets_reach_the_server_as_private_files_it_accepts() -> None:
    """wasmexec refuses a key or token file that group or others may read; a Secret volume's files are 0440
    (with fsGroup) or root's: an init container copies them with mode 600 as the server's user."""
    spec = _by_kind("Deployment")["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    command = init["command"]
    assert command[:3] == ["install", "-m", "600"], command
    flags = _flags(_container()["args"])
    copied_to = command[-1].rstrip("/")
    assert {str(Path(flags[f] or "").parent) for f in ("--state-key-file", "--auth-token-file")} == {copied_to}
    assert sorted(Path(source).name for source in command[3:-1]) == sorted(_by_kind("Secret")["stringData"])
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in init["volumeMounts"]}
    assert "emptyDir" in volumes[mounts[copied_to]] and volumes[mounts[copied_to]]["emptyDir"]["medium"] == "Memory"
    sources = {str(Path(source).parent) for source in command[3:-1]}
    assert [volumes[mounts[source]]["secret"]["secretName"] for source in sources] == [
        _by_kind("Secret")["metadata"]["name"]
    ]


def _manifest_flags() -> list[str]:
    return sorted(_flags(_container()["args"]))


@pytest.mark.parametrize("flag", _manifest_flags())
def test_every_flag_the_deployment_passes_is_a_serve_option(flag: str) -> None:
    assert flag in serve_options()


def test_the_containerfile_builds_the_sandbox_and_serves_over_http() -> None:
    text = (DEPLOY / "Containerfile").read_text()
    assert "wasmexec build" in text  # compiled at build time: a replica is ready in about a second
    command = re.search(r"^CMD (\[.*\])$", text, re.MULTILINE)
    assert command is not None
    assert set(_flags(yaml.safe_load(command.group(1)))) <= serve_options()


def test_the_haproxy_config_is_valid() -> None:
    proxy = haproxy()
    checked = subprocess.run([proxy, "-c", "-f", str(DEPLOY / "haproxy.cfg")], capture_output=True, text=True,
                             timeout=60)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_haproxy_config_checks_healthz_and_learns_the_2025_session_id() -> None:
    lines = [line.split("#", 1)[0].strip() for line in (DEPLOY / "haproxy.cfg").read_text().splitlines()]
    for line in ("option httpchk GET /healthz", "http-check expect status 200", "balance roundrobin",
                 "stick store-response res.hdr(mcp-session-id)", "stick on req.hdr(mcp-session-id)",
                 "retry-on conn-failure 503"):  # fmt: skip
        assert line in lines, line
