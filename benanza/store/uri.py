"""Store URIs as values that never show their credentials.

A MongoDB URI carries a password (``mongodb://user:PASSWORD@host/db``) and sometimes secrets in
its options (``authMechanismProperties=AWS_SESSION_TOKEN:...``,
``tlsCertificateKeyFilePassword=...``). ``StoreURI`` holds the URI as given and only ever shows
its masked form: ``str``, ``repr`` and ``format`` give ``mask_uri(uri)``, and only the code
that connects asks for the real one (``reveal()``). Stores keep their URI as a ``StoreURI``, so
a message, table title, JSON field or log line that names a store shows the masked form
whatever it is built from.

Masking must hold on URIs people get wrong, where a parser would misread where the password
ends. The rule: a well-formed user info (``user:password@`` before the hosts, with no
unescaped ``@ / ? #`` in it) keeps its user and loses its password; otherwise everything
between ``://`` and the *last* ``@`` is masked (a password with an unescaped ``/``, ``@`` or
``?``, a URI without a scheme). A host's port that is not a number is masked (``user:pw``
with the ``@host`` forgotten), and so is the value of every query option whose name says it
holds a secret (``SECRET_OPTION``). SQLite URIs name a file and are shown as they are.

Where the URI comes from (``resolve_store_uri``): ``--db URI``, or ``--db-file FILE`` (the URI
read from a file, e.g. a mounted secret); else the settings' ``$BENANZA_DB``, or
``$BENANZA_DB_FILE`` (``benanza.settings``, read by the caller); else ``sqlite:///benanza.db``.
A file holds the URI alone; surrounding whitespace is ignored.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from benanza.errors import UsageError
from benanza.settings import Settings

DEFAULT_URI = "sqlite:///benanza.db"  # relative to the working directory
DB_ENV = "BENANZA_DB"
DB_FILE_ENV = "BENANZA_DB_FILE"
MASK = "***"
# Query options whose value is (or holds) a secret, by name (case-insensitive, after unescaping).
SECRET_OPTION = re.compile(r"pass|pwd|secret|token|credential|authmechanismproperties|key$", re.IGNORECASE)
_FILE_SCHEMES = frozenset({"sqlite"})  # a path, never credentials
_UNSAFE_IN_USERINFO = re.compile(r"[/?#@]")
_SHORTEST_FREE_PIECE = 4  # ``redact`` masks a hidden piece this long anywhere, a shorter one as a word
_DELIMITERS = re.compile(r"[:/@?#&=,;]")


def mask_uri(uri: str) -> str:
    """``uri`` with its password, secret options and anything that may hold them replaced by ``***``.

    ``mongodb://bench:s3cr%40t@db:27017/perf?tls=true`` -> ``mongodb://bench:***@db:27017/perf?tls=true``;
    ``mongodb://bench:pa/ss@db/perf`` -> ``mongodb://***@db/perf`` (see the module docstring).
    """
    return _masked(uri)[0]


def _masked(uri: str) -> tuple[str, list[str]]:
    """``(masked URI, the parts it hides)``."""
    hidden: list[str] = []
    scheme, sep, rest = uri.partition("://")
    prefix = f"{scheme}{sep}" if sep else ""
    if not sep:
        rest = uri
    elif scheme.lower() in _FILE_SCHEMES and rest.startswith("/"):
        return prefix + _mask_after_hosts(rest, hidden), hidden
    userinfo, at, rest = rest.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        if sep and not _UNSAFE_IN_USERINFO.search(userinfo):
            hidden.append(password)
            userinfo = f"{user}:{MASK}" if colon else user
        else:
            hidden.append(userinfo)
            userinfo = MASK
    end = re.search(r"[/?#]", rest)
    hosts, rest = (rest, "") if end is None else (rest[: end.start()], rest[end.start() :])
    return f"{prefix}{userinfo}{at}{_mask_ports(hosts, hidden)}{_mask_after_hosts(rest, hidden)}", hidden


def _mask_ports(hosts: str, hidden: list[str]) -> str:
    """Hosts with every port that is not a number masked (``alice:pw`` read as host:port)."""
    shown = []
    for host in hosts.split(","):
        name, colon, port = host.rpartition(":")
        if colon and not port.isdigit() and not host.endswith("]"):  # ``[::1]`` is an IPv6 host, no port
            hidden.append(port)
            host = f"{name}:{MASK}"
        shown.append(host)
    return ",".join(shown)


def _mask_after_hosts(rest: str, hidden: list[str]) -> str:
    """The path kept, secret query options masked, a fragment masked whole."""
    rest, hash_, fragment = rest.partition("#")
    path, qmark, query = rest.partition("?")
    if qmark:
        options = []
        for option in re.split(r"([&;])", query):
            name, eq, value = option.partition("=")
            if eq and SECRET_OPTION.search(unquote(name)):
                hidden.append(value)
                option = f"{name}={MASK}"
            options.append(option)
        query = "".join(options)
    if hash_:
        hidden.append(fragment)
    return f"{path}{qmark}{query}{hash_}{MASK if hash_ else ''}"


class StoreURI:
    """A store URI that shows only its masked form; ``reveal()`` gives the URI to connect with.

    An immutable value: equal, and hashed alike, when the URIs are; pickled whole (a Ray
    worker opens the store its driver names). Deliberately not a dataclass, so that no generic
    dump (``dataclasses.asdict``, pydantic's ``model_dump``) turns it into a dict holding the
    password. ``StoreURI.of`` accepts a string or a ``StoreURI``; pydantic models may declare
    fields of this type (validated from strings, dumped to JSON masked).
    """

    __slots__ = ("_hidden", "_pieces", "_uri", "masked")
    _uri: str
    masked: str  # what every message, table, JSON field and log line shows
    _hidden: tuple[str, ...]  # what ``masked`` leaves out (raw and unescaped), longest first
    _pieces: tuple[str, ...]  # those parts split at URI delimiters

    def __init__(self, uri: str) -> None:
        if not isinstance(uri, str):
            raise TypeError(f"a store URI is a string, not {type(uri).__name__}")
        masked, hidden = _masked(uri)
        parts = {p for p in hidden if p} | {unquote(p) for p in hidden if p}
        pieces = {piece for part in parts for piece in _DELIMITERS.split(part) if piece} - parts
        for name, value in (
            ("_uri", uri),
            ("masked", masked),
            ("_hidden", tuple(sorted(parts, key=len, reverse=True))),
            ("_pieces", tuple(sorted(pieces, key=len, reverse=True))),
        ):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"StoreURI is immutable (cannot set {name!r})")

    def __eq__(self, other: object) -> bool:
        return self._uri == other._uri if isinstance(other, StoreURI) else NotImplemented

    def __hash__(self) -> int:
        return hash((StoreURI, self._uri))

    def __reduce__(self) -> tuple[type[StoreURI], tuple[str]]:
        return StoreURI, (self._uri,)

    @classmethod
    def of(cls, uri: str | StoreURI) -> StoreURI:
        return uri if isinstance(uri, StoreURI) else cls(uri)

    def reveal(self) -> str:
        """The URI with its credentials: only for the driver that connects, never to show."""
        return self._uri

    @property
    def scheme(self) -> str:
        """The scheme, lower-cased (``""`` when there is none)."""
        scheme, sep, _ = self._uri.partition("://")
        return scheme.lower() if sep else ""

    def redact(self, text: str) -> str:
        """``text`` (a driver's error message) with this URI shown masked and nothing of what it hides.

        The URI becomes its masked form, each hidden part ``***``, and so does each piece of a
        hidden part between URI delimiters (a parser quoting the half of a password it read as
        a port): anywhere when it is ``_SHORTEST_FREE_PIECE`` characters or longer, as a whole
        word when shorter.
        """
        text = text.replace(self._uri, self.masked)
        for secret in self._hidden:
            text = text.replace(secret, MASK)
        for piece in self._pieces:
            if len(piece) >= _SHORTEST_FREE_PIECE:
                text = text.replace(piece, MASK)
            else:
                text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(piece)}(?![A-Za-z0-9])", MASK, text)
        return text

    def __str__(self) -> str:
        return self.masked

    def __repr__(self) -> str:
        return f"StoreURI({self.masked!r})"

    def __format__(self, spec: str) -> str:
        return format(self.masked, spec)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        def validate(value: Any) -> StoreURI:
            if isinstance(value, StoreURI):
                return value
            if isinstance(value, str):
                return cls(value)
            raise ValueError("a store URI must be a string")

        def serialize(value: StoreURI, info: Any) -> StoreURI | str:
            return value if info.mode == "python" else value.masked  # JSON: masked; Python: the value itself

        return core_schema.no_info_plain_validator_function(
            validate, serialization=core_schema.plain_serializer_function_ser_schema(serialize, info_arg=True)
        )


def read_uri_file(path: str | os.PathLike[str]) -> StoreURI:
    """The URI a file holds (a mounted secret: the URI alone), surrounding whitespace stripped.

    Raises:
        UsageError: the file cannot be read or holds no URI (the message never quotes its content).
    """
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the database URI: {exc.strerror or type(exc).__name__}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: the database URI file is not UTF-8 text") from None
    if not text:
        raise UsageError(f"{path}: the database URI file is empty")
    if "\n" in text:
        raise UsageError(f"{path}: the database URI file holds several lines; write the URI alone")
    return StoreURI(text)


def uri_from_settings(settings: Settings) -> StoreURI | None:
    """``$BENANZA_DB``, or the URI in the file ``$BENANZA_DB_FILE`` names, or None (``settings`` holds both).

    Raises:
        UsageError: both are set, or the file cannot be read.
    """
    if settings.db and settings.db_file:
        raise UsageError(f"both {DB_ENV} and {DB_FILE_ENV} are set; set one")
    if settings.db_file:
        return read_uri_file(settings.db_file)
    return StoreURI(settings.db) if settings.db else None


def resolve_store_uri(
    uri: str | StoreURI | None = None,
    uri_file: str | os.PathLike[str] | None = None,
    settings: Settings | None = None,
) -> StoreURI:
    """The store to open: ``uri`` (``--db``), or the URI in ``uri_file`` (``--db-file``), else the
    environment's (``uri_from_settings``; None: no settings, no variables), else ``DEFAULT_URI``.

    Raises:
        UsageError: both ``uri`` and ``uri_file`` are given, or a file cannot be read.
    """
    if uri is not None and uri_file is not None:
        raise UsageError("give --db or --db-file, not both")
    if uri is not None:
        return StoreURI.of(uri)
    if uri_file is not None:
        return read_uri_file(uri_file)
    from_settings = uri_from_settings(settings) if settings is not None else None
    return from_settings or StoreURI(DEFAULT_URI)
