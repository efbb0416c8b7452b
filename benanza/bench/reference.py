"""The host's reference call: how a slow period of the host that covers a whole group is found.

Every interleaved group checks itself (``harness.disturbance``): a step in its speed between
thirds of its rounds, too little CPU, other processes competing with its threads. A slow
period of the host that covers the whole group passes all three: its rounds are evenly slow
and nothing else runs, yet its parts and its whole slow by different amounts, so the model's
composition is off. On a 2-core VM one model's units ran 25% slower and its end to end 30-43%
slower, with tight samples, no other process and no steal time (a neighbouring VM taking the
shared cache or memory bandwidth, or a clock drop), and nothing was flagged.

What a group cannot see alone, the run sees across groups. Every interleaved group also
samples one fixed call, the *reference call*: a 3x3 convolution of 64 channels at 28x28, float32
(58 MFLOP, well under a millisecond), the kind of work models' layers do, on the runtime's threads.
Its figure in a group is the median of its samples with the median's 95% interval (a rare stall
is not the host's speed). A ``HostReference`` keeps the figures of the groups measured so far by
one measurer (one runtime, variant and thread count) and compares each new one with the run's:
the figure of the median group. A group whose reference is slower than the run's by more than
``reference_step``, with the two intervals apart, was measured in a slow period: its rounds are
sampled again with the sessions it has (``disturbance_retries`` times in all with the group's own
checks, while the run's re-measure budget allows: ``benanza.bench.remeasure``, ``harness.Judge``),
and one still slow keeps its records marked disturbed, with the reason, so that no report shows
them as fact. Groups measured before the run's figure
settled (the first ones, or while the run's figure was itself taken in a slow period) are judged
again against the final figure at the end (``slow_groups``).

Why a convolution and not the cheapest call. A ``Relu`` of one float (the call path alone) was
tried first: on a 2-core VM its latency switched between about 12 and 25 us over tens of seconds,
on its own. ``benchmarks/reference_tracking.py`` times a model and each candidate in alternation:
over 45 s, while the models' latency swung 1.8-2.5x, this convolution's correlation with the model
was 0.76 (SqueezeNet) and 0.88 (ResNet-50), the ``Relu``'s 0.33 and 0.08, a 32-channel 14x14
convolution's 0.62 and 0.60, a 128x128 ``MatMul``'s 0.52 and 0.63.

The reference is judged against the run, not against stored history: a system's history
spans upgrades, other neighbours and other load; within a run, the same process on the same
host measured the other groups minutes apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from benanza.bench.spec import BenchmarkSpec, SpecKind
from benanza.bench.stats import Interval, statistic_interval
from benanza.model.network import InputRef, Network, NetworkNode, NetworkOutput, NetworkTensor

REFERENCE_KEY = "host-reference:Conv 3x3 float32 1x64x28x28"  # never a layer key (those are hashes)
REFERENCE_OPSET = 11  # Conv's current definition; every runtime benanza has supports it
CHANNELS, SIDE = 64, 28


def conv3x3_network(channels: int, side: int, key: str, opset: int = REFERENCE_OPSET) -> Network:
    """A padded 3x3 convolution of ``channels`` channels in and out at ``side`` x ``side``, float32."""
    plane = NetworkTensor((1, channels, side, side), "float32")
    attributes = (
        ("auto_pad", "NOTSET"),
        ("dilations", (1, 1)),
        ("group", 1),
        ("kernel_shape", (3, 3)),
        ("pads", (1, 1, 1, 1)),
        ("strides", (1, 1)),
    )
    weight = InputRef.weight((channels, channels, 3, 3), "float32")
    node = NetworkNode("Conv", "", opset, attributes, (InputRef.of_input(0), weight), (plane,), layer_key=key)
    return Network((plane,), (node,), (NetworkOutput(0, 0),), 1)


def reference_network() -> Network:
    """The reference call's network: a 3x3 convolution, 64 channels in and out, 28x28, padded."""
    return conv3x3_network(CHANNELS, SIDE, REFERENCE_KEY)


def reference_spec(runtime: str, variant: tuple[tuple[str, object], ...]) -> BenchmarkSpec:
    """The reference call as a benchmark of ``runtime`` (its variant as the group's specs carry it)."""
    return BenchmarkSpec(
        kind=SpecKind.LAYER,
        key=REFERENCE_KEY,
        batch_size=1,
        dtype="float32",
        runtime=runtime,
        variant=variant,
        label="host reference: Conv 1x64x28x28",
        network=reference_network(),
    )


def reference_figure(samples: Sequence[float]) -> Interval | None:
    """A group's reference figure: the median of the reference call's samples and its interval."""
    return statistic_interval(samples, "median") if samples else None


@dataclass
class HostReference:
    """The reference figures of the groups one measurer took, and the verdict on each.

    ``step``: the relative slow-down of a group's reference over the run's, beyond the
    noise of both, that marks the group as measured in a slow period of the host.
    """

    step: float
    figures: list[Interval] = field(default_factory=list)  # one per group, in the order measured

    def run_figure(self, without: int | None = None) -> Interval | None:
        """The run's figure: that of the median group (the lower median), leaving out group ``without``."""
        kept = [f for i, f in enumerate(self.figures) if i != without]
        if not kept:
            return None
        ordered = sorted(kept, key=lambda f: f.value)
        return ordered[(len(ordered) - 1) // 2]

    def verdict(self, figure: Interval | None, without: int | None = None) -> str | None:
        """Why a group with reference ``figure`` was measured in a slow period of the host, or None."""
        run = self.run_figure(without)
        if figure is None or run is None or run.value <= 0:
            return None
        slower = figure.value / run.value - 1
        if slower > self.step and figure.above(run):
            return (
                f"the host ran slower while this group was measured: its reference call (a 64-channel convolution) "
                f"took {figure.value * 1e6:.1f} us, {slower:+.0%} over the run's {run.value * 1e6:.1f} us, "
                "beyond the noise of both"
            )
        return None

    def add(self, figure: Interval | None) -> int | None:
        """Keep a group's figure; its index (None when the group has none)."""
        if figure is None:
            return None
        self.figures.append(figure)
        return len(self.figures) - 1

    def replace(self, index: int, figure: Interval | None) -> None:
        """A group measured again: its new figure."""
        if figure is not None:
            self.figures[index] = figure

    def slow_groups(self) -> list[int]:
        """The groups whose figure is slow against the run's figure over all the others."""
        return [i for i, f in enumerate(self.figures) if self.verdict(f, without=i) is not None]
