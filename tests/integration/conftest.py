"""One Ray instance and one rafka cluster for the whole integration session.

Ray is started here (not by ``rafka.connect``) with ``address="local"`` so the tests never
attach to another Ray instance running on the machine; ``connect`` then finds Ray up and
starts rafka's services in a namespace of their own, with data in a temporary directory.
"""

from __future__ import annotations

import os
import uuid

import pytest

NAMESPACE = "rafka-tests"
#: Group timings short enough for tests (Kafka's test brokers shorten them the same way);
#: two coordinator shards, so groups of one test session meet more than one coordinator.
#: Transactions past their timeout are looked for every 200 ms rather than 10 s.
GROUP_SETTINGS = {
    "group.initial.rebalance.delay.ms": 300,
    "group.min.session.timeout.ms": 500,
    "offsets.topic.num.partitions": 2,
    "transaction.state.log.num.partitions": 2,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
}


@pytest.fixture(scope="session")
def ray_session():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    from rafka.actors.placement import DEFAULT_DISK, DISK_LABEL, DISK_RESOURCE
    from rafka.actors.service import at_broker_priority

    with at_broker_priority():  # as rafka.connect() starts Ray
        ray.init(
            address="local",
            num_cpus=2,
            resources={DISK_RESOURCE: 1},
            labels={DISK_LABEL: DEFAULT_DISK},
            include_dashboard=False,
            namespace=NAMESPACE,
            logging_level="WARNING",
            # Metrics reach Ray's Prometheus endpoint within about a second (default: 10 s).
            _system_config={"metrics_report_interval_ms": 1000},
        )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("rafka-data"))


#: Every Kafka listener kind, each on a free loopback port (TLS files made per session).
KAFKA_LISTENERS = ("PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,"
                   "SASL_SSL://127.0.0.1:0")


@pytest.fixture(scope="session")
def tls_files(data_dir):
    from tests.tls_certs import write_test_certificates

    return write_test_certificates(os.path.join(data_dir, "tls"))


@pytest.fixture(scope="session")
def cluster(ray_session, data_dir, tls_files):
    import rafka

    settings = {**GROUP_SETTINGS, "listeners": KAFKA_LISTENERS,
                "ssl.keystore.location": tls_files["keystore"]}
    c = rafka.connect(data_dir=data_dir, namespace=NAMESPACE, settings=settings)
    yield c
    c.shutdown()


@pytest.fixture
def kafka_bootstrap(cluster):
    """{security protocol: "host:port,..."} of the shared cluster's Kafka listeners (asked
    per test: a test that restarts the services gives the listeners new ports)."""
    from rafka.wire.listeners import Endpoint, bootstrap_string

    cluster.bootstrap_servers  # waits for the listeners to open
    out = {}
    for protocol in ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"):
        found = cluster.gateway.call_controller("listener_endpoints", protocol)
        out[protocol] = bootstrap_string([Endpoint(*e) for listed in found.values()
                                          for e in listed])  # fmt: skip
    return out


@pytest.fixture
def make_topic(cluster):
    """Create topics with unique names, running (their replicas start in the background:
    tests that call replicas directly need them up); delete them after the test (each
    partition is an actor process, so tests clean up after themselves)."""
    admin = cluster.admin()
    created = []

    def make(partitions: int = 1, config: dict | None = None, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        admin.create_topic(name, partitions=partitions, config=config)
        created.append(name)
        admin.wait_for_topic(name)
        return name

    yield make
    for name in created:
        try:
            admin.delete_topic(name)
        except Exception:  # deleted by the test itself
            pass


@pytest.fixture
def topic(make_topic) -> str:
    return make_topic()


@pytest.fixture(scope="session")
def spark(cluster):
    """One Spark session through RayDP for the whole test session (it takes about 10 s to
    start): one executor with one core, so the rafka actors keep the other core."""
    from rafka.clients import spark as rspark

    session = rspark.start_spark("rafka-tests", num_executors=1, executor_cores=1,
                                 executor_memory="1g")  # fmt: skip
    yield session
    rspark.stop_spark()
