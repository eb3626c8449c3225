"""The deploy recipes (deploy/) agree with the code: disk resource and label (named and
ephemeral), data directory variable and namespace come from rafka.actors.placement, the Ray
version from pyproject.toml, the cluster settings given to `rafka up` from rafka's own command
line parser and rafka.cluster.settings. No Ray is started: Ray's own checks run offline on
the installed ray package (the launcher's config preparation and validation, and the KubeRay
autoscaler's reading of the RayCluster)."""

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
from rafka.cli import build_parser
from rafka.cluster.settings import BROKER_SETTINGS, validate_settings

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
#: rafka's autoscaling settings (rafka.cluster.settings) that the recipes give.
AUTOSCALING_ENABLE = "partition.autoscaling.enable"
MIN_BROKERS = "partition.autoscaling.min.brokers"
MAX_BROKERS = "partition.autoscaling.max.brokers"
#: Ray's switch between autoscaler v1 and v2 (read by the head's `ray start`); the recipes
#: run v1 (see the comments in both manifests and deploy/README.md, "Autoscaling").
AUTOSCALER_V2_ENV = "RAY_enable_autoscaler_v2"
#: The `rafka-volume` tag of an autoscaled launcher node: its disk is the instance store.
INSTANCE_STORE = "instance-store"
#: A Ray node id as Ray prints it (56 hex digits), for the disk name rafka derives.
SAMPLE_NODE_ID = "0123456789abcdef" * 3 + "01234567"


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


def is_ephemeral(labels: dict) -> bool:
    """A disk node whose disk lives and dies with it (``rafka-disk=auto``)."""
    return labels.get(placement.DISK_LABEL) == placement.EPHEMERAL_DISK_LABEL_VALUE


def launcher_disk_types() -> dict[str, dict]:
    types = launcher()["available_node_types"]
    return {n: t for n, t in types.items() if placement.DISK_RESOURCE in t.get("resources", {})}


def launcher_named_types() -> dict[str, dict]:
    """One node type per persistent disk."""
    return {n: t for n, t in launcher_disk_types().items() if not is_ephemeral(t["labels"])}


def launcher_scalable_types() -> dict[str, dict]:
    """The node types of autoscaled disk nodes (ephemeral disks)."""
    return {n: t for n, t in launcher_disk_types().items() if is_ephemeral(t["labels"])}


def rafka_volume_tag(name: str, node_type: dict) -> str:
    """The `rafka-volume` instance tag of a launcher node type: the disk its init script
    mounts."""
    tags = [
        tag
        for spec in node_type["node_config"].get("TagSpecifications", [])
        if spec["ResourceType"] == "instance"
        for tag in spec["Tags"]
        if tag["Key"] == "rafka-volume"
    ]
    assert len(tags) == 1, f"{name} names no rafka-volume"
    return tags[0]["Value"]


def kuberay_disk_groups() -> list[dict]:
    return [
        g for g in raycluster()["spec"]["workerGroupSpecs"]
        if placement.DISK_RESOURCE in kuberay_resources(g)
    ]


def kuberay_named_groups() -> list[dict]:
    """One worker group per persistent disk."""
    return [g for g in kuberay_disk_groups() if not is_ephemeral(g["labels"])]


def kuberay_scalable_groups() -> list[dict]:
    """The worker groups of autoscaled disk pods (ephemeral disks)."""
    return [g for g in kuberay_disk_groups() if is_ephemeral(g["labels"])]


def assert_valid_disk_names(names: list[str]) -> None:
    assert len(names) == len(set(names)), f"disk names repeat: {names}"
    for name in names:
        placement.check_disk_name(name)
        assert K8S_LABEL_VALUE.fullmatch(name), f"{name!r} is not a valid Ray node label value"
        assert name != placement.EPHEMERAL_DISK_LABEL_VALUE, (
            f"{name!r} marks an ephemeral disk; a named disk needs another name"
        )


