"""The deploy recipes (deploy/) agree with the code: disk resource and label, data directory
variable and namespace come from rafka.actors.placement, the Ray version from pyproject.toml.
No Ray is started or imported; the launcher schema is read from the installed ray package."""

import importlib.util
import json
import re
import shlex
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

from rafka.actors import placement

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
LAUNCHER = DEPLOY / "ray-cluster.yaml"
KUBERAY = DEPLOY / "kuberay-raycluster.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
README = DEPLOY / "README.md"

#: Ray's variable that turns token authentication on (Ray >= 2.52); rafka does not define it.
AUTH_MODE_ENV = "RAY_AUTH_MODE"
#: Ray (ray._private.label_utils) and KubeRay check node label values with Kubernetes' rule:
#: at most 63 characters, alphanumeric at both ends.
K8S_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
#: The command that starts rafka's services on a running cluster.
SERVICES_UP = "rafka up --address auto"


# ---------------------------------------------------------------------------------------------
# loading


def launcher() -> dict:
    return yaml.safe_load(LAUNCHER.read_text())


def kuberay_documents() -> list[dict]:
    return [doc for doc in yaml.safe_load_all(KUBERAY.read_text()) if doc is not None]


def raycluster() -> dict:
    (cluster,) = [d for d in kuberay_documents() if d["kind"] == "RayCluster"]
    return cluster


def pvcs() -> dict[str, dict]:
    return {
        d["metadata"]["name"]: d
        for d in kuberay_documents()
        if d["kind"] == "PersistentVolumeClaim"
    }


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def pinned_ray_version() -> str:
    for dep in pyproject()["project"]["dependencies"]:
        m = re.fullmatch(r"ray(\[[^\]]*\])?==(\S+)", dep.replace(" ", ""))
        if m:
            return m.group(2)
    raise AssertionError("pyproject.toml pins no ray version (ray==X)")


def required_python_tag() -> str:
    """'py311' for requires-python '>=3.11,<3.12'."""
    m = re.fullmatch(r">=3\.(\d+),<3\.(\d+)", pyproject()["project"]["requires-python"])
    assert m and int(m.group(2)) == int(m.group(1)) + 1, "expected one Python minor version"
    return f"py3{m.group(1)}"


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def run_option_env(docker: dict) -> dict[str, str]:
    """KEY -> value for every `--env KEY=value` in the launcher's docker run options."""
    env = {}
    for option in docker.get("run_options", []):
        words = shlex.split(option)
        for flag, value in zip(words, words[1:]):
            if flag in ("--env", "-e"):
                key, _, val = value.partition("=")
                env[key] = val
    return env


def ray_container(group: dict) -> dict:
    return group["template"]["spec"]["containers"][0]  # KubeRay runs Ray in the first one


def kuberay_groups() -> list[dict]:
    spec = raycluster()["spec"]
    return [spec["headGroupSpec"], *spec["workerGroupSpecs"]]


def kuberay_resources(group: dict) -> dict:
    """The JSON of rayStartParams.resources, unquoted the way KubeRay's shell does it."""
    raw = group.get("rayStartParams", {}).get("resources")
    if raw is None:
        return {}
    (text,) = shlex.split(raw)
    return json.loads(text)


def launcher_disk_types() -> dict[str, dict]:
    types = launcher()["available_node_types"]
    return {n: t for n, t in types.items() if placement.DISK_RESOURCE in t.get("resources", {})}


def kuberay_disk_groups() -> list[dict]:
    return [
        g for g in raycluster()["spec"]["workerGroupSpecs"]
        if placement.DISK_RESOURCE in kuberay_resources(g)
    ]


def assert_valid_disk_names(names: list[str]) -> None:
    assert len(names) == len(set(names)), f"disk names repeat: {names}"
    for name in names:
        placement.check_disk_name(name)
        assert K8S_LABEL_VALUE.fullmatch(name), f"{name!r} is not a valid Ray node label value"


def data_dir_value() -> str:
    """The one RAFKA_DATA_DIR all recipes use (the launcher's)."""
    return run_option_env(launcher()["docker"])[placement.DATA_DIR_ENV]


def rafka_commands(text: str) -> list[tuple[str, str]]:
    """(subcommand, the rest of the line) for every `rafka up|status|down` in ``text``."""
    return [
        (m.group(1), m.group(2).strip())
        for m in re.finditer(r"\brafka (up|status|down)\b([^'\"`#\n]*)", text)
    ]


