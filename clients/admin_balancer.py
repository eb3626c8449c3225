"""BalancerAdmin: the balancer half of ``Admin`` (as Cruise Control's remove_broker,
rebalance and state endpoints): drain a broker before its node goes, run or preview a
rebalance, see what the balancer is doing. The controller decides and carries out
(``rafka.actors.balancing``); these calls only ask it."""

from __future__ import annotations

from typing import Any

from rafka.types import BalancerMove, BalancerPlan, BalancerStatus


def _plan(answer: dict[str, Any]) -> BalancerPlan:
    return BalancerPlan(
        moves=[BalancerMove(m["topic"], m["partition"], list(m["replicas"]), m["source"],
                            m["destination"], m["goal"]) for m in answer["moves"]],
        leader_moves=[(m["topic"], m["partition"], m["leader"], m["goal"])
                      for m in answer["leader_moves"]],
        violations={g: list(v) for g, v in answer["violations"].items()},
    )  # fmt: skip


def _status(answer: dict[str, Any]) -> BalancerStatus:
    return BalancerStatus(
        mode=answer["mode"], goals=list(answer["goals"]),
        balancing_node_add=answer["balancing_node_add"], draining=list(answer["draining"]),
        dead={int(b): ms for b, ms in answer["dead"].items()},
        heal_after_ms=answer["heal_after_ms"], in_flight=list(answer["in_flight"]),
        replicas={int(b): n for b, n in answer["replicas"].items()},
        leaders={int(b): n for b, n in answer["leaders"].items()},
        moves_started=answer["moves_started"], pending=_plan(answer["pending"]),
        # A controller older than the load reports answers none of these.
        disk_used=_per_broker(answer, "disk_used", int),
        disk_capacity=_per_broker(answer, "disk_capacity", int),
        bytes_in_per_s=_per_broker(answer, "bytes_in_per_s", float),
        bytes_out_per_s=_per_broker(answer, "bytes_out_per_s", float),
        autoscaling=answer.get("autoscaling"), host_packing=answer.get("host_packing"),
    )  # fmt: skip


def _per_broker(answer: dict[str, Any], name: str, kind: type) -> dict[int, Any]:
    return {int(b): kind(v) for b, v in answer.get(name, {}).items()}


def _broker_id(broker_id: Any) -> int:
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
        raise TypeError(f"broker_id must be a broker id (an int >= 0), got {broker_id!r}")
    return broker_id


class BalancerAdmin:
    """Part of ``Admin`` (its field ``_gateway``)."""

    def drain_broker(self, broker_id: int) -> BalancerStatus:
        """Move every replica and leadership off ``broker_id`` (throttled, by follower
        fetch), so its node can be removed; the broker takes no new replicas while it
        drains. Returns at once: ``describe_balancer().replicas[broker_id]`` reaches 0 when
        it is empty. Raises InvalidReplicaAssignment for an unknown broker or the last one
        not draining."""
        return _status(self._gateway.call_controller("drain_broker", _broker_id(broker_id), True))

    def undrain_broker(self, broker_id: int) -> BalancerStatus:
        """Stop draining ``broker_id``: moves already started finish, no more are made."""
        return _status(self._gateway.call_controller("drain_broker", _broker_id(broker_id),
                                                     False))  # fmt: skip

    def rebalance(self, dry_run: bool = True) -> BalancerPlan:
        """A plan over every goal of the balancer (racks, leaving brokers, disks, replicas and
        leaders per broker, traffic), as the balancer would make it now; started when
        ``dry_run=False`` (at most the throttle's worth at once, the rest in the next ticks)."""
        return _plan(self._gateway.call_controller("rebalance", bool(dry_run)))

    def describe_balancer(self) -> BalancerStatus:
        return _status(self._gateway.call_controller("describe_balancer"))
