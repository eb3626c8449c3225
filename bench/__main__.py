"""Run rafka's benchmarks: ``python -m bench [name ...]`` runs the named ones, or all of them.

A benchmark is a module ``bench.<name>`` listed in ``BENCHMARKS`` that defines
``add_arguments(group)`` (its command-line options) and ``run(args)`` (measure, print, save).
"""

from __future__ import annotations

import argparse
import importlib
from types import ModuleType

BENCHMARKS = ("storage", "clients", "failover", "groups", "spark")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Run rafka's benchmarks (all when none is named)."
    )
    # No `choices=`: with nargs="*", argparse before 3.12 rejects the empty default.
    parser.add_argument(
        "names", nargs="*", metavar="name", help=f"benchmarks to run: {', '.join(BENCHMARKS)}"
    )
    modules: dict[str, ModuleType] = {}
    for name in BENCHMARKS:
        modules[name] = importlib.import_module(f"bench.{name}")
        modules[name].add_arguments(parser.add_argument_group(f"{name} benchmark"))
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in modules]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    for name in args.names or BENCHMARKS:
        modules[name].run(args)


if __name__ == "__main__":
    main()
