"""Operator schemas, whatever registry holds them: ONNX's own, then ONNX Runtime's.

``onnx.defs`` describes the ops of ONNX's domains. ONNX Runtime runs more: its contrib ops
(``com.microsoft::QLinearAdd``, ``QGemm``, ``FusedMatMul``, ``SkipLayerNormalization``...)
that its quantization tools and transformer optimizers write into models. It registers a
schema for each (``onnxruntime.capi.onnxruntime_pybind11_state.get_all_operator_schema``),
so an op is described by ONNX's registry when ONNX knows it and by ONNX Runtime's otherwise.
Either way the rest of benanza reads one ``OpSchema``: its formal inputs and outputs, their
type constraints, whether ONNX marks an input differentiable (ONNX Runtime's schemas do not
say), and its attributes with their defaults. ONNX's own schema object rides along where
there is one, for ONNX's per-node shape inference.

A registry's schema for an op at a model's opset is the one with the greatest
``since_version`` not above it, as ``onnx.defs.get_schema`` picks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import onnx
from onnx import AttributeProto


class Differentiation(StrEnum):
    """What a schema says about an input's gradient (ONNX marks some ops; ONNX Runtime none)."""

    DIFFERENTIABLE = "differentiable"
    NON_DIFFERENTIABLE = "non_differentiable"
    UNMARKED = "unmarked"


class Arity(StrEnum):
    SINGLE = "single"
    OPTIONAL = "optional"
    VARIADIC = "variadic"


@dataclass(frozen=True, slots=True)
class FormalParameter:
    """One formal input or output: its name, its type (a type parameter or a literal ``tensor(float)``)."""

    name: str
    type_str: str
    arity: Arity
    differentiation: Differentiation = Differentiation.UNMARKED


@dataclass(frozen=True, slots=True)
class OpSchema:
    """An op's schema at one opset, as benanza reads it from either registry.

    Attributes:
        source: the registry it came from, ``onnx`` or ``onnxruntime``.
        type_constraints: type parameter -> the tensor types it allows.
        defaults: attribute name -> its default value (attributes without one are left out).
        onnx_schema: ONNX's own schema object, for ``onnx.shape_inference.infer_node_outputs``;
            None for a schema only ONNX Runtime registers.
    """

    op_type: str
    domain: str
    since_version: int
    source: str
    inputs: tuple[FormalParameter, ...]
    outputs: tuple[FormalParameter, ...]
    type_constraints: Mapping[str, frozenset[str]]
    attributes: frozenset[str]
    defaults: Mapping[str, AttributeProto] = field(default_factory=lambda: MappingProxyType({}))
    onnx_schema: onnx.defs.OpSchema | None = None

    def allowed_types(self, param: FormalParameter) -> frozenset[str]:
        """The tensor types a formal parameter accepts (its literal type when it names no type parameter)."""
        return self.type_constraints.get(param.type_str, frozenset({param.type_str}))


SchemaSource = Callable[[str, int, str], OpSchema | None]
_SOURCES: dict[str, SchemaSource] = {}


def register_source(name: str, source: SchemaSource) -> None:
    """Add a registry of schemas, asked after those registered before it."""
    _SOURCES[name] = source


def schema_sources() -> tuple[str, ...]:
    return tuple(_SOURCES)


@functools.lru_cache(maxsize=4096)
def op_schema(op_type: str, opset: int, domain: str) -> OpSchema | None:
    """The schema of ``domain::op_type`` at ``opset`` from the first registry that has one, else None."""
    for source in _SOURCES.values():
        schema = source(op_type, opset, domain)
        if schema is not None:
            return schema
    return None


# ---------------------------------------------------------------------- ONNX's registry

_ONNX_DIFFERENTIATION = {
    onnx.defs.OpSchema.DifferentiationCategory.Differentiable: Differentiation.DIFFERENTIABLE,
    onnx.defs.OpSchema.DifferentiationCategory.NonDifferentiable: Differentiation.NON_DIFFERENTIABLE,
}
_ONNX_ARITY = {
    onnx.defs.OpSchema.FormalParameterOption.Single: Arity.SINGLE,
    onnx.defs.OpSchema.FormalParameterOption.Optional: Arity.OPTIONAL,
    onnx.defs.OpSchema.FormalParameterOption.Variadic: Arity.VARIADIC,
}


def _onnx_source(op_type: str, opset: int, domain: str) -> OpSchema | None:
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None

    def param(p: onnx.defs.OpSchema.FormalParameter) -> FormalParameter:
        category = _ONNX_DIFFERENTIATION.get(p.differentiation_category, Differentiation.UNMARKED)
        return FormalParameter(p.name, p.type_str, _ONNX_ARITY[p.option], category)

    return OpSchema(
        op_type=op_type,
        domain=domain,
        since_version=schema.since_version,
        source="onnx",
        inputs=tuple(param(p) for p in schema.inputs),
        outputs=tuple(param(p) for p in schema.outputs),
        type_constraints=MappingProxyType(
            {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints}
        ),
        attributes=frozenset(schema.attributes),
        defaults=MappingProxyType(
            {
                name: attr.default_value
                for name, attr in schema.attributes.items()
                if attr.default_value.type != AttributeProto.UNDEFINED
            }
        ),
        onnx_schema=schema,
    )


# ---------------------------------------------------------------------- ONNX Runtime's registry


@functools.cache
def _onnxruntime_registry() -> dict[tuple[str, str], tuple[Any, ...]]:
    """(domain, op) -> ONNX Runtime's schemas of it, oldest first; empty without ONNX Runtime."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_state
    except ImportError:
        return {}
    registry: dict[tuple[str, str], list[Any]] = {}
    for schema in ort_state.get_all_operator_schema():
        domain = "" if schema.domain in ("", "ai.onnx") else schema.domain
        registry.setdefault((domain, schema.name), []).append(schema)
    return {k: tuple(sorted(v, key=lambda s: s.since_version)) for k, v in registry.items()}


def _onnxruntime_source(op_type: str, opset: int, domain: str) -> OpSchema | None:
    versions = [s for s in _onnxruntime_registry().get((domain, op_type), ()) if s.since_version <= opset]
    if not versions:
        return None
    schema = versions[-1]
    if schema.deprecated:
        return None

    def param(p: Any) -> FormalParameter:
        return FormalParameter(p.name, p.typeStr, Arity(p.option.name.lower()))

    defaults = {}
    for name, attr in schema.attributes.items():
        # ``_default_value`` is the serialized AttributeProto of the default; empty bytes when there is none
        if attr._default_value:
            default = AttributeProto.FromString(attr._default_value)
            if default.type != AttributeProto.UNDEFINED:
                defaults[name] = default
    return OpSchema(
        op_type=op_type,
        domain=domain,
        since_version=schema.since_version,
        source="onnxruntime",
        inputs=tuple(param(p) for p in schema.inputs),
        outputs=tuple(param(p) for p in schema.outputs),
        type_constraints=MappingProxyType(
            {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints}
        ),
        attributes=frozenset(schema.attributes),
        defaults=MappingProxyType(defaults),
    )


register_source("onnx", _onnx_source)
register_source("onnxruntime", _onnxruntime_source)
