"""Run by test_autoscaler.py in its own process: rafka with Ray's real autoscaler loop on one
machine (Ray's fake multi-node provider: the autoscaler launches and removes Ray nodes as
local processes), with an acks=all producer writing all along.

1. A head of its own (``RAY_FAKE_CLUSTER=1``, an autoscaling config whose disk node type
   declares ``rafka_disk: 1`` and the label ``rafka-disk=auto``: ephemeral disks) hosts the
   controller (``rafka_controller``). One disk node is asked for and rafka starts on it.
2. Topic ``steady`` (2 partitions, RF=1) takes the producer's writes all along.
3. Topic ``burst`` (2 partitions, RF=2) needs two brokers: its creation is refused and
   rafka asks Ray for a second disk node. The autoscaler launches it, it becomes a broker by
   itself, the creation succeeds when retried, and the balancer gives the new broker its
   share of replicas.
4. ``burst`` is deleted: one broker holds the load well under its limits, so after the
   scale-down delay rafka drains one broker (its ``steady`` partition moves by follower
   fetch while the producer writes), retires it, stops its actors and lowers its request;
   Ray's idle timeout removes the node.
5. The producer stops; every acknowledged record is read back, once.

Prints one ``REPORT {json}`` line; the Ray processes it started are killed whatever happens
(by their temp directory and port, never ``ray stop``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")
# Run as a script: the repository root makes ``tests`` importable.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from rafka.errors import InvalidReplicationFactor  # noqa: E402
from rafka.actors.local_cluster import wait_for  # noqa: E402
from tests.integration.balancer_scenario import Writer, stop_and_check  # noqa: E402

NAMESPACE = "autoscaler-scenario"
STEADY, BURST = "steady", "burst"
SETTINGS = {
    "partition.autoscaling.enable": True,
    "partition.autoscaling.min.brokers": 1,
    "partition.autoscaling.max.brokers": 3,
    "partition.autoscaling.max.replicas.per.broker": 4,
    "partition.autoscaling.scale.down.delay.ms": 3_000,
    "partition.autobalancing.tick.interval.ms": 1_000,
    "broker.session.timeout.ms": 2_000,
    "replicas.per.actor": 8,  # fewer processes on the 2 cores
}
IDLE_TIMEOUT_MINUTES = 0.1  # Ray releases a node idle for 6 s


def log(message: str) -> None:
    print(f"[autoscaler {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def autoscaling_config(gcs_address: str) -> dict[str, Any]:
    """Ray's cluster config for the fake multi-node provider: a head that hosts the
    controller, and up to three ephemeral disk nodes."""
    return {
        "cluster_name": "rafka-autoscaler-test",
        "max_workers": 3,
        "idle_timeout_minutes": IDLE_TIMEOUT_MINUTES,
        "upscaling_speed": 1.0,
        "provider": {"type": "fake_multinode", "gcs_address": gcs_address,
                     "use_node_id_as_ip": True, "disable_node_updaters": True,
                     "disable_launch_config_check": True},  # fmt: skip
        "head_node_type": "ray.head.default",  # the fake provider's name for its head
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 1, "rafka_controller": 1}, "node_config": {},
                     "max_workers": 0},  # fmt: skip
            "disk": {"resources": {"CPU": 1, "rafka_disk": 1},
                     "labels": {"rafka-disk": "auto"}, "node_config": {},
                     "min_workers": 0, "max_workers": 3},  # fmt: skip
        },
        "auth": {}, "docker": {}, "file_mounts": {}, "cluster_synced_files": [],
        "file_mounts_sync_continuously": False, "rsync_exclude": [], "rsync_filter": [],
        "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
        "worker_setup_commands": [], "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }  # fmt: skip


class FakeAutoscalingHead:
    """A Ray head with the autoscaler monitor and the fake provider, started with
    ``ray start`` and stopped by killing every process that names its temp dir or port."""

    def __init__(self) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="rafka-as-", dir="/tmp")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"

    def start(self) -> None:
        config = os.path.join(self.temp_dir, "autoscaling.json")
        with open(config, "w") as f:
            json.dump(autoscaling_config(self.address), f)
        env = {**os.environ, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"}
        client_port = free_port()
        while 10002 <= client_port <= 19999:  # Ray's worker port range
            client_port = free_port()
        subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "ray"), "start", "--head",
             f"--port={self.port}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
             '--resources={"rafka_controller": 1}', "--labels=rafka-disk=controller",
             f"--temp-dir={self.temp_dir}", "--include-dashboard=false",
             f"--dashboard-agent-listen-port={free_port()}",
             f"--ray-client-server-port={client_port}", f"--autoscaling-config={config}",
             "--disable-usage-stats"],
            env=env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip

    def stop(self) -> None:
        import psutil

        # Its processes name the temp dir or the GCS port (with this machine's address,
        # which need not be 127.0.0.1).
        port = re.compile(rf":{self.port}\b")
        victims = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if proc.pid != os.getpid() and (self.temp_dir in cmdline or port.search(cmdline)):
                victims.append(proc)
        for proc in victims:
            try:
                for child in proc.children(recursive=True):
                    child.send_signal(signal.SIGKILL)
                proc.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(victims, timeout=10)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def disk_nodes() -> list[str]:
    import ray

    return sorted(n["NodeID"] for n in ray.nodes()
                  if n["Alive"] and n["Resources"].get("rafka_disk"))  # fmt: skip


def main(data_dir: str) -> dict[str, Any]:
    import ray
    from ray.autoscaler.sdk import request_resources

    import rafka

    head = FakeAutoscalingHead()
    report: dict[str, Any] = {"settings": SETTINGS, "timings_s": {}, "disk_nodes": {}}
    timings, nodes = report["timings_s"], report["disk_nodes"]
    writer = admin = None
    try:
        log(f"starting a head with the fake autoscaler at {head.address}")
        head.start()
        # Connect while the head is the only node: the driver attaches to it.
        ray.init(address=head.address, namespace=NAMESPACE, logging_level="ERROR")
        request_resources(bundles=[{"rafka_disk": 1}])  # the first disk node, by hand
        wait_for(lambda: len(disk_nodes()) == 1, 120, "the first disk node")
        cluster = rafka.connect(address=head.address, data_dir=data_dir, namespace=NAMESPACE,
                                settings=SETTINGS)  # fmt: skip
        admin = cluster.admin()
        nodes["at_start"] = len(disk_nodes())

        # 2. A topic written all along.
        admin.create_topic(STEADY, partitions=2, replication_factor=1)
        admin.wait_for_topic(STEADY, 120)
        writer = Writer(cluster, topic=STEADY, partitions=2)
        writer.thread.start()
        wait_for(lambda: len(writer.acked) > 100, 60, "the first acknowledged records")

        # 3. A topic that needs a second broker: rafka asks Ray for it.
        began = time.monotonic()
        try:
            admin.create_topic(BURST, partitions=2, replication_factor=2)
            raise AssertionError("a RF=2 topic was created on one broker")
        except InvalidReplicationFactor as e:
            report["refusal"] = str(e)
        log("RF=2 refused; waiting for the autoscaler's node")
        wait_for(lambda: len(disk_nodes()) == 2, 120, "Ray to launch a second disk node")
        timings["node_launched"] = round(time.monotonic() - began, 1)
        wait_for(lambda: len(admin.brokers()) == 2, 60, "the new node to become a broker")
        timings["broker_registered"] = round(time.monotonic() - began, 1)

        def created():
            try:
                admin.create_topic(BURST, partitions=2, replication_factor=2)
                return True
            except InvalidReplicationFactor:  # the broker is not live yet
                return False

        wait_for(created, 60, "the RF=2 topic to be created once the broker joined")
        admin.wait_for_topic(BURST, 120)
        timings["topic_created"] = round(time.monotonic() - began, 1)
        nodes["after_scale_up"] = len(disk_nodes())

        def balanced():
            s = admin.describe_balancer()
            counts = list(s.replicas.values())
            return s if len(counts) == 2 and not s.in_flight and max(counts) - min(counts) <= 1 \
                else None

        status = wait_for(balanced, 120, "the new broker's share of the replicas")
        timings["balanced"] = round(time.monotonic() - began, 1)
        report["after_scale_up"] = {"replicas": status.replicas, "leaders": status.leaders}

        # 4. The load goes away: a broker is drained, retired, and Ray removes its node.
        began = time.monotonic()
        admin.delete_topic(BURST)
        wait_for(lambda: len(admin.brokers()) == 1, 180, "a broker to be drained and retired")
        timings["broker_retired"] = round(time.monotonic() - began, 1)
        wait_for(lambda: len(disk_nodes()) == 1, 120, "Ray to remove the idle node")
        timings["node_removed"] = round(time.monotonic() - began, 1)
        nodes["after_scale_down"] = len(disk_nodes())
        report["autoscaler"] = admin.describe_balancer().autoscaling

        # 5. Nothing acknowledged is lost.
        time.sleep(1)  # a few more writes on the broker that stayed
        report.update(stop_and_check(writer, cluster))
        writer = None
    except Exception:
        report["error"] = traceback.format_exc()
        try:
            report["balancer_at_error"] = admin.describe_balancer()._asdict()
            report["disk_nodes_at_error"] = len(disk_nodes())
        except Exception:  # noqa: BLE001 - the cluster may be what failed
            pass
    finally:
        if writer is not None:
            try:
                writer.stop()
            except Exception:  # noqa: BLE001
                pass
        try:
            ray.shutdown()
        finally:
            head.stop()
    return report


if __name__ == "__main__":
    print("REPORT " + json.dumps(main(sys.argv[1]), default=str), flush=True)