def assert_disk_as_rafka_reads_it(labels: dict, ephemeral: bool) -> None:
    """rafka (placement.node_disk_name) names the disk of a node with these labels after the
    node when the disk is ephemeral, and after the label when it is named."""
    disk = placement.node_disk_name(labels, SAMPLE_NODE_ID)
    if ephemeral:
        assert placement.ephemeral_node(disk) == SAMPLE_NODE_ID, disk
    else:
        assert placement.ephemeral_node(disk) is None and disk == labels[placement.DISK_LABEL]


def data_dir_value() -> str:
    """The one RAFKA_DATA_DIR all recipes use (the launcher's)."""
    return run_option_env(launcher()["docker"])[placement.DATA_DIR_ENV]


def rafka_commands(text: str) -> list[tuple[str, str]]:
    """(subcommand, the rest of the line) for every `rafka up|status|down` in ``text``; a line
    ending in a backslash goes on on the next one (also in YAML comments)."""
    text = re.sub(r"\\\n[ \t]*(#[ \t]*)?", " ", text)
    return [
        (m.group(1), " ".join(m.group(2).split()))
        for m in re.finditer(r"\brafka (up|status|down)\b([^'\"`#\n]*)", text)
    ]


def up_settings(args: str) -> dict:
    """The cluster settings of `rafka up <args>`, as rafka's own parser reads them, checked
    the way the services check them when they start."""
    parsed = build_parser().parse_args(["up", *shlex.split(args)])
    assert parsed.address == "auto", args
    given = dict(parsed.settings)
    for name in given:
        assert name in BROKER_SETTINGS, f"{name} is not a rafka cluster setting"
    return validate_settings(given)


def shown_up_settings(text: str) -> list[dict]:
    """The settings of every `rafka up` in ``text``."""
    return [up_settings(args) for sub, args in rafka_commands(text) if sub == "up"]


