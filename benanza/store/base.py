"""The performance-database interface and the registry of stores by URI scheme.

Every backend (SQLite embedded, MongoDB for a fleet) implements ``Store`` with the same
semantics, pinned down by the contract tests in ``tests/test_store.py``:

- ``upsert`` is idempotent by ``BenchmarkRecord.identity()``: writing an identity again
  replaces the stored record (the last write wins; within one call the later record wins),
  so at-least-once retries never duplicate results. Every record of a call is checked before
  anything is written: a record that cannot be stored fails the whole call. What a server
  failure in the middle of a call leaves depends on ``transactional_upsert``: True (SQLite)
  means one transaction per call, so nothing or everything; False (MongoDB) means each
  document is written atomically and a failed call may have written some of its records,
  which the caller's retry of the same call completes.
- Queries see only records of the current ``records.SCHEMA_VERSION``; others are ignored.
- Plans (``bench/plans.py``) are stored beside the records: ``put_plans`` replaces a plan of
  the same ``StoredPlan.identity()``, ``plans`` sees only the current ``PLAN_SCHEMA_VERSION``
  (a database made before plans were stored has none, and analysis says so).
- ``present_spec_ids`` is the planner's question "what is already measured here?" and must
  stay fast for a million records.
- Leases keep two drivers from measuring the same thing, and a dead driver from holding
  work for long: ``claim`` atomically leases to one owner the spec ids that have no
  current-schema record for (system, stack) and no live lease of another owner; each id goes
  to at most one owner at a time. A lease records its owner and its heartbeat
  (``heartbeat_at``, when its owner last claimed or renewed it) and lives ``ttl_s`` seconds
  past it (``expires_at``), after which anyone may take it over. Its owner keeps it alive
  with ``heartbeat``, which renews every lease the owner still holds in one call (the fleet
  driver calls it from a background thread every ``ttl_s / 3``), so a lease outlives a dead
  owner by at most ``ttl_s``, three missed heartbeats, however long its work takes. A lease
  another owner took over stays with it; re-claiming one's own lease renews it too. Times are
  UTC epoch seconds from ``time.time()`` of the process that claims or heartbeats, compared
  in the database: the clocks of drivers sharing a database must agree to well within
  ``ttl_s`` (NTP does). Write the results before ``release``.

A store is opened from a URI (``sqlite:///rel/path.db``, ``sqlite:////abs/path.db``,
``mongodb://host/db``); ``register_store`` adds a scheme. A command that only reads opens
it ``read_only``: opening then writes nothing (no tables, indexes or meta data are created),
so it works where the database cannot be written (a read-only SQLite file or folder, a
read-only MongoDB user); SQLite also refuses every write of such a store. A store holds its
URI as a ``StoreURI`` (``benanza/store/uri.py``) and shows it only as ``shown_uri``, with its
password masked: every message that names a store uses that.

Repeats: when ``upsert`` replaces an ok record by one measured at another time (a run on an
unchanged stack, ``bench run --repeat``), the replaced record is kept as a *repeat* of its
identity; ``repeats`` returns them. Only the newest ``keep_repeats`` per identity are kept
(``$BENANZA_KEEP_REPEATS``, default 10; 0 keeps none), so history is bounded. Writing the same
record again (a retry, a spill drained twice) adds no repeat. Repeats are how the regression
analysis learns each benchmark's run-to-run noise (``benanza/analysis/regressions.py``).
"""

from __future__ import annotations

import importlib
import importlib.util
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Protocol, Self, runtime_checkable

from benanza.bench.plans import StoredPlan
from benanza.bench.records import BenchmarkRecord
from benanza.errors import RegistryError, StoreError, UsageError
from benanza.model.names import NamedModel
from benanza.settings import DEFAULT_KEEP_REPEATS, Settings, load_settings
from benanza.store.uri import DEFAULT_URI, StoreURI, resolve_store_uri


