"""The Graphcore C600 through PopRT as a hardware of the ipu-conformance suite (``--hardware poprt``).

:mod:`~ipu_poprt.backend` is the suite's backend, :mod:`~ipu_poprt.conversion` what PopRT is asked for a model at a
precision (the suite's graph and policy), :mod:`~ipu_poprt.engine` PopRT's converter, compiler and runtime,
:mod:`~ipu_poprt.requirement` whether PopRT is importable (the backend is unavailable without it);
``targets/`` holds the backend's accuracy gates and performance targets.
"""
