"""Which layers the GPU runtime runs as one fused kernel: conv + bias + activation chains.

Benanza's fusion analysis compares a model's lower bound with these chains fused
(``cudnnConvolutionBiasActivationForward`` / a cuDNN graph of conv, bias and activation)
against every layer run alone. A chain starts at a Conv and takes, in order, at most one
BatchNormalization (folded into the weights and bias by inference frameworks), one Add of
a per-channel constant (a bias) and one activation, each the only reader of the layer
before it. ``params.fused_conv`` decides what may join; this module only walks the graph.
Pure.
"""

from __future__ import annotations

from benanza.model.graph import ModelGraph
from benanza.model.network import network_of
from benanza.runtimes.cuda.params import Unsupported, fused_conv

MAX_CHAIN = 4  # Conv, BatchNormalization, Add, activation


def fused_groups(graph: ModelGraph) -> list[list[int]]:
    """The execution units of ``graph`` on the GPU runtime: fused chains and single layers.

    Groups come back ordered by their last layer, as ``bench.generate`` expects.
    """
    successors = graph.successors()
    taken: set[int] = set()
    groups: list[list[int]] = []
    for layer in graph.layers:
        i = layer.index
        if i in taken:
            continue
        chain = [i]
        if layer.op_type == "Conv":
            while len(chain) < MAX_CHAIN:
                nxt = successors[chain[-1]]
                if len(nxt) != 1 or graph.predecessors(nxt[0]) != (chain[-1],):
                    break
                trial = [*chain, nxt[0]]
                if isinstance(fused_conv(network_of(graph, trial)[1]), Unsupported):
                    break
                chain = trial
        taken.update(chain)
        groups.append(chain)
    return sorted(groups, key=lambda g: g[-1])
