"""Connecting a command to Ray and the rafka services: the ``--address`` and ``--namespace``
options, and the context managers that join (or embed) Ray for the length of a command."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, Iterator

from rafka.errors import RafkaError


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--address",
        metavar="ADDR",
        help="Ray address to join (host:port, ray://host:10001 or auto); default: the Ray "
        "instance running on this machine, else an embedded one for this command",
    )
    parser.add_argument(
        "--namespace",
        metavar="NS",
        help="Ray namespace of the rafka services (default $RAFKA_NAMESPACE or 'rafka')",
    )


def resolve_namespace(args: argparse.Namespace) -> str:
    from rafka.actors.placement import default_namespace

    return args.namespace or default_namespace()


def _quiet_ray() -> None:
    import warnings

    # ray.init warns about a future change of GPU env vars: noise for a command line tool.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"ray\.")


def local_ray_address(args: argparse.Namespace) -> str | None:
    """The Ray address this command will join: ``--address``, else the instance running on
    this machine (``rafka up`` or ``ray start``); None when neither (or when this process is
    already connected to Ray, as in tests)."""
    import ray

    from rafka.actors import service

    if args.address or ray.is_initialized():
        return args.address
    return service._running_local_ray()


def join_ray(address: str, namespace: str | None) -> None:
    """Connect this process to the Ray at ``address`` as ``service.ensure_ray`` would (which
    then has nothing left to do), but without streaming the log lines of every worker in the
    cluster to this terminal: they are not the command's output."""
    import logging

    import ray

    from rafka.actors.placement import default_namespace
    from rafka.actors.service import AUTH_MODE_ENV, check_ray_answers

    if ray.is_initialized():
        return
    check_ray_answers(address)  # a dead address fails in seconds, not minutes
    os.environ.setdefault(AUTH_MODE_ENV, "disabled")
    ray.init(
        address=address, namespace=namespace or default_namespace(), log_to_driver=False,
        logging_level=logging.WARNING,
    )  # fmt: skip


def _no_ray() -> RafkaError:
    from rafka.errors import BrokerNotAvailable

    return BrokerNotAvailable(
        "no Ray instance runs on this machine; start rafka with `rafka up`, or give --address"
    )


@contextlib.contextmanager
def ray_session() -> Iterator[None]:
    """Disconnect from Ray at the end if this command connected: an explicit shutdown stops
    Ray's log-printing thread, which otherwise may fail while the interpreter exits."""
    _quiet_ray()
    import ray

    connected_before = ray.is_initialized()
    try:
        yield
    finally:
        if not connected_before and ray.is_initialized():
            ray.shutdown()


@contextlib.contextmanager
def connected(args: argparse.Namespace, need_ray: bool = False) -> Iterator[Any]:
    """A Cluster for this command: attach to the running services (BrokerNotAvailable if there
    are none). With no Ray anywhere, start an embedded one with its services for this command
    and stop them cleanly when it ends, unless ``need_ray`` (then BrokerNotAvailable)."""
    import ray

    import rafka

    with ray_session():
        address = local_ray_address(args)
        embedded = address is None and not ray.is_initialized()
        if embedded and need_ray:
            raise _no_ray()
        if embedded:
            from rafka.actors.placement import default_data_root

            print(
                "note: no Ray instance runs on this machine: starting an embedded one for this "
                f"command, data in {default_data_root()} (`rafka up` starts one that stays)",
                file=sys.stderr,
            )
        if address is not None:
            join_ray(address, args.namespace)
        cluster = rafka.connect(address, namespace=args.namespace, start=embedded)
        try:
            yield cluster
        finally:
            if embedded:
                cluster.shutdown()  # replicas flush and close; the data stays
