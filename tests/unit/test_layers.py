"""Imports point down only: the storage engine and the decision layer never load Ray."""

import subprocess
import sys


def test_storage_cluster_and_wire_import_without_ray():
    """Importing rafka, and every module of rafka.storage, rafka.cluster and rafka.wire (the
    Kafka protocol), leaves Ray unloaded."""
    code = (
        "import sys, pkgutil, importlib, rafka, rafka.storage, rafka.cluster, rafka.wire\n"
        "for pkg in (rafka.storage, rafka.cluster, rafka.wire):\n"
        "    for m in pkgutil.iter_modules(pkg.__path__):\n"
        "        importlib.import_module(pkg.__name__ + '.' + m.name)\n"
        "heavy = [m for m in ('ray', 'pyspark', 'pandas', 'pyarrow') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_spark_client_modules_import_without_pyspark_or_raydp():
    """The Spark clients load pyspark and raydp only when a Spark call runs, so a Ray
    program may use snapshots and offsets (and the CLI its help) without either."""
    code = (
        "import sys\n"
        "import rafka.clients.spark, rafka.clients.spark_offsets, rafka.clients.spark_stream\n"
        "import rafka.clients.topic_snapshot, rafka.clients.spark_writer\n"
        "heavy = [m for m in ('pyspark', 'raydp') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
