"""Plans as stored data: what a system measured for one model, so analysis needs no model file.

A ``StoredPlan`` is the part of a ``bench.generate.ModelPlan`` that analysis reads, made
into a versioned document: the model's layers (name, op type, domain, layer key, shapes,
FLOPs), the edges between them, the nodes no benchmark covers (with their reasons), the
runtime's execution units with their keys, the DLBricks sequences per granularity G, the
model key, and where it was measured (system, stack, runtime, variant). The benchmark
pipeline stores one per (system, stack, runtime, variant, model, batch size, granularities)
with ``Store.put_plans``; ``benanza analyze`` and ``benanza report`` read them back with
``Store.plans`` and never load a model or build a runtime.

Documents of another ``PLAN_SCHEMA_VERSION`` are ignored by every store query, as records
of another ``records.SCHEMA_VERSION`` are.

This module imports no model loading and no runtime: it is read on machines that have
neither (a laptop analysing a GPU fleet's database).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from benanza.bench.spec import exported_key, runtime_defaults_key
from benanza.errors import StoreError
from benanza.model.graph import InputKind, Layer, LayerInput, ModelGraph, TensorSpec, Unsupported
from benanza.model.keys import stable_id

if TYPE_CHECKING:
    from benanza.bench.generate import ModelPlan

PLAN_SCHEMA_VERSION = 1  # bump when a field is added, removed or changes meaning

# One stored plan per these fields (the store's unique key).
PLAN_IDENTITY_FIELDS = ("system", "stack_id", "runtime", "variant", "model_key", "batch_size", "granularities")

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PlanLayer:
    """One layer of a stored plan: what the lower bound, the breakdown and the corpus read of it."""

    name: str
    op_type: str
    domain: str
    layer_key: str
    inputs: tuple[tuple[Shape, str], ...]  # (shape, dtype) of each present input
    outputs: tuple[tuple[Shape, str], ...]
    flops: int | None

    @classmethod
    def of(cls, layer: Layer) -> PlanLayer:
        return cls(
            name=layer.name,
            op_type=layer.op_type,
            domain=layer.domain,
            layer_key=layer.layer_key,
            inputs=tuple((i.tensor.shape, i.tensor.dtype) for i in layer.inputs if i.kind is not InputKind.ABSENT),
            outputs=tuple((o.shape, o.dtype) for o in layer.outputs),
            flops=layer.flops,
        )

    def to_doc(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "op_type": self.op_type,
            "domain": self.domain,
            "layer_key": self.layer_key,
            "inputs": [[list(s), d] for s, d in self.inputs],
            "outputs": [[list(s), d] for s, d in self.outputs],
            "flops": self.flops,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> PlanLayer:
        return cls(
            name=doc["name"],
            op_type=doc["op_type"],
            domain=doc.get("domain", ""),
            layer_key=doc["layer_key"],
            inputs=tuple((tuple(int(d) for d in s), str(t)) for s, t in doc.get("inputs", ())),
            outputs=tuple((tuple(int(d) for d in s), str(t)) for s, t in doc.get("outputs", ())),
            flops=None if doc.get("flops") is None else int(doc["flops"]),
        )

    def layer(self, index: int) -> Layer:
        """The layer as a ``ModelGraph`` holds it (attributes and values are not stored: keys carry them)."""
        return Layer(
            index=index,
            name=self.name,
            op_type=self.op_type,
            domain=self.domain,
            opset=0,
            inputs=tuple(
                LayerInput(TensorSpec(f"{self.name}:in{i}", shape, dtype), InputKind.ACTIVATION)
                for i, (shape, dtype) in enumerate(self.inputs)
            ),
            outputs=tuple(
                TensorSpec(f"{self.name}:out{i}", shape, dtype) for i, (shape, dtype) in enumerate(self.outputs)
            ),
            attributes=(),
            flops=self.flops,
            bytes_moved=0,
            layer_key=self.layer_key,
        )


@dataclass(frozen=True)
class StoredPlan:
    """One model's plan as measured on one system's stack by one runtime variant (see the module docstring).

    It answers what analysis asks of a ``ModelPlan`` (``graph``, ``units``, ``unit_keys``,
    ``sequence_keys``, ``model_key``, ``batch_size``, ``model``), so the analysis functions
    take either.
    """

    model: str  # display name (the file's stem)
    path: str  # the file it was planned from, on the machine that planned it
    model_key: str
    batch_size: int
    dtype: str  # the first input's element type
    shapes: Mapping[str, Shape]  # the bound graph inputs
    runtime: str
    variant: str  # canonical variant string, as records hold it
    layers: tuple[PlanLayer, ...]
    edges: tuple[tuple[int, int], ...]
    unsupported: tuple[Unsupported, ...]
    units: tuple[tuple[int, ...], ...]
    unit_keys: tuple[str, ...]
    sequences: Mapping[int, tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    sequence_keys: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # ``ModelPlan.warnings``
    call_overhead_key: str = ""  # ``bench.generate.call_overhead_network``; "" in plans stored before it
    values: Mapping[str, int] = field(default_factory=dict)  # inputs bound to a value (``model.steering``)
    fed: Mapping[str, str] = field(default_factory=dict)  # inputs given their values (``GivenInput.label``)
    exported: bool = False  # also measured end to end as its file is (``ModelPlan.exported``)
    system: str = ""  # set by the store: where it was measured
    stack_id: str = ""
    schema_version: int = PLAN_SCHEMA_VERSION

    @classmethod
    def of(
        cls,
        plan: ModelPlan,
        runtime: str,
        variant: str,
        *,
        system: str = "",
        stack_id: str = "",
        exported: bool = False,
    ) -> StoredPlan:
        """The stored form of a plan that ``runtime`` measures with ``variant`` (a canonical variant string);
        ``exported``: the runtime measures a model as exported too (``Runtime.runs_exported``)."""
        graph = plan.graph
        return cls(
            model=graph.model,
            path=str(plan.path),
            model_key=plan.model_key,
            batch_size=int(plan.batch_size),
            dtype=graph.inputs[0].dtype if graph.inputs else "float32",
            shapes={name: tuple(shape) for name, shape in plan.shapes.items()},
            runtime=runtime,
            variant=variant,
            layers=tuple(PlanLayer.of(layer) for layer in graph.layers),
            edges=tuple(graph.edges),
            unsupported=tuple(graph.unsupported),
            units=tuple(tuple(u) for u in plan.units),
            unit_keys=tuple(plan.unit_keys),
            sequences={int(g): tuple(tuple(s) for s in seqs) for g, seqs in plan.sequences.items()},
            sequence_keys={int(g): tuple(keys) for g, keys in plan.sequence_keys.items()},
            notes=tuple(plan.notes),
            warnings=tuple(plan.warnings),
            call_overhead_key=plan.call_overhead_key,
            values=dict(plan.values),
            fed=dict(plan.fed),
            exported=plan.exported and exported,
            system=system,
            stack_id=stack_id,
        )

    def placed(self, system: str, stack_id: str) -> StoredPlan:
        """This plan as measured on ``system``'s stack ``stack_id`` (sharing this one's ``graph``)."""
        if (system, stack_id) == (self.system, self.stack_id):
            return self
        other = replace(self, system=system, stack_id=stack_id)
        other.__dict__["graph"] = self.graph  # a cached_property's value: built once per content
        return other

    @property
    def granularities(self) -> tuple[int, ...]:
        return tuple(sorted(self.sequence_keys))

    def identity(self) -> tuple[str, str, str, str, str, int, str]:
        """The unique key of this plan in a store (``PLAN_IDENTITY_FIELDS`` in order)."""
        grans = ",".join(str(g) for g in self.granularities)
        return (self.system, self.stack_id, self.runtime, self.variant, self.model_key, self.batch_size, grans)

    @cached_property
    def plan_id(self) -> str:
        """A hash of the plan's content without where it ran: systems that measured the same plan share it."""
        return stable_id({k: v for k, v in self.to_doc().items() if k not in ("system", "stack_id")})

    @cached_property
    def graph(self) -> ModelGraph:
        """The model's layers and edges as a ``ModelGraph`` (what ``analysis`` reads of a model)."""
        return ModelGraph(
            model=self.model,
            path=self.path,
            opset={},
            inputs=tuple(TensorSpec(name, shape, self.dtype) for name, shape in self.shapes.items()),
            layers=tuple(layer.layer(i) for i, layer in enumerate(self.layers)),
            edges=self.edges,
            unsupported=self.unsupported,
            graph_key=self.model_key,
        )

    @property
    def keys(self) -> set[str]:
        """Every benchmark key the plan's figures read: layers, units, sequences and the model."""
        keys = {layer.layer_key for layer in self.layers} | set(self.unit_keys)
        keys |= {self.model_key, runtime_defaults_key(self.model_key)}
        if self.exported:  # measured where its runtime runs models as exported
            keys.add(exported_key(self.model_key))
        for seq in self.sequence_keys.values():
            keys.update(seq)
        if self.call_overhead_key:
            keys.add(self.call_overhead_key)
        return keys

    @property
    def not_benchmarked(self) -> tuple[dict[str, str], ...]:
        """Every node of the model that no benchmark covers, with the reason (as ``ModelPlan``'s)."""
        return tuple(
            {
                "model": self.path,
                "node": u.node,
                "op_type": f"{u.domain}::{u.op_type}" if u.domain else u.op_type,
                "reason": u.reason,
            }
            for u in self.unsupported
        )

    def with_sequences(self, other: StoredPlan) -> StoredPlan:
        """This plan with ``other``'s sequences for the granularities it lacks (same units required).

        Two runs of a model with different ``--granularity`` lists store two plans; analysis
        reads both as one.
        """
        if other.unit_keys != self.unit_keys:
            return self
        sequences = {**other.sequences, **self.sequences}
        keys = {**other.sequence_keys, **self.sequence_keys}
        return replace(self, sequences=dict(sorted(sequences.items())), sequence_keys=dict(sorted(keys.items())))

    def to_doc(self) -> dict[str, Any]:
        """A JSON-able document holding every field."""
        return {
            "schema_version": self.schema_version,
            "system": self.system,
            "stack_id": self.stack_id,
            "model": self.model,
            "path": self.path,
            "model_key": self.model_key,
            "batch_size": self.batch_size,
            "dtype": self.dtype,
            "shapes": {name: list(shape) for name, shape in self.shapes.items()},
            "runtime": self.runtime,
            "variant": self.variant,
            "layers": [layer.to_doc() for layer in self.layers],
            "edges": [list(e) for e in self.edges],
            "unsupported": [u.to_dict() for u in self.unsupported],
            "units": [list(u) for u in self.units],
            "unit_keys": list(self.unit_keys),
            "sequences": {str(g): [list(s) for s in seqs] for g, seqs in sorted(self.sequences.items())},
            "sequence_keys": {str(g): list(keys) for g, keys in sorted(self.sequence_keys.items())},
            "notes": list(self.notes),
            **({"warnings": list(self.warnings)} if self.warnings else {}),
            **({"call_overhead_key": self.call_overhead_key} if self.call_overhead_key else {}),
            **({"values": dict(self.values)} if self.values else {}),
            **({"fed": dict(self.fed)} if self.fed else {}),
            **({"exported": True} if self.exported else {}),
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> StoredPlan:
        """The plan of a document written by ``to_doc`` (unknown fields are ignored).

        Raises:
            StoreError: a required field is missing or a value is invalid.
        """
        try:
            return cls(
                schema_version=int(doc["schema_version"]),
                system=doc.get("system", ""),
                stack_id=doc.get("stack_id", ""),
                model=doc["model"],
                path=doc.get("path", ""),
                model_key=doc["model_key"],
                batch_size=int(doc["batch_size"]),
                dtype=doc.get("dtype", "float32"),
                shapes={name: tuple(int(d) for d in shape) for name, shape in doc.get("shapes", {}).items()},
                runtime=doc["runtime"],
                variant=doc["variant"],
                layers=tuple(PlanLayer.from_doc(layer) for layer in doc["layers"]),
                edges=tuple((int(a), int(b)) for a, b in doc.get("edges", ())),
                unsupported=tuple(
                    Unsupported(u["node"], u["op_type"], u.get("domain", ""), u["reason"])
                    for u in doc.get("unsupported", ())
                ),
                units=tuple(tuple(int(i) for i in u) for u in doc["units"]),
                unit_keys=tuple(doc["unit_keys"]),
                sequences={
                    int(g): tuple(tuple(int(i) for i in s) for s in seqs)
                    for g, seqs in doc.get("sequences", {}).items()
                },
                sequence_keys={int(g): tuple(keys) for g, keys in doc.get("sequence_keys", {}).items()},
                notes=tuple(doc.get("notes", ())),
                warnings=tuple(doc.get("warnings", ())),
                call_overhead_key=doc.get("call_overhead_key", ""),
                values={name: int(v) for name, v in doc.get("values", {}).items()},
                fed={name: str(v) for name, v in doc.get("fed", {}).items()},
                exported=bool(doc.get("exported", False)),
            )
        except KeyError as exc:
            raise StoreError(f"stored plan lacks field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise StoreError(f"stored plan is invalid: {exc}") from None


def stored_plans(
    plans: Iterable[ModelPlan],
    runtime: str,
    variant: str,
    *,
    system: str = "",
    stack_id: str = "",
    exported: bool = False,
) -> list[StoredPlan]:
    """``StoredPlan.of`` of each plan."""
    return [StoredPlan.of(p, runtime, variant, system=system, stack_id=stack_id, exported=exported) for p in plans]
