"""Inputs that choose a branch: an ``If`` whose condition the model's inputs decide.

Optimum's merged decoders (``decoder_model_merged.onnx`` of T5, Whisper, BART, Marian, and the
decoders transformers.js ships) hold two whole decoders, without and with a KV cache, as the two
branches of one ``If`` on a boolean input (``use_cache_branch``). Kept as one opaque layer, the
``If`` is the whole model and nothing in it is benchmarked alone. Which branch runs is the input's
value, not a shape; so an input that *steers* (``steering_inputs``: an ``If``'s condition is
computed from it and constants alone, through any ops) is bound to a value, ``--value NAME=V`` or
else the value every run of the model is fed (``run_values.input_fills``: an ``If``'s boolean
condition is fed True, Optimum's cache branch), and made a constant of the prepared model. The
constant folding (``shapes.fold_constants``, onnxscript's) then replaces the ``If`` by the branch
it takes: that branch's nodes are the model's layers. The model's end to end runs it as shipped,
the ``If`` included, its input given that value (``default_inputs``): what the ``If`` costs a
run (ONNX Runtime runs a branch as a subgraph, with nothing fused across its edge) is part of
the gap between the bound and the end to end. ``ModelPlan.values`` records the bound values, and
a model stored at two of them is named by them (``analysis.stored.binding_names``).

A condition computed from float data (``ReduceMax(logits) > 0``) is the model's work: its ``If``
stays one layer, as before.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import onnx

from benanza.errors import ModelError
from benanza.model.given_inputs import GivenInput
from benanza.model.keys import VALUE_MAX_ELEMENTS
from benanza.model.run_values import INTEGER_TYPES, input_fills
from benanza.model.walks import SHAPE_READERS, all_graphs


def steering_inputs(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> list[str]:
    """The runtime inputs of ``model`` (bound to ``shapes``) that decide an ``If``'s condition, in input order.

    An ``If`` (in the graph or any subgraph) steers when its condition is a tensor of the main graph
    computed from constants, shapes (``Shape``, ``Size``) and small integer or boolean inputs only (at most
    ``VALUE_MAX_ELEMENTS`` elements each); those inputs are returned. A condition that reads any other
    input (float data, a large integer tensor) leaves its inputs out.
    """
    inits = {t.name for t in model.graph.initializer}
    inputs = {vi.name: vi for vi in model.graph.input if vi.name not in inits}
    producers = {o: node for node in model.graph.node for o in node.output if o}
    conditions = {
        node.input[0]
        for graph in all_graphs(model.graph)
        for node in graph.node
        if node.op_type == "If" and node.domain in ("", "ai.onnx") and node.input and node.input[0]
    }
    steering: set[str] = set()
    for condition in conditions:
        found = _inputs_deciding(condition, producers, inputs, inits)
        if found is not None and all(_small_integer(inputs[name], shapes.get(name)) for name in found):
            steering |= found
    return [name for name in inputs if name in steering]


def _inputs_deciding(
    tensor: str, producers: Mapping[str, onnx.NodeProto], inputs: Mapping[str, Any], inits: set[str]
) -> set[str] | None:
    """The runtime inputs ``tensor`` is computed from (shapes of tensors excepted), or None where it is not
    a tensor of the main graph (a subgraph's own)."""
    found: set[str] = set()
    seen: set[str] = set()
    todo = [tensor]
    while todo:
        name = todo.pop()
        if name in seen or not name:
            continue
        seen.add(name)
        if name in inputs:
            found.add(name)
        elif name in producers:
            node = producers[name]
            if node.op_type not in SHAPE_READERS or node.domain not in ("", "ai.onnx"):
                todo.extend(node.input)
        elif name not in inits:
            return None
    return found


def _small_integer(vi: onnx.ValueInfoProto, shape: tuple[int, ...] | None) -> bool:
    tensor = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if tensor is None or tensor.elem_type not in INTEGER_TYPES or shape is None:
        return False
    return math.prod(shape) <= VALUE_MAX_ELEMENTS


def steered_values(
    model: onnx.ModelProto,
    path: object,
    shapes: Mapping[str, tuple[int, ...]],
    values: Mapping[str, int] | None = None,
    given: Mapping[str, GivenInput] | None = None,
) -> dict[str, int]:
    """The value each steering input of ``model`` is bound to: ``values``' (``--value``), else its given
    file's (``--input``: one value throughout, as a branch is taken for the whole run), else the one it is
    fed (``run_values.input_fills``). A name in ``values`` that the model has no input of binds nothing
    there, as ``--dim`` (one run binds models of several kinds: a merged decoder beside its encoder); the
    plan's note says which value each steering input got.

    Raises:
        ModelError: ``values`` names an input of the model that steers no ``If`` (its value is data:
            every benchmark is fed as ``run_values`` says), or a steering input's given file holds several values.
    """
    steering = steering_inputs(model, shapes)
    inits = {t.name for t in model.graph.initializer}
    names = {vi.name for vi in model.graph.input if vi.name not in inits}
    values = {name: value for name, value in (values or {}).items() if name in names}
    data = sorted(set(values) - set(steering))
    if data:
        raise ModelError(
            path,
            f"--value binds an input that chooses an If's branch; {', '.join(data)} "
            f"{'does' if len(data) == 1 else 'do'} not"
            + (f" (here: {', '.join(steering)})" if steering else " (this model has none)"),
        )
    if not steering:
        return {}
    fills = input_fills(model)  # every integer and boolean input, as every steering input is (``_small_integer``)
    for name in steering:
        if name in (given or {}) and name not in values:
            array = given[name].array
            if not array.size or (array != array.flat[0]).any():
                raise ModelError(
                    path,
                    f"--input {name} ({given[name].path}) chooses an If's branch and holds "
                    f"{'several values' if array.size else 'no value'}; "
                    "give it one value throughout (the branch is taken for the whole run)",
                )
            values[name] = int(array.flat[0])
    return {name: values[name] if name in values else fills[name] for name in steering}


def branch_notes(bound: Mapping[str, int], given: Collection[str] = ()) -> list[str]:
    """One line per input bound to a value (``bound``: ``Binding.values``), saying where the value came from
    (``given``: the inputs ``--value`` or ``--input`` gave) and what it means for the model's layers and its
    end to end."""
    taken = "layers from the branch taken, end to end with the If"
    return [
        f"{name}={value} ({'as given' if name in given else f'as fed; --value {name}=V for the other branch'})"
        f" chooses an If's branch: {taken}"
        for name, value in bound.items()
    ]


def constant_inputs(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]], values: Mapping[str, int]) -> None:
    """Make each input of ``values`` a constant of ``model`` (in place): an initializer of its bound shape
    filled with its value, no longer a graph input."""
    default_inputs(model, shapes, values)
    kept = [vi for vi in model.graph.input if vi.name not in values]
    del model.graph.input[:]
    model.graph.input.extend(kept)


def default_inputs(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]], values: Mapping[str, int]) -> None:
    """Give each input of ``values`` an initializer of its bound shape filled with its value (in place), the
    input kept: a default it may be fed over, which ONNX Runtime does not fold, and which synthetic feeds
    leave to it (``runtimes.onnxruntime.feeds_for``)."""
    for name, array in value_arrays(model, shapes, values).items():
        model.graph.initializer.append(onnx.numpy_helper.from_array(array, name))


def value_arrays(
    model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]], values: Mapping[str, int]
) -> dict[str, np.ndarray]:
    """Each input of ``values`` as an array of its bound shape and type filled with its value."""
    types = {vi.name: vi.type.tensor_type.elem_type for vi in model.graph.input}
    return {
        name: np.full(shapes[name], value, onnx.helper.tensor_dtype_to_np_dtype(types[name]))
        for name, value in values.items()
    }
