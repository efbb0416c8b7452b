"""Walks over raw ONNX graphs: what a node reads, topological order, a subgraph's captures.

The primitives every stage of the model layer shares (identity, control flow, extraction,
shape resolution, subgraph splitting); they depend on ``onnx`` alone, so that no two of
those stages import each other for them.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

import onnx
from onnx import AttributeProto

# ONNX ops that read only their input's shape: constant once that shape is known (folded, never data).
SHAPE_READERS = frozenset({"Shape", "Size"})

# ONNX ops whose outputs' length their data decides, with the input slots that are the data (not a
# setting such as NonMaxSuppression's max_output_boxes_per_class): the boxes NonMaxSuppression keeps,
# the non-zeros NonZero finds, Unique's values, what Compress's condition keeps. Such a length is
# taken from the model's own run on the inputs its benchmarks get (``resolve._Walk.lengths_from_a_run``): a
# detector ends in NonMaxSuppression, and without it nothing after it, nor the model's bounds, had a figure.
LENGTH_BY_DATA: dict[str, frozenset[int]] = {
    "NonMaxSuppression": frozenset({0, 1}),  # boxes, scores
    "NonZero": frozenset({0}),
    "Unique": frozenset({0}),
    "Compress": frozenset({1}),  # the condition
}

# ONNX ops whose work, not only their output's length, their data's values decide: NonMaxSuppression
# compares each box above its threshold with the boxes kept before it, so how many boxes pass, how many are
# kept and how they overlap are its cost. On synthetic boxes a YOLO11's NMS took 18 ms, twice the whole model
# on its own boxes. Such a layer is benchmarked on the values its data had in the model's run
# (``resolve._Walk.lengths_from_a_run``, ``extract``), as an If whose branch the data decides.
WORK_BY_DATA = frozenset({"NonMaxSuppression"})

# Generators without inputs that still produce new values each run: layers, not constants.
RANDOM_OPS = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


def subgraph_attributes(node: onnx.NodeProto) -> list[AttributeProto]:
    """The node's attributes that hold subgraphs (``GRAPH`` or ``GRAPHS``), in file order."""
    return [a for a in node.attribute if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS)]


def graphs_of(attr: AttributeProto) -> list[onnx.GraphProto]:
    return [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph of its nodes, all the way down."""
    yield graph
    for node in graph.node:
        for attr in subgraph_attributes(node):
            for sub in graphs_of(attr):
                yield from all_graphs(sub)


def subgraphs_hold(node: onnx.NodeProto, op_types: Iterable[str]) -> bool:
    """Whether a subgraph of ``node``, all the way down, holds a node of ONNX's own domain of ``op_types``."""
    wanted = frozenset(op_types)
    return any(
        n.op_type in wanted and domain_of(n) == ""
        for attr in subgraph_attributes(node)
        for top in graphs_of(attr)
        for graph in all_graphs(top)
        for n in graph.node
    )


def domain_of(node: onnx.NodeProto) -> str:
    """A node's domain, ``""`` for ONNX's own (also written ``ai.onnx``)."""
    return "" if node.domain in ("", "ai.onnx") else node.domain


def captured_names(node: onnx.NodeProto) -> list[str]:
    """Outer-scope tensors the node's subgraphs read, in order of first use (names a node input may repeat)."""
    out: list[str] = []
    for attr in subgraph_attributes(node):
        for sub in graphs_of(attr):
            out.extend(x for x in captured_reads(sub) if x not in out)
    return out


def node_reads(node: onnx.NodeProto) -> list[str]:
    """Tensors a node reads: its inputs, then outer-scope names its subgraphs capture."""
    reads = [x for x in node.input if x]
    for attr in node.attribute:
        for sub in (*([attr.g] if attr.type == AttributeProto.GRAPH else ()), *attr.graphs):
            reads.extend(x for x in captured_reads(sub) if x not in reads)
    return reads


def captured_reads(graph: onnx.GraphProto) -> list[str]:
    """Names a subgraph reads from enclosing scopes (ONNX lets them capture any outer tensor)."""
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    defined |= {i.values.name for i in graph.sparse_initializer}
    out: list[str] = []
    for node in graph.node:
        out.extend(x for x in node_reads(node) if x not in defined and x not in out)
        defined.update(o for o in node.output if o)
    out.extend(o.name for o in graph.output if o.name not in defined and o.name not in out)
    return out


def topological_nodes(nodes: Iterable[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """Nodes in topological order, keeping file order wherever it is valid (exports are not always sorted)."""
    nodes = list(nodes)
    producers = {out: i for i, n in enumerate(nodes) for out in n.output if out}
    if _in_order(nodes, producers, available):
        return nodes  # what the sort below returns for a sorted graph, without its bookkeeping
    edges = (
        (producers[x], i) for i, n in enumerate(nodes) for x in node_reads(n) if x not in available and x in producers
    )
    order = stable_topological_order(len(nodes), edges)
    if len(order) != len(nodes):  # a cycle: keep the remaining nodes in file order
        seen = set(order)
        order.extend(i for i in range(len(nodes)) if i not in seen)
    return [nodes[i] for i in order]


def sort_graphs(model: onnx.ModelProto) -> int:
    """Put the nodes of every graph of ``model`` in topological order, in place (``topological_nodes``); the
    number of graphs reordered.

    ONNX requires the order and its checker refuses a graph out of it, but ONNX Runtime sorts a graph
    itself and runs it: ``onnxruntime.transformers.float16.convert_float_to_float16(...,
    keep_io_types=True)`` appends the ``Cast`` of a graph input after the nodes that read it.
    """
    graphs = list(all_graphs(model.graph))
    reordered = 0
    for graph in reversed(graphs):  # a subgraph before the node that holds it is copied below
        available = {i.name for i in graph.input} | {t.name for t in graph.initializer}
        available |= {t.values.name for t in graph.sparse_initializer}
        nodes = list(graph.node)
        ordered = topological_nodes(nodes, available)
        if all(a is b for a, b in zip(ordered, nodes, strict=True)):
            continue
        copies = []
        for node in ordered:
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copies.append(copy)
        del graph.node[:]
        graph.node.extend(copies)
        reordered += 1
    return reordered


def stable_topological_order(count: int, edges: Iterable[tuple[int, int]]) -> list[int]:
    """Indices ``0..count-1`` with ``a`` before ``b`` for every edge ``(a, b)``, the lowest index first among the ready.

    Kahn's algorithm with a heap, so an order that is already topological comes back as it is.
    On a cycle, the indices behind it are missing from the result (the caller decides).
    """
    indegree = [0] * count
    after: list[set[int]] = [set() for _ in range(count)]
    for a, b in edges:
        if b not in after[a]:
            after[a].add(b)
            indegree[b] += 1
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in after[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(ready, j)
    return order


def _in_order(nodes: list[onnx.NodeProto], producers: dict[str, int], available: set[str]) -> bool:
    """Whether every node comes after the nodes that produce what it reads (file order is topological)."""
    for i, n in enumerate(nodes):
        for x in node_reads(n):
            if x not in available and producers.get(x, -1) >= i:
                return False
    return True
