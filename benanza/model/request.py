"""What a user asks of a model's inputs: ``--shape``, ``--dim``, ``--value`` and ``--input`` read into one
``BindingRequest``.

Each flag is repeatable and reads ``NAME=...``; every malformed text is one line naming its flag
(``UsageError``), refused when the flag is parsed, before any model is opened. ``shapes.bind_shapes``
and ``steering`` apply the request to a model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from benanza.errors import UsageError
from benanza.model.given_inputs import GivenInput, parse_input_flags

V = TypeVar("V")


def named_flags(texts: list[str] | None, parse: Callable[[str], tuple[str, V]], flag: str) -> dict[str, V]:
    """``flag``'s values by name, each text read by ``parse``; a name given twice with two values is an
    error (which one was meant?)."""
    found: dict[str, V] = {}
    for text in texts or []:
        name, value = parse(text)
        if name in found and found[name] != value:
            raise UsageError(f"{flag} {name} is given twice: {_shown(found[name])} and {_shown(value)}")
        found[name] = value
    return found


def _shown(value: object) -> str:
    """A flag's value as it is written: a shape as ``1x3x224x224``."""
    return "x".join(map(str, value)) if isinstance(value, tuple) else str(value)


_DIM_RE = re.compile(r"\d+")
_SHAPE_EXAMPLE = "e.g. images=1x3x640x640"


def parse_shape_override(text: str) -> tuple[str, tuple[int, ...]]:
    """Parse ``NAME=1x3x640x640`` (``,`` also separates; ``NAME=`` is a scalar).

    Every dimension is a positive integer: most layers cannot run an empty one (a convolution over no
    rows), and a negative or fractional one is a typo; each is refused here, naming the dimension. An
    empty dimension a model is made for (a decoder's first step over an empty KV cache) is the file's own
    ``0`` or a named one's ``--dim NAME=0``.

    Raises:
        UsageError: the text is not ``NAME=DIMS`` or a dimension is not a positive integer.
    """
    name, sep, dims = text.strip().partition("=")
    if not sep or not name.strip():
        raise UsageError(f"bad --shape {text!r}: expected NAME=DIMS, {_SHAPE_EXAMPLE}")
    if not dims:
        return name, ()
    parsed = []
    for i, part in enumerate(re.split(r"[x,]", dims), 1):
        if not _DIM_RE.fullmatch(part.strip()) or int(part) < 1:
            raise UsageError(
                f"bad --shape {text!r}: dimension {i} is {part!r}; dimensions are positive integers, {_SHAPE_EXAMPLE}"
                + (" (an empty dimension the file names: --dim NAME=0)" if part.strip() == "0" else "")
            )
        parsed.append(int(part))
    return name, tuple(parsed)


def parse_shape_overrides(texts: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``--shape`` values by input name; an input given twice is an error (which one was meant?)."""
    return named_flags(texts, parse_shape_override, "--shape")


_DIM_EXAMPLE = "e.g. past_sequence_length=128"


def parse_dim_override(text: str) -> tuple[str, int]:
    """Parse ``NAME=N``: a symbolic dimension's name (an input's ``dim_param``) and its size.

    The size may be 0, unlike a ``--shape`` dimension: a symbolic dimension the exporter left free
    can be empty where the model is run so (a decoder's first step, its prompt, over an empty KV
    cache: ``--dim past_sequence_length=0``), which ONNX Runtime runs.

    Raises:
        UsageError: the text is not ``NAME=N`` or N is not a non-negative integer.
    """
    name, sep, size = text.strip().partition("=")
    if not sep or not name.strip():
        raise UsageError(f"bad --dim {text!r}: expected NAME=N, {_DIM_EXAMPLE}")
    if not _DIM_RE.fullmatch(size.strip()):
        raise UsageError(f"bad --dim {text!r}: the size is {size!r}; sizes are integers from 0, {_DIM_EXAMPLE}")
    return name.strip(), int(size)


def parse_dim_overrides(texts: list[str] | None) -> dict[str, int]:
    """``--dim`` values by dimension name; a name given twice is an error (which one was meant?)."""
    return named_flags(texts, parse_dim_override, "--dim")


_VALUE_EXAMPLE = "e.g. --value use_cache_branch=0"


def parse_value_override(text: str) -> tuple[str, int]:
    """Parse ``NAME=V``: an input's name and the value every element of it is fed (an integer, or
    ``true``/``false``).

    Raises:
        UsageError: the text is not ``NAME=V`` or V is not an integer or a boolean.
    """
    name, sep, value = text.strip().partition("=")
    word = value.strip().lower()
    if not sep or not name.strip():
        raise UsageError(f"bad --value {text!r}: expected NAME=V, {_VALUE_EXAMPLE}")
    if word in ("true", "false"):
        return name.strip(), int(word == "true")
    try:
        return name.strip(), int(word)
    except ValueError:
        raise UsageError(
            f"bad --value {text!r}: the value is {value!r}; values are integers or true/false, {_VALUE_EXAMPLE}"
        ) from None


def parse_value_overrides(texts: list[str] | None) -> dict[str, int]:
    """``--value`` values by input name; a name given twice is an error (which one was meant?)."""
    return named_flags(texts, parse_value_override, "--value")


@dataclass(frozen=True)
class BindingRequest:
    """What a model's inputs are asked to be bound to, beside the batch size: whole shapes by input
    (``--shape``), symbolic dimensions by name (``--dim``), inputs that choose an ``If``'s branch by
    value (``--value``: ``benanza.model.steering``) and inputs given their values from files (``--input``:
    ``benanza.model.given_inputs``).

    One value from the flags or a fleet config through ``process_model``, the plans and the model
    specs a runtime loads the model again from (``bench.spec.requested_binding``): a new way to bind
    a model is a field here, not a parameter of each of them.
    """

    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    dims: Mapping[str, int] = field(default_factory=dict)
    values: Mapping[str, int] = field(default_factory=dict)
    inputs: Mapping[str, GivenInput] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, given in self.inputs.items():
            if name in self.values:
                raise UsageError(
                    f"--value {name} and --input {name} ({given.path}) both give input '{name}' its values"
                )
            shape = self.shapes.get(name)
            if shape is not None and shape != given.array.shape:
                held = _shown(given.array.shape) or "a scalar"
                raise UsageError(f"--shape {name}={_shown(shape)} but --input {name} ({given.path}) holds {held}")

    @classmethod
    def parse(
        cls,
        shapes: list[str] | None = None,
        dims: list[str] | None = None,
        values: list[str] | None = None,
        inputs: list[str] | None = None,
    ) -> BindingRequest:
        """From the ``--shape``, ``--dim``, ``--value`` and ``--input`` texts.

        Raises:
            UsageError: a text is malformed, names an input or a dimension twice, gives an input both a value
                and a file or a shape its file does not have, or a file cannot be read (one line each).
        """
        return cls(
            parse_shape_overrides(shapes),
            parse_dim_overrides(dims),
            parse_value_overrides(values),
            parse_input_flags(inputs),
        )


NO_REQUEST = BindingRequest()
