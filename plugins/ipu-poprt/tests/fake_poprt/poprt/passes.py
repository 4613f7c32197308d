"""``poprt.Pass`` with ``get_pass(name, *args, **kwargs)``; the one pass the backend uses, ``float_to_fp8``
(``poprt.passes.float_to_fp8.Float2FP8``'s documented parameters), is recorded and leaves the graph as it is."""

from __future__ import annotations

from poprt import _calls


class Pass:
    def __init__(self, name: str, options: dict):
        self.name = name
        self.options = options

    def __call__(self, model):
        _calls.record(f"Pass.{self.name}", options=self.options)
        return model

    @staticmethod
    def get_pass(name, *args, **kwargs):
        if name != "float_to_fp8":
            raise KeyError(f"the fake poprt has no pass {name!r}")
        return Pass(name, _float_to_fp8(*args, **kwargs))


def _float_to_fp8(fp8_params=("F143", "F143", 0, 0), skip_op_names=(), convert_model="fp8", fp8_input_dict=None,
                  fp8_weight_dict=None, skip_op=True) -> dict:
    if convert_model not in ("fp8", "fp8_weight"):
        raise ValueError(f"convert_model {convert_model!r}: expected fp8 or fp8_weight")
    return {"fp8_params": list(fp8_params), "skip_op_names": list(skip_op_names), "convert_model": convert_model,
            "fp8_input_dict": fp8_input_dict, "fp8_weight_dict": fp8_weight_dict}
