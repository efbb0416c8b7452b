"""Systems as Ray sees them: connecting to a cluster, finding each system's nodes, pinning actors.

A system's nodes carry the label ``system=NAME`` and/or the custom resource ``system:NAME``
(``cluster/`` and ``deploy/`` start them so; a local simulated cluster does it here). Every
actor of a system is created with the matching ``label_selector`` and/or resource, so it can
only run on that system's nodes; a system with no alive node is reported before any actor
is created, because Ray would otherwise leave its actor pending forever.

Three ways to get a cluster (``RayConfig``): an existing one (``address``), a simulated one
on this machine with one node per system (``local_cluster``), or Ray in-process with this
machine as the only node, labelled and resourced for the first system (the default).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from benanza.config import RayConfig, SystemConfig
from benanza.errors import UsageError, one_line

log = logging.getLogger(__name__)

RESOURCE_SHARE = 0.01  # of a node's one unit of ``system:NAME``: many actors may share a node
LOCAL_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def _ray() -> Any:
    try:
        import ray
    except ModuleNotFoundError:
        raise UsageError("the fleet needs Ray: pip install 'benanza[fleet]'") from None
    return ray


def private_tmpdir() -> str:
    """A Ray temp folder of this user (short: Ray's socket paths must fit in 107 bytes)."""
    path = os.environ.get("RAY_TMPDIR") or os.path.join(tempfile.gettempdir(), f"benanza-ray-{os.getuid()}")
    os.makedirs(path, exist_ok=True)
    return path


def _is_loopback(address: str) -> bool:
    host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _stay_on_loopback(ray: Any) -> None:
    """Keep a loopback cluster address on loopback.

    Ray replaces 127.0.0.1 in a bootstrap address with this machine's routable IP; where
    connections to that IP are refused (sandboxes, laptops behind strict firewalls) a
    cluster started on 127.0.0.1 is then unreachable. Ray's own switch for this (read at
    import as ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``) is flipped only for loopback clusters.
    """
    try:
        ray._private.ray_constants.ENABLE_RAY_CLUSTER = False
    except AttributeError:  # a Ray without that switch resolves addresses its own way
        log.debug("cannot keep the Ray address on loopback", exc_info=True)


@dataclass
class RaySession:
    """A connection to a Ray cluster (its address when known), and what to shut down at the end."""

    address: str | None
    owned_ray: bool = False
    cluster: Any = None

    def close(self) -> None:
        ray = _ray()
        if self.owned_ray and ray.is_initialized():
            ray.shutdown()
        if self.cluster is not None:
            self.cluster.shutdown()


@contextmanager
def connect(cfg: RayConfig, systems: Sequence[SystemConfig]) -> Iterator[RaySession]:
    """Connect to (or start) the Ray cluster ``cfg`` names; yields a ``RaySession``.

    Reuses a Ray connection this process already has (tests, notebooks) and then leaves it
    open; anything started here is shut down on exit.
    """
    local = cfg.address is None or _is_loopback(cfg.address)
    if local:
        for k, v in LOCAL_ENV.items():
            os.environ.setdefault(k, v)
    ray = _ray()
    if ray.is_initialized():
        yield RaySession(address=None)
        return
    session = RaySession(address=cfg.address, owned_ray=True)
    dashboard = {"include_dashboard": cfg.dashboard, "dashboard_host": "127.0.0.1"}
    try:
        if cfg.address is not None:
            if local:
                _stay_on_loopback(ray)
            ray.init(address=cfg.address, namespace=cfg.namespace, log_to_driver=False)
        elif cfg.local_cluster:
            from ray.cluster_utils import Cluster

            os.environ.setdefault("RAY_TMPDIR", private_tmpdir())
            session.cluster = Cluster(
                initialize_head=True,
                head_node_args={"num_cpus": 0, "node_ip_address": "127.0.0.1", **dashboard},
            )
            for system in systems:
                session.cluster.add_node(**system.simulated_node(), node_ip_address="127.0.0.1")
            _stay_on_loopback(ray)
            session.address = session.cluster.address
            ray.init(address=session.address, namespace=cfg.namespace, log_to_driver=False)
        else:
            os.environ.setdefault("RAY_TMPDIR", private_tmpdir())
            first = systems[0]
            ray.init(
                address="local",  # a new in-process instance, even where `ray start` runs one
                namespace=cfg.namespace,
                resources={first.resource_name(): 1},
                labels=first.label_selector(),
                _node_ip_address="127.0.0.1",
                log_to_driver=False,
                **dashboard,
            )
        yield session
    except ConnectionError as exc:
        raise UsageError(f"cannot connect to the Ray cluster at {cfg.address}: {one_line(exc)}") from None
    finally:
        session.close()


def system_nodes(systems: Sequence[SystemConfig]) -> dict[str, list[dict[str, Any]]]:
    """Alive Ray nodes of each system (by its label and/or resource, as its placement says)."""
    ray = _ray()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    found: dict[str, list[dict[str, Any]]] = {}
    for system in systems:
        found[system.name] = [
            {"node_id": n["NodeID"], "address": n.get("NodeManagerAddress"), "resources": n.get("Resources", {})}
            for n in nodes
            if _carries(n, system)
        ]
    return found


def _carries(node: dict[str, Any], system: SystemConfig) -> bool:
    """Whether a node belongs to ``system`` by the marks its placement uses."""
    ((label_key, label_value),) = system.label_selector().items()
    by_label = (node.get("Labels") or {}).get(label_key) == label_value
    by_resource = (node.get("Resources") or {}).get(system.resource_name(), 0) > 0
    if system.placement == "label":
        return by_label
    if system.placement == "resource":
        return by_resource
    return by_label and by_resource


def missing_node_reason(system: SystemConfig) -> str:
    what = {
        "label": f"label system={system.name}",
        "resource": f"resource {system.resource_name()}",
        "both": f"label system={system.name} and resource {system.resource_name()}",
    }[system.placement]
    return f"no alive Ray node carries the {what}"


def actor_options(system: SystemConfig, *, max_restarts: int = -1, max_task_retries: int = 1) -> dict[str, Any]:
    """``.options(...)`` that pin an actor to ``system``'s nodes (never left to Ray's choice)."""
    options: dict[str, Any] = {
        "num_cpus": system.num_cpus,
        "max_restarts": max_restarts,
        "max_task_retries": max_task_retries,
    }
    if system.placement in ("label", "both"):
        options["label_selector"] = system.label_selector()
    if system.placement in ("resource", "both"):
        options["resources"] = {system.resource_name(): RESOURCE_SHARE}
    if system.kind == "gpu":
        options["num_gpus"] = 1
    return options


def devices_of(system: SystemConfig, nodes: Sequence[dict[str, Any]]) -> int:
    """How many actors the system gets: one per GPU (its device filter, else its nodes' GPUs), else one."""
    if system.kind != "gpu":
        return 1
    if system.devices is not None:
        return len(system.devices) * max(len(nodes), 1)
    gpus = sum(int(n.get("resources", {}).get("GPU", 0)) for n in nodes)
    return max(gpus, 1)
