"""The performance database: versioned benchmark records in a store chosen by URI.

``open_store()`` opens ``$BENANZA_DB`` (or the URI in the file ``$BENANZA_DB_FILE``) or
``sqlite:///benanza.db``; ``mongodb://`` URIs open the fleet store when it is installed. A
store's URI is a ``StoreURI``, shown with its password masked.
"""

from benanza.bench.records import SCHEMA_VERSION, BenchmarkRecord, Outcome, make_record
from benanza.store.base import Store, default_uri, open_store, register_store, store_schemes
from benanza.store.uri import DEFAULT_URI, StoreURI, mask_uri, resolve_store_uri

__all__ = [
    "DEFAULT_URI",
    "SCHEMA_VERSION",
    "BenchmarkRecord",
    "Outcome",
    "Store",
    "StoreURI",
    "default_uri",
    "make_record",
    "mask_uri",
    "open_store",
    "register_store",
    "resolve_store_uri",
    "store_schemes",
]
