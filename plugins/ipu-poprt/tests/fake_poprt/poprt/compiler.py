"""``poprt.compiler.Compiler.compile(model, outputs, options)`` and ``CompilerOptions``: the "executable" is the
converted graph itself, run later by the fake runtime."""

from __future__ import annotations

from dataclasses import dataclass

from poprt import _calls


class CompilerOptions:
    """The options the backend sets (PopRT's names); anything else is an AttributeError."""

    __slots__ = ("num_ipus", "ipu_version", "batches_per_step", "partials_type")

    def __init__(self):
        self.num_ipus = 1
        self.ipu_version = "ipu21"
        self.batches_per_step = 1
        self.partials_type = "float"


@dataclass(frozen=True)
class Executable:
    model: bytes
    outputs: tuple


class Compiler:
    @staticmethod
    def compile(model, outputs, options=None) -> Executable:
        options = options or CompilerOptions()
        data = model if isinstance(model, bytes) else model.SerializeToString()
        _calls.record("Compiler.compile", outputs=list(outputs),
                      options={name: getattr(options, name) for name in CompilerOptions.__slots__})
        return Executable(data, tuple(outputs))