@runtime_checkable
class Store(Protocol):
    """A performance database (see the module docstring for the shared semantics)."""

    uri: StoreURI  # shows itself masked; ``uri.reveal()`` is for connecting only
    transactional_upsert: bool  # one transaction per ``upsert`` call (see the module docstring)

    def upsert(self, records: Iterable[BenchmarkRecord]) -> int:
        """Insert or replace records by identity; returns how many were written."""
        ...

    def present_spec_ids(self, system: str, stack_id: str) -> set[str]:
        """Spec ids with a current-schema record (any outcome) for this system and stack."""
        ...

    def variants(self, system: str, stack_id: str, runtime: str) -> dict[str, int]:
        """How many current-schema records each variant of ``runtime`` holds for this system and stack.

        Variant ids as records hold them (``ep=cpu,opt=extended,threads=2``); what ``threads =
        "auto"`` reads to keep the thread count a system's stored results use (``benanza.targets``).
        """
        ...

    def records(
        self,
        *,
        system: str | None = None,
        stack_id: str | None = None,
        runtime: str | None = None,
        kind: str | None = None,
        keys: Iterable[str] | None = None,
        batch_size: int | None = None,
        outcome: str | None = None,
        payload: bool = True,
    ) -> list[BenchmarkRecord]:
        """Current-schema records matching every given filter, in identity order.

        ``payload=False`` leaves out the raw samples and the spec document (``samples``,
        ``kernel_samples`` and ``spec`` are empty; the identity, ``label``, ``stats`` and
        ``kernel_stats`` are kept): what analysis reads, at a fraction of the bytes.
        """
        ...

    def put_plans(self, system: str, stack_id: str, plans: Iterable[StoredPlan]) -> int:
        """Store the plans a system's stack measured, replacing any of the same identity; returns how many."""
        ...

    def plans(
        self, *, system: str | None = None, stack_id: str | None = None, model: str | None = None
    ) -> list[StoredPlan]:
        """Current-schema plans matching every given filter (``model``: its name), in identity order."""
        ...

    def model_names(self) -> list[NamedModel]:
        """Every stored model under its display name, with its key and file: one per (name, key, path).

        What ``benanza.model.names.distinct_names`` keeps new models' names apart from; read
        without decoding the plans.
        """
        ...

    def repeats(
        self,
        system: str,
        stack_id: str | None = None,
        *,
        runtime: str | None = None,
        keys: Iterable[str] | None = None,
        batch_size: int | None = None,
    ) -> list[BenchmarkRecord]:
        """Earlier current-schema records that ``upsert`` replaced (see the module docstring).

        In identity order, oldest first within an identity; the current record is not among them.
        """
        ...

    def register_system(self, name: str, fingerprint: dict[str, Any]) -> None:
        """Record a system's fingerprint (the latest one is kept; first_seen is not)."""
        ...

    def register_stack(self, system: str, stack_id: str, stack: dict[str, Any]) -> bool:
        """Record a software stack seen on a system; True when it is new for that system."""
        ...

    def systems(self) -> list[dict[str, Any]]:
        """``{"name", "fingerprint", "first_seen", "last_seen"}`` per system, by name."""
        ...

    def stacks(self, system: str | None = None) -> list[dict[str, Any]]:
        """``{"system", "stack_id", "stack", "first_seen", "last_seen"}`` per stack, oldest first per system."""
        ...

    def summary(self) -> list[dict[str, Any]]:
        """``{"system", "stack_id", "runtime", "kind", "outcome", "count"}`` over current-schema records."""
        ...

    def claim(
        self, system: str, stack_id: str, spec_ids: Iterable[str], owner: str, ttl_s: float, retry_failed: bool = False
    ) -> set[str]:
        """Lease to ``owner`` the given ids that are unmeasured and not leased to another; returns those now held.

        ``retry_failed``: an id whose stored record failed counts as unmeasured (``--retry-failed``).
        """
        ...

    def release(self, system: str, stack_id: str, spec_ids: Iterable[str], owner: str) -> None:
        """Drop ``owner``'s leases on these ids (ids it does not hold are ignored)."""
        ...

    def heartbeat(self, owner: str, ttl_s: float) -> int:
        """Renew every lease ``owner`` still holds, to expire ``ttl_s`` from now; returns how many it holds."""
        ...

    def leases(self, system: str | None = None) -> list[dict[str, Any]]:
        """Unexpired leases ``{"system", "stack_id", "spec_id", "owner", "heartbeat_at", "expires_at"}``.

        Sorted by system, stack and spec id; ``heartbeat_at`` is None for a lease that a
        benanza version without heartbeats took.
        """
        ...

    @property
    def shown_uri(self) -> str:
        """The URI as messages, tables, JSON and logs show it: the password and secret options masked."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


Clock = Callable[[], float]  # UTC epoch seconds, as ``time.time``


def keep_repeats(value: int | str | None = None, settings: Settings | None = None) -> int:
    """How many repeats a store keeps per identity: ``value``, else the settings' ``$BENANZA_KEEP_REPEATS``,
    else 10.

    Raises:
        UsageError: not a non-negative integer.
    """
    if value is None:
        return settings.keep_repeats if settings is not None else DEFAULT_KEEP_REPEATS
    try:
        kept = int(str(value).strip())
    except ValueError:
        kept = -1
    if kept < 0:
        raise UsageError(f"kept repeats: expected a non-negative integer, got {value!r}")
    return kept


class StoreBase:
    """Context-manager support, argument checks and the clock shared by the backends.

    ``clock`` gives the times a store writes (lease heartbeats and expiries, when a system
    or stack was first and last seen); a backend takes it as ``clock=`` and tests inject
    one they advance instead of sleeping.
    """

    uri: StoreURI
    transactional_upsert = False
    clock: Clock = staticmethod(time.time)

    def now_iso(self) -> str:
        """The clock's time as ISO-8601 UTC, the timestamp format of every store."""
        return datetime.fromtimestamp(self.clock(), UTC).isoformat(timespec="microseconds")

    @property
    def shown_uri(self) -> str:
        return self.uri.masked

    @staticmethod
    def _lease_ids(spec_ids: Iterable[str], owner: str, ttl_s: float | None = None) -> list[str]:
        """The distinct ids of a ``claim``/``release`` call in their given order, after checking its arguments."""
        if isinstance(spec_ids, str):
            raise UsageError(f"spec_ids must be a collection of ids, not the string {spec_ids!r}")
        if not owner:
            raise UsageError("a lease needs an owner")
        if ttl_s is not None and not ttl_s > 0:
            raise UsageError(f"a lease needs a positive ttl_s, got {ttl_s!r}")
        return list(dict.fromkeys(str(i) for i in spec_ids))

    @classmethod
    def _check_heartbeat(cls, owner: str, ttl_s: float) -> None:
        """Check the arguments of a ``heartbeat`` call."""
        cls._lease_ids((), owner, ttl_s)

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.shown_uri!r})"