def shell_blocks(markdown: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", markdown, re.S)


# ---------------------------------------------------------------------------------------------
# the cluster launcher


def test_launcher_config_is_valid_for_the_installed_ray_including_node_labels():
    """The launcher YAML validates against ray-schema.json of the pinned Ray, which has
    `labels` as a node-type field (so the disk label needs no hand-written --labels), and
    passes the checks `ray up` makes: Ray's defaults for the provider merged in, then
    validate_config (the global max_workers covers every type's min_workers, ...)."""
    spec = importlib.util.find_spec("ray")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("ray is not installed")
    schema_path = Path(spec.submodule_search_locations[0]) / "autoscaler" / "ray-schema.json"
    schema = json.loads(schema_path.read_text())
    node_type = schema["properties"]["available_node_types"]["patternProperties"][".*"]
    assert "labels" in node_type["properties"]
    jsonschema.validate(launcher(), schema)

    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(launcher())
    validate_config(prepared)
    # what the autoscaler will run with: the settings below are ours, not provider defaults
    assert prepared["idle_timeout_minutes"] == launcher()["idle_timeout_minutes"]
    for name, node_type in launcher_disk_types().items():
        assert prepared["available_node_types"][name]["labels"] == node_type["labels"], name


def test_launcher_each_disk_node_type_is_one_node_offering_one_uniquely_named_disk():
    """A named disk's node type is exactly one node; the scalable disk type's nodes are
    ephemeral disks (`rafka-disk: auto`), from none up to its max_workers."""
    types = launcher_disk_types()
    labelled = {
        n for n, t in launcher()["available_node_types"].items()
        if placement.DISK_LABEL in t.get("labels", {})
    }
    assert labelled == set(types), (
        "a node type has the disk label without the disk resource, or the reverse"
    )
    named, scalable = launcher_named_types(), launcher_scalable_types()
    assert len(named) >= 2 and len(scalable) == 1
    for name, node_type in types.items():
        assert node_type["resources"][placement.DISK_RESOURCE] == 1, name
    for name, node_type in named.items():
        assert node_type["min_workers"] == node_type["max_workers"] == 1, name
        assert_disk_as_rafka_reads_it(node_type["labels"], ephemeral=False)
    for name, node_type in scalable.items():
        assert node_type.get("min_workers", 0) == 0 < node_type["max_workers"], name
        assert_disk_as_rafka_reads_it(node_type["labels"], ephemeral=True)
    assert_valid_disk_names([t["labels"][placement.DISK_LABEL] for t in named.values()])
    workers = [t.get("max_workers", 0) for n, t in launcher()["available_node_types"].items()
               if n != launcher()["head_node_type"]]  # fmt: skip
    assert launcher()["max_workers"] == sum(workers), (
        "the global max_workers caps every type's: keep it their sum"
    )


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
    """Each named disk's node type names a different EBS volume; an autoscaled node's disk is
    its instance store. The shared init script mounts either at the RAFKA_DATA_DIR path."""
    config = launcher()
    volumes = []
    for name, node_type in launcher_named_types().items():
        volumes.append(rafka_volume_tag(name, node_type))
        assert volumes[-1].startswith("vol-"), f"{name}: a named disk is an EBS volume"
    for name, node_type in launcher_scalable_types().items():
        assert rafka_volume_tag(name, node_type) == INSTANCE_STORE, (
            f"{name}: an autoscaled node has no volume of its own to name"
        )
    for name, node_type in launcher_disk_types().items():
        assert "initialization_commands" not in node_type, "would replace the mount script"
    assert len(volumes) == len(set(volumes)), f"two disks share a volume: {volumes}"
    (script,) = [c for c in config["initialization_commands"] if "rafka-volume" in c]
    assert re.search(r"^mnt=(\S+)$", script, re.M).group(1) == data_dir_value()
    assert f'[ "$vol" = {INSTANCE_STORE} ]' in script


def test_launcher_runs_autoscaler_v1_releasing_idle_nodes_soon_after_rafka_lets_them_go():
    """The head starts Ray with the autoscaler (v1: `ray up` would turn v2 on) and the
    idle timeout is a short grace after rafka's own scale-down delay, not a second one."""
    config = launcher()
    starts = [c for c in config["head_start_ray_commands"] if re.search(r"\bray start\b", c)]
    (start,) = starts
    words = shlex.split(start)
    assert "--head" in words
    assert any(w.startswith("--autoscaling-config=") for w in words)
    env = dict(w.split("=", 1) for w in words[: words.index("ray")])
    assert env == {AUTOSCALER_V2_ENV: "0"}
    idle_ms = config["idle_timeout_minutes"] * 60_000
    delay_ms = BROKER_SETTINGS["partition.autoscaling.scale.down.delay.ms"][0]
    assert 0 < idle_ms < delay_ms


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


def test_kuberay_manifest_is_one_raycluster_and_one_claim_per_named_disk_and_controller():
    kinds = sorted(d["kind"] for d in kuberay_documents())
    disks = kuberay_named_groups()
    assert kinds == sorted(["RayCluster"] + ["PersistentVolumeClaim"] * (len(disks) + 1))
    assert raycluster()["apiVersion"] == "ray.io/v1"


def test_kuberay_each_disk_group_is_one_pod_offering_one_uniquely_named_disk():
    """A named disk's group is exactly one pod; the autoscaled group's pods are ephemeral
    disks (`rafka-disk: auto`), from none up to maxReplicas."""
    groups = kuberay_disk_groups()
    labelled = [
        g["groupName"] for g in raycluster()["spec"]["workerGroupSpecs"]
        if placement.DISK_LABEL in g.get("labels", {})
    ]
    assert labelled == [g["groupName"] for g in groups], (
        "a worker group has the disk label without the disk resource, or the reverse"
    )
    named, scalable = kuberay_named_groups(), kuberay_scalable_groups()
    assert len(named) >= 2 and len(scalable) == 1
    for group in groups:
        name = group["groupName"]
        assert kuberay_resources(group) == {placement.DISK_RESOURCE: 1}, name
        # KubeRay >= 1.5 rejects labels in rayStartParams; the top-level field sets --labels
        assert "labels" not in group["rayStartParams"], name
    for group in named:
        name = group["groupName"]
        assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 1, name
        assert_disk_as_rafka_reads_it(group["labels"], ephemeral=False)
    for group in scalable:
        name = group["groupName"]
        assert group.get("replicas", 0) == group["minReplicas"] == 0 < group["maxReplicas"], name
        assert_disk_as_rafka_reads_it(group["labels"], ephemeral=True)
    assert_valid_disk_names([g["labels"][placement.DISK_LABEL] for g in named])


def test_kuberay_autoscaling_is_on_with_v1_and_a_short_idle_timeout():
    """The in-tree autoscaler runs; v1 is chosen by the head's env alone (KubeRay refuses it
    together with autoscalerOptions.version, and before 1.7 ignores `version: v1`); the idle
    timeout is a short grace after rafka's own scale-down delay."""
    spec = raycluster()["spec"]
    assert spec["enableInTreeAutoscaling"] is True
    options = spec["autoscalerOptions"]
    assert options["upscalingMode"] in ("Default", "Aggressive", "Conservative")
    assert "version" not in options
    head_env = env_of(ray_container(spec["headGroupSpec"]))
    assert head_env[AUTOSCALER_V2_ENV]["value"] == "0"
    idle_ms = options["idleTimeoutSeconds"] * 1000
    assert 0 < idle_ms < BROKER_SETTINGS["partition.autoscaling.scale.down.delay.ms"][0]
    for group in spec["workerGroupSpecs"]:
        # a per-group idle timeout is autoscaler v2 only (KubeRay >= 1.6 refuses it with v1)
        assert "idleTimeoutSeconds" not in group, group["groupName"]


def test_kuberay_autoscaler_reads_the_groups_as_meant():
    """What Ray's KubeRay autoscaler (the installed Ray's own code) makes of the RayCluster,
    validated as it validates it: the named disks are fixed at one node each, the ephemeral
    group scales from zero, the head offers no disk."""
    pytest.importorskip("ray")
    from ray.autoscaler._private.kuberay.autoscaling_config import (
        _derive_autoscaling_config_from_ray_cr,
    )

    cluster = raycluster()
    cluster["metadata"].setdefault("namespace", "default")  # set by the API server
    config = _derive_autoscaling_config_from_ray_cr(cluster)
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert placement.DISK_RESOURCE not in head["resources"]
    for group in kuberay_named_groups():
        node_type = types[group["groupName"]]
        assert node_type["min_workers"] == node_type["max_workers"] == 1
        assert node_type["resources"][placement.DISK_RESOURCE] == 1
    for group in kuberay_scalable_groups():
        node_type = types[group["groupName"]]
        assert node_type["min_workers"] == 0
        assert node_type["max_workers"] == group["maxReplicas"]
        assert node_type["resources"][placement.DISK_RESOURCE] == 1
    offering = [n for n, t in types.items() if t["resources"].get(placement.DISK_RESOURCE)]
    assert sorted(offering) == sorted(g["groupName"] for g in kuberay_disk_groups())
    options = cluster["spec"]["autoscalerOptions"]
    assert config["idle_timeout_minutes"] * 60 == options["idleTimeoutSeconds"]


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
    for group in kuberay_named_groups():
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


def test_kuberay_ephemeral_group_mounts_a_volume_of_each_pod_at_the_data_dir():
    """Each autoscaled pod gets a generic ephemeral volume of its own (a claim made from the
    template and deleted with the pod), and a pod whose Ray stops is replaced rather than
    restarted on the old volume under a new Ray node id."""
    for group in kuberay_scalable_groups():
        name = group["groupName"]
        pod = group["template"]["spec"]
        container = ray_container(group)
        volumes = {v["name"]: v for v in pod["volumes"]}
        (mount,) = container["volumeMounts"]
        volume = volumes[mount["name"]]
        assert "persistentVolumeClaim" not in volume, f"{name}: a claim would outlive the pod"
        claim = volume["ephemeral"]["volumeClaimTemplate"]["spec"]
        assert claim["accessModes"] == ["ReadWriteOnce"], name
        assert claim["resources"]["requests"]["storage"], name
        assert mount["mountPath"] == env_of(container)[placement.DATA_DIR_ENV]["value"]
        assert pod["restartPolicy"] == "Never", name


def test_kuberay_every_node_sets_data_dir_and_token_auth():
    for group in kuberay_groups():
        env = env_of(ray_container(group))
        assert env[AUTH_MODE_ENV]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["key"]
        assert env[placement.DATA_DIR_ENV]["value"] == data_dir_value()
    # the autoscaler's container does not inherit the head container's env
    autoscaler_env = env_of(raycluster()["spec"]["autoscalerOptions"])
    assert autoscaler_env[AUTH_MODE_ENV]["value"] == "token"
    head_env = env_of(ray_container(raycluster()["spec"]["headGroupSpec"]))
    assert autoscaler_env["RAY_AUTH_TOKEN"] == head_env["RAY_AUTH_TOKEN"]


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


def shown_commands() -> dict[str, str]:
    """Where the recipes show rafka commands: the manifests (in comments: neither has a
    post-start hook) and the README's shell blocks."""
    return {
        LAUNCHER.name: LAUNCHER.read_text(),
        KUBERAY.name: KUBERAY.read_text(),
        README.name: "\n".join(shell_blocks(README.read_text())),
    }


def test_services_are_started_with_rafka_up_address_auto_in_every_recipe():
    """Every place that shows how to start, inspect or stop the services uses
    `--address auto` (`rafka up` may add cluster settings after it), and each recipe shows
    `rafka up --address auto`."""
    for name, text in shown_commands().items():
        commands = rafka_commands(text)
        assert any(sub == "up" and re.fullmatch(r"--address auto( --set .*)?", args)
                   for sub, args in commands), f"{name} never shows {SERVICES_UP}"  # fmt: skip
        for sub, args in commands:
            if sub == "up":
                assert re.fullmatch(r"--address auto( --set .*)?", args), f"{name}: {args}"
            else:
                assert args == "--address auto", f"{name}: rafka {sub} {args}"


def test_every_rafka_up_shown_parses_and_gives_known_valid_cluster_settings():
    """rafka's own parser takes every `rafka up` the recipes show, and every setting it
    gives is one of rafka.cluster.settings.BROKER_SETTINGS, with a value the services
    accept."""
    for name, text in shown_commands().items():
        for settings in shown_up_settings(text):
            assert all(isinstance(v, (bool, int, str)) for v in settings.values()), name


def test_cluster_recipes_start_rafka_with_autoscaling_sized_to_their_disk_nodes():
    """The launcher and KubeRay recipes start rafka with autoscaling on; max.brokers is the
    named disks plus the most autoscaled nodes Ray may add (rafka's request counts the named
    disks too), min.brokers at most the named disks (which stay anyway); the README shows the
    same command for each."""
    readme_settings = shown_up_settings(shown_commands()[README.name])
    recipes = {
        LAUNCHER.name: (len(launcher_named_types()),
                        sum(t["max_workers"] for t in launcher_scalable_types().values())),
        KUBERAY.name: (len(kuberay_named_groups()),
                       sum(g["maxReplicas"] for g in kuberay_scalable_groups())),
    }  # fmt: skip
    for name, (named, scalable) in recipes.items():
        shown = shown_up_settings(shown_commands()[name])
        assert shown, f"{name} shows no rafka up"
        for settings in shown:
            assert settings[AUTOSCALING_ENABLE] is True, name
            assert settings[MAX_BROKERS] == named + scalable, name
            assert 1 <= settings[MIN_BROKERS] <= named, name
            assert settings in readme_settings, f"the README does not show {name}'s rafka up"


def test_readme_names_every_autoscaling_setting_and_the_ephemeral_disk_label():
    text = README.read_text()
    for name in BROKER_SETTINGS:
        if name.startswith("partition.autoscaling."):
            assert f"`{name}`" in text, f"the README's autoscaling section misses {name}"
    label = f"{placement.DISK_LABEL}={placement.EPHEMERAL_DISK_LABEL_VALUE}"
    assert f"`{label}`" in text
    assert f"`{placement.EPHEMERAL_DISK_PREFIX}<Ray node id>`" in text
    assert f"`{AUTOSCALER_V2_ENV}=0`" in text


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
