"""The performance database: versioned benchmark records in a store chosen by URI.

``open_store()`` opens ``$BENANZA_DB`` or ``sqlite:///benanza.db``; ``mongodb://`` URIs
open the fleet store when it is installed.
"""

from benanza.store.base import DEFAULT_URI, Store, default_uri, open_store, register_store, store_schemes
from benanza.store.records import SCHEMA_VERSION, BenchmarkRecord, Outcome, make_record

__all__ = [
    "DEFAULT_URI",
    "SCHEMA_VERSION",
    "BenchmarkRecord",
    "Outcome",
    "Store",
    "default_uri",
    "make_record",
    "open_store",
    "register_store",
    "store_schemes",
]