StoreFactory = Callable[..., Store]
"""Called as ``factory(uri, create=..., read_only=..., settings=...)`` with a ``StoreURI`` and the resolved
``Settings`` (kept repeats, retry window), and ``clock=`` when one is given;
``create=False`` must not create a missing database, and ``read_only=True`` (which comes with ``create=False``) must
write nothing while opening."""

_STORES: dict[str, StoreFactory] = {}
# Built-in backends are imported only when their scheme is asked for (pymongo stays optional).
_BUILTIN = {
    "sqlite": "benanza.store.sqlite",
    "mongodb": "benanza.store.mongo",
    "mongodb+srv": "benanza.store.mongo",
}


def register_store(scheme: str) -> Callable[[StoreFactory], StoreFactory]:
    """Register a store factory for a URI scheme (``@register_store("sqlite")``)."""

    def decorate(factory: StoreFactory) -> StoreFactory:
        _STORES[scheme.lower()] = factory
        return factory

    return decorate


def store_schemes() -> list[str]:
    """The URI schemes that can be opened here."""
    available = {s for s, module in _BUILTIN.items() if importlib.util.find_spec(module) is not None}
    return sorted(set(_STORES) | available)


def default_uri(settings: Settings) -> StoreURI:
    """The settings' ``$BENANZA_DB``, or the URI in the file ``$BENANZA_DB_FILE``, or a SQLite file ``benanza.db`` here.

    Raises:
        UsageError: both variables are set, or the file cannot be read.
    """
    return resolve_store_uri(settings=settings)


def uri_scheme(uri: str | StoreURI) -> str:
    """The scheme of a store URI (``sqlite`` of ``sqlite:///x.db``)."""
    uri = StoreURI.of(uri)
    if not uri.scheme:
        raise UsageError(f"not a database URI: {uri.masked!r} (expected e.g. {DEFAULT_URI} or mongodb://host/db)")
    return uri.scheme


def open_store(
    uri: str | StoreURI | None = None,
    *,
    create: bool = True,
    read_only: bool = False,
    clock: Clock | None = None,
    settings: Settings | None = None,
) -> Store:
    """The store a URI names (default: ``default_uri(settings)``).

    Args:
        uri: ``sqlite:///rel/path.db``, ``sqlite:////abs/path.db``, ``mongodb://...``; None
            or ``""`` for ``default_uri(settings)``.
        create: create the database when it does not exist; when False a missing one is a
            ``StoreError``.
        read_only: for commands that only read (``benanza db ls``, ``analyze systems``,
            ``fleet status``): open without writing anything, so a database this process
            cannot write can still be read; implies ``create=False``.
        clock: the store's clock (``StoreBase.clock``); default ``time.time``.
        settings: the ``BENANZA_*`` settings (default URI, kept repeats, retry window); None reads this
            process's environment (``load_settings``), as a public entry point does.

    Raises:
        RegistryError: no store is registered for the URI's scheme.
        StoreError: the database cannot be opened.
        UsageError: the URI is malformed, or the environment names an unreadable URI file.
    """
    settings = settings if settings is not None else load_settings()
    uri = StoreURI.of(uri) if uri else default_uri(settings)
    scheme = uri_scheme(uri)
    if scheme not in _STORES and scheme in _BUILTIN:
        _import_builtin(scheme)
    try:
        factory = _STORES[scheme]
    except KeyError:
        raise RegistryError("store scheme", scheme, store_schemes()) from None
    options = {} if clock is None else {"clock": clock}
    return factory(uri, create=create and not read_only, read_only=read_only, settings=settings, **options)


def _import_builtin(scheme: str) -> None:
    module = _BUILTIN[scheme]
    try:
        importlib.import_module(module)  # registers its schemes
    except ModuleNotFoundError as exc:
        if exc.name == module:
            return  # that backend is not part of this installation: the registry error lists what is
        raise StoreError(
            f"the {scheme} store needs the {exc.name!r} package, a dependency of benanza: reinstall it (pip install .)"
        ) from None
