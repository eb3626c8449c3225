"""``python -m bench [workload ...]``: rafka's benchmark workloads, rafka beside the peer in one
run; see bench/harness.py for the workloads, the options and where the results go."""

from __future__ import annotations

from bench.harness import run_main

if __name__ == "__main__":
    run_main()
