"""Systems as Ray sees them: connecting to a cluster, finding each system's nodes, pinning actors.

A system's nodes carry the label ``system=NAME`` and/or the custom resource ``system:NAME``
(``cluster/`` and ``deploy/`` start them so; a local simulated cluster does it here). Every
actor of a system is created with the matching ``label_selector`` and/or resource, so it can
only run on that system's nodes; a system with no alive node is reported before any actor
is created, because Ray would otherwise leave its actor pending forever.

Three ways to get a cluster (``RayConfig``): an existing one (``address``), a simulated one
on this machine with one node per system (``local_cluster``), or Ray in-process with this
machine as the only node, labelled and resourced for the first system (the default).

A cluster started here (the last two) can be reached from this machine only: every Ray
process of it listens on 127.0.0.1 (``_loopback_only``), and Ray's token authentication is on,
with the user's Ray token where there is one and otherwise a random token of this process
(``new_cluster_auth``). Its files go to a folder only this user can enter
(``private_tmpdir``). Joining a cluster (``address``) uses token authentication whenever a
token is available here (``joining_auth``). Every setting made for a connection is undone
when it closes.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import stat
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benanza.config import RayConfig, SystemConfig
from benanza.errors import UsageError, one_line

log = logging.getLogger(__name__)

RESOURCE_SHARE = 0.01  # of a node's one unit of ``system:NAME``: many actors may share a node
# Ray's switch (read when Ray is imported) that lets it replace a loopback node address by this
# machine's routable IP; with it on, the GCS, raylets, workers, agents and metrics of a cluster
# started on 127.0.0.1 listen on that IP or on every interface.
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
AUTH_MODE = "RAY_AUTH_MODE"  # "token" or "disabled"
AUTH_TOKEN = "RAY_AUTH_TOKEN"  # the token itself
AUTH_TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"  # a file holding it; without either Ray reads ~/.ray/auth_token
TOKEN_HINT = f"put the cluster's token in a file named by {AUTH_TOKEN_PATH}, or in ~/.ray/auth_token"
_process_token: str | None = None  # the token of the clusters this process starts, made once


def _ray() -> Any:
    try:
        import ray
    except ModuleNotFoundError:
        raise UsageError(
            "the fleet needs Ray, a dependency of benanza this environment lacks: reinstall benanza (pip install .)"
        ) from None
    return ray


# -- the private temp folder -------------------------------------------------------------------


def private_tmpdir() -> str:
    """A Ray temp folder only this user can enter (short: Ray's socket paths must fit in 107 bytes).

    ``$RAY_TMPDIR`` when set (the user's choice, used as it is); otherwise
    ``<tmp>/benanza-ray-<uid>``, created with mode 0700. Ray makes its session folders
    world-writable, so the folder above them must be this user's alone, and a predictable name
    in a shared ``/tmp`` may have been planted by someone else: a symbolic link, anything
    owned by another user, or a folder others can write to is refused. A folder of ours that
    others could only read (older benanza versions made it 0755) is closed to them, unless
    something in it belongs to another user.

    Raises:
        UsageError: the folder cannot be made private (the message says why and what to remove).
    """
    if os.environ.get("RAY_TMPDIR"):
        return os.environ["RAY_TMPDIR"]
    path = os.path.join(tempfile.gettempdir(), f"benanza-ray-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UsageError(f"{path}: cannot create Ray's temp folder: {exc.strerror}") from None
    _make_private(path)
    return path


def _make_private(path: str) -> None:
    """Check through a handle no symbolic link can redirect that ``path`` is a folder of ours alone."""
    refuse = f"{path}: refused as Ray's temp folder"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        reason = "it is a symbolic link" if os.path.islink(path) else f"it is not a folder ({exc.strerror})"
        raise UsageError(f"{refuse}: {reason}; remove it or set RAY_TMPDIR") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            raise UsageError(f"{refuse}: it belongs to uid {st.st_uid}, not to you (uid {os.getuid()}); remove it")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o022:
            raise UsageError(f"{refuse}: others can write to it (mode {mode:o}); remove it")
        if mode & 0o077:
            foreign = _foreign_entry(path)
            if foreign is not None:
                raise UsageError(f"{refuse}: {foreign} in it belongs to another user; remove the folder")
            os.fchmod(fd, 0o700)
            log.info("made %s private (it was mode %o)", path, mode)
    finally:
        os.close(fd)


def _foreign_entry(path: str) -> str | None:
    """The first thing under ``path`` that another user owns (links not followed), or None."""
    uid = os.getuid()
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            entry = os.path.join(root, name)
            try:
                if os.lstat(entry).st_uid != uid:
                    return entry
            except FileNotFoundError:  # a Ray process removed it meanwhile
                continue
    return None


# -- binding and authentication ----------------------------------------------------------------


def _is_loopback(address: str) -> bool:
    host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables (Ray's child processes inherit them) for the block, then restore them."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def _loopback_only(ray: Any) -> Iterator[None]:
    """Keep a loopback node or cluster address on loopback for the block.

    Ray replaces 127.0.0.1 by this machine's routable IP and then binds its servers to that IP
    or to every interface; where connections to that IP are refused (sandboxes, laptops behind
    strict firewalls) a cluster started on 127.0.0.1 is even unreachable. Ray reads its switch
    (``LOOPBACK_SWITCH``) at import: the constant is flipped for this process, the environment
    for the processes Ray starts.
    """
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    before = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    if before is None:  # a Ray without that switch resolves addresses its own way
        log.debug("cannot keep the Ray address on loopback: no ray_constants.ENABLE_RAY_CLUSTER")
    else:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        with _environ(
            {LOOPBACK_SWITCH: "0", "RAY_USAGE_STATS_ENABLED": os.environ.get("RAY_USAGE_STATS_ENABLED", "0")}
        ):
            yield
    finally:
        if before is not None:
            constants.ENABLE_RAY_CLUSTER = before


def token_available() -> bool:
    """Whether Ray finds a token: ``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH`` names, or ~/.ray/auth_token."""
    if os.environ.get(AUTH_TOKEN):
        return True
    path = os.environ.get(AUTH_TOKEN_PATH)
    return Path(path).is_file() if path else (Path.home() / ".ray" / "auth_token").is_file()


def new_cluster_auth() -> dict[str, str]:
    """The auth environment of a cluster started here: token mode, with the user's token or this process's.

    A ``RAY_AUTH_MODE`` the user set is kept (``disabled`` leaves the loopback binding as the
    only guard). Without a token of the user's, a random one is made once per process and
    passed in the environment, which only this user can read: nothing is written to disk,
    and Ray's processes (GCS, raylets, workers, agents) inherit it.
    """
    global _process_token
    mode = os.environ.get(AUTH_MODE, "token")
    if mode.lower() != "token":
        log.warning("%s=%s: the Ray cluster started here accepts any connection from this machine", AUTH_MODE, mode)
        return {}
    if token_available():
        return {AUTH_MODE: "token"}
    _process_token = _process_token or secrets.token_hex(32)
    return {AUTH_MODE: "token", AUTH_TOKEN: _process_token}


def joining_auth() -> dict[str, str]:
    """Token mode for joining a cluster whenever a token is available (a cluster without auth accepts it too).

    Ray itself sends a token to an explicit address only when ``RAY_AUTH_MODE=token`` is set.
    """
    if AUTH_MODE not in os.environ and token_available():
        return {AUTH_MODE: "token"}
    return {}


def _reload_auth_settings() -> None:
    """Make this process's Ray see the current auth environment (Ray caches its config and token)."""
    try:
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    except (ImportError, AttributeError):  # a Ray without token authentication
        log.debug("cannot reload Ray's auth settings", exc_info=True)


@contextmanager
def _auth(values: dict[str, str]) -> Iterator[None]:
    """The auth environment ``values`` for the block, seen by this process's Ray too."""
    with _environ(values):
        _reload_auth_settings()
        yield
    _reload_auth_settings()


def _is_auth_refusal(exc: BaseException) -> bool:
    seen = 0
    cause: BaseException | None = exc
    while cause is not None and seen < 10:
        if type(cause).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(cause):
            return True
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return False


def _connect_failure(address: str, exc: BaseException) -> str:
    """One line for a failed connection; says what to do where the cluster refused our token or its lack."""
    if not _is_auth_refusal(exc):
        return f"cannot connect to the Ray cluster at {address}: {one_line(exc)}"
    sent = os.environ.get(AUTH_MODE, "").lower() == "token" and token_available()
    what = "refused this machine's Ray token" if sent else "requires Ray's token authentication and no token was found"
    return f"cannot connect to the Ray cluster at {address}: it {what} ({TOKEN_HINT})"


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
    open; anything started here is shut down on exit and the environment restored.

    Raises:
        UsageError: the cluster cannot be reached, refuses our token or needs one we lack, or
            Ray's temp folder cannot be made private.
    """
    ray = _ray()
    if ray.is_initialized():
        yield RaySession(address=None)
        return
    session = RaySession(address=cfg.address, owned_ray=True)
    with ExitStack() as settings:
        if cfg.address is None or _is_loopback(cfg.address):
            settings.enter_context(_loopback_only(ray))
        if cfg.address is None:
            settings.enter_context(_environ({"RAY_TMPDIR": private_tmpdir()}))
            settings.enter_context(_auth(new_cluster_auth()))
        else:
            settings.enter_context(_auth(joining_auth()))
        try:
            try:
                _start(ray, cfg, systems, session)
            except Exception as exc:
                if not (isinstance(exc, ConnectionError) or _is_auth_refusal(exc)):
                    raise
                raise UsageError(_connect_failure(cfg.address or session.address or "127.0.0.1", exc)) from None
            yield session
        finally:
            session.close()


def _start(ray: Any, cfg: RayConfig, systems: Sequence[SystemConfig], session: RaySession) -> None:
    """Join ``cfg.address``, or start the local cluster or in-process Ray and connect to it."""
    dashboard = {"include_dashboard": cfg.dashboard, "dashboard_host": "127.0.0.1"}
    if cfg.address is not None:
        ray.init(address=cfg.address, namespace=cfg.namespace, log_to_driver=False)
    elif cfg.local_cluster:
        from ray.cluster_utils import Cluster

        session.cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 0, "node_ip_address": "127.0.0.1", **dashboard},
        )
        for system in systems:
            session.cluster.add_node(**system.simulated_node(), node_ip_address="127.0.0.1")
        session.address = session.cluster.address
        ray.init(address=session.address, namespace=cfg.namespace, log_to_driver=False)
    else:
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
