"""Benchmark specifications: plain, serialisable descriptions of one measurement.

A ``BenchmarkSpec`` names *what* to measure (a layer, a runtime execution group, a DLBricks
sequence, or a whole model), at which batch size and dtype, on which runtime and variant
(runtime settings that change the measurement, such as threads or the graph optimisation
level). Its ``spec_id`` hashes exactly those fields; the payload (the network, or the model
file for end-to-end runs) is carried along but is determined by the key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from benanza.model.given_inputs import given_from_docs
from benanza.model.keys import stable_id
from benanza.model.network import Network
from benanza.model.request import BindingRequest

SPEC_VERSION = 1

# ``BenchmarkSpec.model["session"]`` of a model measured at its runtime's defaults (``Runtime.runtime_defaults``)
RUNTIME_DEFAULTS = "runtime defaults"


# ``BenchmarkSpec.model["session"]`` of a model measured as its file is: its free dimensions left free
EXPORTED = "as exported"


def runtime_defaults_key(model_key: str) -> str:
    """The benchmark key of the model of ``model_key`` end to end at its runtime's defaults."""
    return stable_id({"model": model_key, "session": RUNTIME_DEFAULTS})


def exported_key(model_key: str) -> str:
    """The benchmark key of the model of ``model_key`` end to end as exported (``BenchmarkSpec.as_exported``)."""
    return stable_id({"model": model_key, "session": EXPORTED})


def whole_model_keys(model_key: str) -> set[str]:
    """The benchmark keys of the model of ``model_key`` end to end: at the variant's settings, at its runtime's
    defaults, as exported."""
    return {model_key, runtime_defaults_key(model_key), exported_key(model_key)}


def spec_id_of(key: str, batch_size: int, dtype: str, runtime: str, variant: str) -> str:
    """``BenchmarkSpec.spec_id`` from its fields, without building a spec.

    The same 16 hex digits as ``model.keys.stable_id`` over the identity without ``kind``
    (canonical JSON, sorted keys), written out directly: planners hash millions of these.
    """
    payload = (
        f'{{"batch_size":{int(batch_size)},"dtype":{json.dumps(dtype)},"key":{json.dumps(key)},'
        f'"runtime":{json.dumps(runtime)},"v":{SPEC_VERSION},"variant":{json.dumps(variant)}}}'
    )
    return hashlib.sha256(payload.encode("ascii")).hexdigest()[:16]


class SpecKind(StrEnum):
    LAYER = "layer"  # one layer as its own model: the unfused kernel
    GROUP = "group"  # the layers a runtime executes as one kernel (e.g. Conv+BN+Relu)
    SEQUENCE = "sequence"  # a DLBricks sequence of at most G execution groups
    MODEL = "model"  # the whole model end to end

    @property
    def kernel_timed(self) -> bool:
        """Whether a benchmark of this kind takes kernel times (``HarnessSettings.kernel_runs`` profiled runs).

        A layer's and a fused group's are the lower bounds' units, the model's own is its end to end
        less the framework; a DLBricks sequence is composed from its call latency alone, and nothing
        reads its kernel time, which cost a second, profiling session and a profiled run beside
        every sample (18% of the zoo's benchmarks are sequences).
        """
        return self is not SpecKind.SEQUENCE


def canonical_variant(variant: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((variant or {}).items()))


def variant_id(variant: Mapping[str, Any] | tuple[tuple[str, Any], ...]) -> str:
    """A variant as a short canonical string, e.g. ``opt=extended,threads=1``."""
    items = variant if isinstance(variant, tuple) else canonical_variant(variant)
    return ",".join(f"{k}={v}" for k, v in items)


def parse_variant(variant: str | None) -> dict[str, str]:
    """A canonical variant string (``ep=cpu,opt=extended,threads=1``) as a mapping: ``variant_id``'s inverse."""
    return dict(item.split("=", 1) for item in (variant or "").split(",") if "=" in item)


@dataclass(frozen=True, slots=True)
class BenchmarkSpec:
    kind: SpecKind
    key: str  # layer key, group/sequence network key, or model key
    batch_size: int
    dtype: str
    runtime: str
    variant: tuple[tuple[str, Any], ...] = ()
    label: str = ""  # for people: "Conv 1x64x56x56", a model name
    network: Network | None = field(default=None, compare=False, hash=False)
    model: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)  # path + shapes for MODEL

    @property
    def at_runtime_defaults(self) -> bool:
        """Whether it is a model end to end at its runtime's defaults (``Runtime.runtime_defaults``)."""
        return self.kind is SpecKind.MODEL and (self.model or {}).get("session") == RUNTIME_DEFAULTS

    @property
    def as_exported(self) -> bool:
        """Whether it is a model end to end as its file is: the dimensions the file leaves free left free,
        fed the bound shapes, so that the export's shape computations run on every call (``e2e_ms`` is of
        the model bound, those computations folded)."""
        return self.kind is SpecKind.MODEL and (self.model or {}).get("session") == EXPORTED

    @property
    def spec_id(self) -> str:
        """Hash of the identity without ``kind``: the key alone decides what is measured."""
        return spec_id_of(self.key, self.batch_size, self.dtype, self.runtime, self.variant_id)

    @property
    def variant_id(self) -> str:
        return variant_id(self.variant)

    def identity(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "key": self.key,
            "batch_size": self.batch_size,
            "dtype": self.dtype,
            "runtime": self.runtime,
            "variant": self.variant_id,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.identity(),
            "variant": dict(self.variant),
            "spec_id": self.spec_id,
            "label": self.label,
            "network": self.network.to_doc() if self.network is not None else None,
            "model": dict(self.model) if self.model is not None else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchmarkSpec:
        return cls(
            kind=SpecKind(data["kind"]),
            key=data["key"],
            batch_size=int(data["batch_size"]),
            dtype=data["dtype"],
            runtime=data["runtime"],
            variant=canonical_variant(data.get("variant")),
            label=data.get("label", ""),
            network=_network(data.get("network")),
            model=data.get("model"),
        )


def _network(doc: Mapping[str, Any] | None) -> Network | None:
    """A spec's network from its stored document (``Network.to_doc``)."""
    return Network.from_doc(doc) if doc is not None else None


def requested_binding(batch: int | None, request: BindingRequest) -> dict[str, Any]:
    """The binding arguments a model spec carries (and its id hashes): ``dims``, ``values`` and ``inputs``
    (each given input's file and digest: ``GivenInput.to_doc``) only when given, so that the specs of models
    bound without them keep the ids their stored results have."""
    requested: dict[str, Any] = {"batch": batch, "shapes": {k: list(v) for k, v in request.shapes.items()}}
    if request.dims:
        requested["dims"] = dict(sorted(request.dims.items()))
    if request.values:
        requested["values"] = dict(sorted(request.values.items()))
    if request.inputs:
        requested["inputs"] = {name: given.to_doc() for name, given in sorted(request.inputs.items())}
    return requested


def model_binding(model: Mapping[str, Any]) -> tuple[int | None, BindingRequest]:
    """``process_model``'s batch and binding request from a model spec's ``model`` (``requested_binding``'s).

    Raises:
        UsageError: a given input's file cannot be read again, or its values changed since the plan.
    """
    request = BindingRequest(
        shapes={k: tuple(v) for k, v in (model.get("shapes") or {}).items()},
        dims=dict(model.get("dims") or {}),
        values=dict(model.get("values") or {}),
        inputs=given_from_docs(model.get("inputs")),
    )
    return model.get("batch"), request
