"""What the interpreter runs, as tables for docs/graphs.md: each ONNX operator with the op of the contract it calls
and that op's numerics on the ``ipu``, and the pass rate of the ONNX backend node tests per operator.

The node tests are the cases the ``onnx`` wheel generates (``onnx.backend.test.case.node.collect_testcases``): each a
small model with its inputs and expected outputs. Each is read by the interpreter as an ``--onnx`` graph is (a refusal
is the usage-error path) and run through the FP32 reference ops; its outputs must be the expected ones within the
case's tolerances (a case written at an opset below :data:`~conformance.graphs.interpreter.MIN_OPSET` is read as
any graph is: accepted when its operators are defined there as at MIN_OPSET).

``python -m conformance.graphs.coverage [--check]`` writes both tables into docs/graphs.md (``--check``: exits 1 when
the file's tables differ from the code's, without writing).
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx.backend.test.case import node as node_tests

from conformance.graphs import interpreter as interp
from conformance.graphs.interpreter import MIN_OPSET, SUPPORTED, Interpreter, InterpreterError
from conformance.hardware.ipu.ops import NUMERICS
from models.ops import Ops

DOCS = Path(__file__).resolve().parents[2] / "docs" / "graphs.md"
PASSED, FAILED, REFUSED = "passed", "failed", "refused"


# -- the operator table ---------------------------------------------------------------------------------------------
# How an operator whose runner is not made by a factory naming its op calls the contract: (what it calls, its ops).
_CALLS = {
    "MatMul": ("linear (a constant 2-D operand) / matmul", ("linear", "matmul")),
    "Gemm": ("linear / matmul, then add (bias)", ("linear", "matmul", "add")),
    "Conv": ("conv2d (3-D: one per output depth plane)", ("conv2d",)),
    "Div": ("div (mul by a constant whose reciprocal is exact)", ("div", "mul")),
    "Pow": ("pow (a constant scalar exponent)", ("pow",)), "Gelu": ("gelu", ("gelu",)),
    "Softmax": ("softmax", ("softmax",)), "LayerNormalization": ("layer_norm", ("layer_norm",)),
    "BatchNormalization": ("batch_norm", ("batch_norm",)), "ReduceMean": ("mean", ("mean",)),
    "GlobalAveragePool": ("mean", ("mean",)),
    "MaxPool": ("max_pool2d (3-D: one per output depth plane)", ("max_pool2d",)),
    "AveragePool": ("avg_pool2d (3-D: one per output depth plane)", ("avg_pool2d",)),
    "Gather": ("embedding (rows of a constant float table), else exact", ("embedding",)),
    "Identity": ("input (of a graph input), else exact", ("input",)),
    "Cast": ("input (of a graph input), else exact", ("input",)), "Clip": ("clip", ("clip",)),
    "Mod": ("mod (fmod=1; integers exact)", ("mod",)), "HardSigmoid": ("hard_sigmoid", ("hard_sigmoid",)),
    "CumSum": ("cumsum (integers exact)", ("cumsum",)), "InstanceNormalization": ("instance_norm", ("instance_norm",)),
    "Einsum": ("linear / matmul (one operand: a transpose, exact)", ("linear", "matmul")),
    "Erf": ("gelu, only inside the exact GELU sub-graph", ("gelu",)),
    "Sigmoid": ("sigmoid (silu, glu in their sub-graphs)", ("sigmoid", "silu", "glu")),
    "ReduceSum": ("sum (integers exact)", ("sum",)),
    "Resize": ("interpolate (linear, cubic; nearest: exact)", ("interpolate",)),
    "Scaler": ("sub (offset), then mul (scale)", ("sub", "mul")),
    "LinearClassifier": ("linear, add (intercepts), sigmoid or softmax (post_transform), sub (a binary model's "
                         "1 - p); the label exact", ("linear", "add", "sigmoid", "softmax", "sub")),
    "LinearRegressor": ("linear, then add (intercepts)", ("linear", "add")),
    "Normalizer": ("abs or mul, sum, sqrt (L2), div (MAX: the largest value exact; a norm of 0 divides by 1)",
                   ("abs", "mul", "sum", "sqrt", "div")),
}


def op_methods() -> dict[str, tuple[str, tuple[str, ...]]]:
    """ONNX operator -> (what it calls, the ops-contract methods it calls; none for an exact numpy step)."""
    calls = {}
    for op, runner in interp._RUN.items():
        if op in _CALLS:
            calls[op] = _CALLS[op]
            continue
        closure = dict(zip(runner.__code__.co_freevars, (c.cell_contents for c in runner.__closure__ or ())))
        method = closure.get("method")
        calls[op] = (method, (method,)) if isinstance(method, str) else ("exact (numpy)", ())
    return calls


def op_table() -> str:
    """The markdown table of every supported operator: the op it calls and that op's numerics on the ipu."""
    rows = ["| ONNX operator | op of the contract | on the `ipu` (FP16 precisions) | FP8 operands |",
            "|---|---|---|---|"]
    for op, (calls, methods) in sorted(op_methods().items()):
        calls = f"{calls} (an ONNX-ML operator, `{interp.ML_DOMAIN}`)" if op in interp.ML_OPERATORS else calls
        if not methods:
            rows.append(f"| {op} | {calls} | values moved, selected or compared: no rounding | no |")
            continue
        kinds = dict.fromkeys(NUMERICS[m][0] for m in methods)
        numerics = (next(iter(kinds)) if len(kinds) == 1
                    else "; ".join(f"{m}: {NUMERICS[m][0]}" for m in methods))
        fp8 = "matrix products' operands" if any(NUMERICS[m][1] for m in methods) else "no"
        rows.append(f"| {op} | {calls} | {numerics} | {fp8} |")
    return "\n".join(rows)


