"""A reader of the C declarations in cuDNN's headers: enums, #defines, structs and prototypes.

Enough C for NVIDIA's cuDNN 9 headers (``cudnn_graph_v9.h``, ``cudnn_ops_v9.h``,
``cudnn_cnn_v9.h``), not a C parser: comments and the deprecation and calling-convention
macros are dropped, then declarations are matched by shape. Types are reduced to a
canonical text that a ctypes type can be reduced to as well (``canonical_ctypes``), so a
binding's signature can be compared with the header's: enums are ``int``, opaque handle and
descriptor typedefs ``void*``, arrays pointers, named structs ``struct``.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_DROP = re.compile(r"\b(CUDNN_DEPRECATED_ENUM|CUDNN_DEPRECATED|CUDNNWINAPI|extern)\b")
_COMMENTS = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_ENUM = re.compile(r"typedef\s+enum\s*\w*\s*\{(?P<body>[^}]*)\}\s*(?P<name>\w+)\s*;")
_STRUCT = re.compile(r"typedef\s+struct\s*\w*\s*\{(?P<body>[^}]*)\}\s*(?P<name>\w+)\s*;")
_OPAQUE = re.compile(r"typedef\s+struct\s+\w+\s*\*\s*(?P<name>\w+)\s*;")
_DEFINE = re.compile(r"^\s*#\s*define\s+(?P<name>CUDNN_\w+)\s+(?P<value>[^\n]+?)\s*$", re.M)
_PROTO = re.compile(r"(?P<ret>[\w\s\*]+?)\s*\b(?P<name>cudnn\w+)\s*\((?P<args>[^;{}()]*)\)\s*;")
_SCALARS = {
    "int": "int",
    "unsigned": "uint",
    "unsigned int": "uint",
    "size_t": "size_t",
    "double": "double",
    "float": "float",
    "char": "char",
    "void": "void",
    "int64_t": "int64",
}


@dataclass
class Headers:
    enums: dict[str, dict[str, int]] = field(default_factory=dict)  # typedef name -> member -> value
    structs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # name -> [(field, type)]
    opaque: set[str] = field(default_factory=lambda: {"cudaStream_t"})  # typedefs of struct pointers
    defines: dict[str, str] = field(default_factory=dict)
    prototypes: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # name -> (ret, [arg types])

    def constant(self, name: str) -> int:
        for members in self.enums.values():
            if name in members:
                return members[name]
        raise KeyError(name)

    def canonical(self, decl: str, named: bool = True) -> str:
        """``const cudnnTensorDescriptor_t xDesc`` -> ``void*``; ``const int padA[]`` -> ``int*``."""
        decl = re.sub(r"\bconst\b", " ", decl)
        depth = decl.count("*") + decl.count("[")
        decl = re.sub(r"\[[^\]]*\]", " ", decl).replace("*", " ")
        words = decl.split()
        if named and len(words) > 1:
            words = words[:-1]  # the parameter's name
        base = " ".join(words)
        if base in self.opaque:
            return "void" + "*" * (depth + 1)
        if base in self.enums:
            return "int" + "*" * depth
        if base in self.structs:
            return "struct" + "*" * depth
        if base not in _SCALARS:
            raise ValueError(f"unknown C type {base!r} in {decl!r}")
        return _SCALARS[base] + "*" * depth


def read_headers(paths: list[Path]) -> Headers:
    text = _DROP.sub(" ", _COMMENTS.sub(" ", "\n".join(p.read_text(errors="replace") for p in paths)))
    h = Headers()
    for m in _OPAQUE.finditer(text):
        h.opaque.add(m["name"])
    for m in _DEFINE.finditer(text):
        h.defines[m["name"]] = m["value"]
    for m in _ENUM.finditer(text):
        h.enums[m["name"]] = {}
    for m in _ENUM.finditer(text):  # values may name members of other enums: all names known first
        members = h.enums[m["name"]]
        nxt = 0
        for item in (part.strip() for part in m["body"].split(",")):
            if not item:
                continue
            name, _, expr = (s.strip() for s in item.partition("="))
            value = _evaluate(expr, h, members) if expr else nxt
            members[name] = value
            nxt = value + 1
    for m in _STRUCT.finditer(text):
        h.structs[m["name"]] = []
    for m in _STRUCT.finditer(text):
        fields_ = []
        for decl in (d.strip() for d in m["body"].split(";")):
            if decl:
                count = re.search(r"\[(\d+)\]", decl)
                name = re.sub(r"\[.*\]", "", decl).split()[-1]
                try:
                    base = h.canonical(re.sub(r"\[.*\]", "", decl))
                except ValueError:  # a type this reader does not know: not in a struct benanza binds
                    base = "?"
                fields_.append((name, f"{base}[{count[1]}]" if count else base))
        h.structs[m["name"]] = fields_
    for m in _PROTO.finditer(text):
        words = m["ret"].replace("*", " * ").split()  # the match may start at earlier declarations' words
        ret = " ".join(
            words[-3:] if words[-1] == "*" and words[-3:-2] == ["const"] else words[-2 if words[-1] == "*" else -1 :]
        )
        args = [a.strip() for a in m["args"].split(",") if a.strip() and a.strip() != "void"]
        try:
            h.prototypes[m["name"]] = (h.canonical(ret, named=False), [h.canonical(a) for a in args])
        except ValueError:  # a declaration of a type this reader does not know: not one benanza binds
            continue
    return h


def _evaluate(expr: str, h: Headers, members: dict[str, int]) -> int:
    names = {**{k: v for e in h.enums.values() for k, v in e.items()}, **members}
    expr = re.sub(r"(?<=\d)[uUlL]+\b", "", expr)
    return int(eval(expr, {"__builtins__": {}}, names))  # the headers' own constant expressions


def canonical_ctypes(t: Any) -> str:
    """The canonical text of a ctypes type, as ``Headers.canonical`` gives a C declaration's."""
    if t is None:
        return "void"
    if t is ctypes.c_void_p:
        return "void*"
    if t is ctypes.c_char_p:
        return "char*"
    if isinstance(t, type) and issubclass(t, ctypes.Structure):
        return "struct"
    if isinstance(t, type) and issubclass(t, ctypes.Array):
        return f"{canonical_ctypes(t._type_)}[{t._length_}]"
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return canonical_ctypes(t._type_) + "*"
    scalars = {
        ctypes.c_int: "int",
        ctypes.c_uint: "uint",
        ctypes.c_size_t: "size_t",
        ctypes.c_double: "double",
        ctypes.c_float: "float",
        ctypes.c_char: "char",
        ctypes.c_int64: "int64",
    }
    if t in scalars:
        return scalars[t]
    raise ValueError(f"no canonical text for {t!r}")