def shell_blocks(markdown: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", markdown, re.S)


# ---------------------------------------------------------------------------------------------
# the cluster launcher


def test_launcher_config_is_valid_for_the_installed_ray_including_node_labels():
    """The launcher YAML validates against ray-schema.json of the pinned Ray, which has
    `labels` as a node-type field (so the disk label needs no hand-written --labels)."""
    spec = importlib.util.find_spec("ray")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("ray is not installed")
    schema_path = Path(spec.submodule_search_locations[0]) / "autoscaler" / "ray-schema.json"
    schema = json.loads(schema_path.read_text())
    node_type = schema["properties"]["available_node_types"]["patternProperties"][".*"]
    assert "labels" in node_type["properties"]
    jsonschema.validate(launcher(), schema)


def test_launcher_each_disk_node_type_is_one_node_offering_one_uniquely_named_disk():
    types = launcher_disk_types()
    labelled = {
        n for n, t in launcher()["available_node_types"].items()
        if placement.DISK_LABEL in t.get("labels", {})
    }
    assert labelled == set(types), (
        "a node type has the disk label without the disk resource, or the reverse"
    )
    assert len(types) >= 2
    for name, node_type in types.items():
        assert node_type["resources"][placement.DISK_RESOURCE] == 1, name
        assert node_type["min_workers"] == node_type["max_workers"] == 1, name
    assert_valid_disk_names([t["labels"][placement.DISK_LABEL] for t in types.values()])
    assert launcher()["max_workers"] >= len(types)


def test_launcher_head_offers_no_disk():
    config = launcher()
    head = config["available_node_types"][config["head_node_type"]]
    assert placement.DISK_RESOURCE not in head.get("resources", {})
    assert placement.DISK_LABEL not in head.get("labels", {})


def test_launcher_every_node_sets_data_dir_and_token_auth_in_its_container():
    """docker.run_options apply to every node's container, so every Ray process (and every
    `ray exec`'d rafka command) sees them."""
    config = launcher()
    docker = config["docker"]
    assert "head_run_options" not in docker and "worker_run_options" not in docker
    env = run_option_env(docker)
    assert env[AUTH_MODE_ENV] == "token"
    data_dir = env[placement.DATA_DIR_ENV]
    assert data_dir.startswith("/"), "the data root must be absolute, the same on every node"
    # the host's volume mount point is what the container sees at the data root
    assert f"--volume {data_dir}:{data_dir}" in docker["run_options"]
    # the token file that RAY_AUTH_TOKEN_PATH names is shipped to every node
    token_path = env["RAY_AUTH_TOKEN_PATH"]
    assert token_path.endswith("/.ray/auth_token")
    assert "~/.ray/auth_token" in config["file_mounts"]


def test_launcher_disk_nodes_mount_their_own_volume_at_the_data_dir():
    """Each disk node type names a different EBS volume; the shared init script mounts the
    tagged volume at the RAFKA_DATA_DIR path."""
    config = launcher()
    volumes = []
    for name, node_type in launcher_disk_types().items():
        tags = [
            tag
            for spec in node_type["node_config"].get("TagSpecifications", [])
            if spec["ResourceType"] == "instance"
            for tag in spec["Tags"]
            if tag["Key"] == "rafka-volume"
        ]
        assert len(tags) == 1, f"{name} names no rafka-volume"
        volumes.append(tags[0]["Value"])
        assert "initialization_commands" not in node_type, "would replace the mount script"
    assert len(volumes) == len(set(volumes)), f"two disks share a volume: {volumes}"
    (script,) = [c for c in config["initialization_commands"] if "rafka-volume" in c]
    assert re.search(r"^mnt=(\S+)$", script, re.M).group(1) == data_dir_value()


def test_launcher_setup_installs_rafka_on_every_node():
    config = launcher()
    assert any(
        re.search(r"\bpip install\b.*\brafka\b", c) for c in config["setup_commands"]
    )
    # a node type's own worker_setup_commands would replace the shared setup commands
    for name, node_type in config["available_node_types"].items():
        assert "worker_setup_commands" not in node_type, name


def test_launcher_image_is_the_pinned_ray_on_the_required_python():
    image = launcher()["docker"]["image"]
    assert image == f"rayproject/ray:{pinned_ray_version()}-{required_python_tag()}"


# ---------------------------------------------------------------------------------------------
# KubeRay


def test_kuberay_manifest_is_one_raycluster_and_one_claim_per_disk_group_and_controller():
    kinds = sorted(d["kind"] for d in kuberay_documents())
    disks = kuberay_disk_groups()
    assert kinds == sorted(["RayCluster"] + ["PersistentVolumeClaim"] * (len(disks) + 1))
    assert raycluster()["apiVersion"] == "ray.io/v1"


def test_kuberay_each_disk_group_is_one_pod_offering_one_uniquely_named_disk():
    groups = kuberay_disk_groups()
    labelled = [
        g["groupName"] for g in raycluster()["spec"]["workerGroupSpecs"]
        if placement.DISK_LABEL in g.get("labels", {})
    ]
    assert labelled == [g["groupName"] for g in groups], (
        "a worker group has the disk label without the disk resource, or the reverse"
    )
    assert len(groups) >= 2
    for group in groups:
        name = group["groupName"]
        assert kuberay_resources(group) == {placement.DISK_RESOURCE: 1}, name
        assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 1, name
        # KubeRay >= 1.5 rejects labels in rayStartParams; the top-level field sets --labels
        assert "labels" not in group["rayStartParams"], name
    assert_valid_disk_names([g["labels"][placement.DISK_LABEL] for g in groups])


def test_kuberay_head_is_no_broker_but_hosts_the_controller_on_its_own_claim():
    head = raycluster()["spec"]["headGroupSpec"]
    assert kuberay_resources(head) == {placement.CONTROLLER_RESOURCE: 1}
    assert_valid_disk_names([head["labels"][placement.DISK_LABEL]])
    disk_labels = [g["labels"][placement.DISK_LABEL] for g in kuberay_disk_groups()]
    assert head["labels"][placement.DISK_LABEL] not in disk_labels
    (mount,) = ray_container(head)["volumeMounts"]
    volumes = {v["name"]: v for v in head["template"]["spec"]["volumes"]}
    assert volumes[mount["name"]]["persistentVolumeClaim"]["claimName"] in pvcs()
    assert mount["mountPath"] == env_of(ray_container(head))[placement.DATA_DIR_ENV]["value"]


def test_kuberay_each_disk_group_mounts_its_own_claim_at_the_data_dir():
    claims = pvcs()
    used = []
    for group in kuberay_disk_groups():
        pod = group["template"]["spec"]
        container = ray_container(group)
        volumes = {v["name"]: v for v in pod["volumes"]}
        (mount,) = container["volumeMounts"]
        claim = volumes[mount["name"]]["persistentVolumeClaim"]["claimName"]
        assert claim in claims, f"{group['groupName']} mounts a claim not in the manifest"
        assert claims[claim]["spec"]["accessModes"] == ["ReadWriteOnce"]
        used.append(claim)
        assert mount["mountPath"] == env_of(container)[placement.DATA_DIR_ENV]["value"]
    head = raycluster()["spec"]["headGroupSpec"]
    (head_mount,) = ray_container(head)["volumeMounts"]
    head_volumes = {v["name"]: v for v in head["template"]["spec"]["volumes"]}
    used.append(head_volumes[head_mount["name"]]["persistentVolumeClaim"]["claimName"])
    assert len(used) == len(set(used)), f"two disks share a claim: {used}"
    assert sorted(used) == sorted(claims), "a claim nobody mounts"


def test_kuberay_every_node_sets_data_dir_and_token_auth():
    for group in kuberay_groups():
        env = env_of(ray_container(group))
        assert env[AUTH_MODE_ENV]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["key"]
        assert env[placement.DATA_DIR_ENV]["value"] == data_dir_value()


def test_kuberay_ray_version_matches_the_pin_and_every_node_runs_one_image():
    cluster = raycluster()
    assert cluster["spec"]["rayVersion"] == pinned_ray_version()
    images = {ray_container(g)["image"] for g in kuberay_groups()}
    assert len(images) == 1, images


# ---------------------------------------------------------------------------------------------
# Dockerfile, README and the commands they show


def test_dockerfile_builds_on_the_pinned_ray_and_required_python_and_installs_rafka():
    text = DOCKERFILE.read_text()
    (base,) = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert base == f"rayproject/ray:{pinned_ray_version()}-{required_python_tag()}"
    spec = re.search(r'^ARG RAFKA_SPEC="([^"]+)"', text, re.M).group(1)
    assert spec == f"rafka=={pyproject()['project']['version']}"
    assert re.search(r'^RUN pip install .*"\$\{RAFKA_SPEC\}"', text, re.M)


def test_services_are_started_with_rafka_up_address_auto_in_every_recipe():
    """Every place that shows how to start, inspect or stop the services uses
    `--address auto`, and each recipe shows `rafka up --address auto`."""
    shown = {
        LAUNCHER.name: LAUNCHER.read_text(),  # in comments: the launcher has no post-start hook
        KUBERAY.name: KUBERAY.read_text(),
        README.name: "\n".join(shell_blocks(README.read_text())),
    }
    for name, text in shown.items():
        commands = rafka_commands(text)
        assert ("up", "--address auto") in commands, f"{name} never shows {SERVICES_UP}"
        for sub, args in commands:
            assert args == "--address auto", f"{name}: rafka {sub} {args}"


def test_readme_bare_machine_ray_start_lines_set_token_auth_data_dir_disk_resource_and_label():
    lines = [
        line
        for block in shell_blocks(README.read_text())
        for line in block.splitlines()
        if re.search(r"\bray start\b", line)
    ]
    disk_lines = [line for line in lines if "--resources" in line]
    assert lines and disk_lines
    for line in lines:
        words = shlex.split(line.replace("<head ip>", "HEAD"))
        env = dict(w.split("=", 1) for w in words[: words.index("ray")])
        assert env[AUTH_MODE_ENV] == "token", line
        assert env[placement.DATA_DIR_ENV] == data_dir_value(), line
    for line in disk_lines:
        words = shlex.split(line.replace("<head ip>", "HEAD"))
        flags = dict(w[2:].split("=", 1) for w in words if w.startswith("--") and "=" in w)
        assert json.loads(flags["resources"]) == {placement.DISK_RESOURCE: 1}, line
        key, value = flags["labels"].split("=")
        assert key == placement.DISK_LABEL, line
        assert_valid_disk_names([value])


def test_readme_names_the_namespace_variable_and_default_rafka_uses():
    text = README.read_text()
    assert f"`{placement.NAMESPACE_ENV}`" in text
    assert f"namespace `{placement.DEFAULT_NAMESPACE}`" in text
