"""rafka's benchmark harness, run with ``python -m bench [workload ...]``: named workloads
(bench/harness.py), each measured for rafka and, where a Kafka-compatible broker can run it,
for the peer (bench/peer.py) in the same run."""
