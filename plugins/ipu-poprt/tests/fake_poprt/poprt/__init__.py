"""A stand-in for Graphcore's PopRT, for testing the ``poprt`` backend where there is no IPU.

It offers the documented names and signatures the backend uses (``poprt.converter.Converter``, ``poprt.Pass.get_pass``,
``poprt.compiler.Compiler`` / ``CompilerOptions``, ``poprt.runtime.Runner`` / ``DeviceManager``), records every call
and what it was asked (precision, skip list, FP8 parameters and scales, compiler options, the shapes of each batch) as
one JSON object a line in the file named by ``FAKE_POPRT_CALLS``, and answers with the FP32 graph's outputs computed
by onnxruntime.

It does not emulate the chip: a conversion to FP16 or FP8 changes nothing here, so its answers are FP32 whatever the
precision asked for, and its speed is this host's. What it does keep of PopRT is the contract the backend must meet:
the converter fixes the input shapes it is given, and the runner accepts only inputs and output arrays of exactly
the compiled shapes and dtypes.
"""

from poprt.passes import Pass

__version__ = "0+fake"

__all__ = ["Pass", "__version__"]
