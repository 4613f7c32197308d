"""Backends that run the suite's ONNX graphs (:mod:`conformance.graphs`) on a third-party engine. They sit beside the
graphs they are given, above the hardware interface they implement, so their imports run down: a backend here imports
``conformance.graphs`` and ``conformance.hardware``; neither imports it."""
