"""The ``onnxruntime`` hardware: a third-party inference engine (onnxruntime's CPU provider) running the suite's ONNX
graph of each precision (:mod:`conformance.engines.onnxruntime.backend`)."""