# -- the node tests -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    case: str
    ops: tuple[str, ...]
    result: str  # PASSED, FAILED or REFUSED
    reason: str = ""


def node_cases(pattern: str | None = None) -> list:
    """The node test cases of the onnx wheel (those whose name matches ``pattern``, a regular expression)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = node_tests.collect_testcases(None)
    return [c for c in cases if pattern is None or re.search(pattern, c.name)]


def run_case(case) -> Outcome:
    """One node test: refused when the interpreter reads it, or run at FP32 and compared with its expected outputs."""
    ops = tuple(sorted({n.op_type for n in case.model.graph.node}))
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            graph = Interpreter(case.model)
    except InterpreterError as exc:
        return Outcome(case.name, ops, REFUSED, str(exc).splitlines()[0])
    reasons = []
    for inputs, expected in case.data_sets:
        given = dict(zip(graph.inputs, inputs))
        try:
            with np.errstate(all="ignore"):
                got = graph.run(given, Ops())
        except InterpreterError as exc:
            return Outcome(case.name, ops, FAILED, f"refused when run: {str(exc).splitlines()[0]}")
        for name, want in zip(graph.outputs, expected):
            have = np.asarray(got[name])
            want = np.asarray(want)
            if have.shape != want.shape or have.dtype != want.dtype:
                reasons.append(f"{name}: {have.dtype} {have.shape}, expected {want.dtype} {want.shape}")
            elif not np.allclose(have, want, rtol=case.rtol, atol=case.atol, equal_nan=True):
                worst = float(np.nanmax(np.abs(have.astype(np.float64) - want))) if have.size else 0.0
                reasons.append(f"{name}: differs by up to {worst:.3g}")
    return Outcome(case.name, ops, FAILED if reasons else PASSED, "; ".join(reasons))


def run_cases(cases) -> list[Outcome]:
    return [run_case(c) for c in cases]


def claimed(outcome: Outcome) -> bool:
    """Whether every operator of the case is one the interpreter claims (Constant aside)."""
    return all(op in SUPPORTED for op in outcome.ops)


def pass_table(outcomes: list[Outcome]) -> str:
    """Per claimed operator, its single-operator cases passed / failed / refused; then the multi-operator cases
    (function bodies written out) made only of claimed operators, and the cases of other operators."""
    per: dict[str, Counter] = {}
    multi, other = Counter(), Counter()
    for o in outcomes:
        body = [op for op in o.ops if op != "Constant"] or list(o.ops)
        if not claimed(o):
            other[o.result] += 1
        elif len(body) == 1:
            per.setdefault(body[0], Counter())[o.result] += 1
        else:
            multi[o.result] += 1
    rows = ["| operator | cases | passed | refused at load | failed |", "|---|---:|---:|---:|---:|"]
    for op in sorted(SUPPORTED):
        c = per.get(op, Counter())
        total = sum(c.values())
        rows.append(f"| {op} | {total} | {c[PASSED]} | {c[REFUSED]} | {c[FAILED]} |" if total
                    else f"| {op} | 0 | | | |")
    for label, c in (("cases of several claimed operators", multi), ("cases of unclaimed operators", other)):
        rows.append(f"| {label} | {sum(c.values())} | {c[PASSED]} | {c[REFUSED]} | {c[FAILED]} |")
    return "\n".join(rows)


# -- the docs -------------------------------------------------------------------------------------------------------
def _markers(which: str) -> tuple[str, str]:
    return f"<!-- {which}: generated by python -m conformance.graphs.coverage -->", f"<!-- end of {which} -->"


def section(text: str, which: str) -> str | None:
    """The generated table ``which`` in ``text`` (None when its markers are missing)."""
    begin, end = _markers(which)
    if begin not in text or end not in text:
        return None
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def replace(text: str, which: str, table: str) -> str:
    begin, end = _markers(which)
    if section(text, which) is None:
        raise ValueError(f"{DOCS}: the markers {begin!r} and {end!r} are missing")
    head, rest = text.split(begin, 1)
    return f"{head}{begin}\n{table}\n{end}{rest.split(end, 1)[1]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.graphs.coverage", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/graphs.md's tables are not the code's")
    parser.add_argument("--docs", type=Path, default=DOCS)
    args = parser.parse_args(argv)
    text = args.docs.read_text()
    outcomes = run_cases(node_cases())
    tables = {"operator table": op_table(), "node-test table": pass_table(outcomes)}
    new = text
    for which, table in tables.items():
        new = replace(new, which, table)
    failed = [o for o in outcomes if o.result == FAILED and claimed(o)]
    for o in failed:
        print(f"FAILED {o.case} ({', '.join(o.ops)}): {o.reason}", file=sys.stderr)
    if args.check:
        if new != text:
            print(f"{args.docs}: its generated tables differ from the code's; run python -m conformance.graphs.coverage",
                  file=sys.stderr)
            return 1
        return 0
    if new != text:
        tmp = args.docs.with_suffix(".md.tmp")
        tmp.write_text(new)
        tmp.replace(args.docs)
    print(f"{sum(o.result == PASSED for o in outcomes)} of {len(outcomes)} node tests pass; {len(failed)} of claimed "
          f"operators fail")
    return 0


if __name__ == "__main__":
    sys.exit(main())
