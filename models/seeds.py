"""The seeds of the suite's generated data, stated once: seeded weights, the evaluation set (whose FP32 outputs
``reference/`` stores) and the FP8 calibration set, which is drawn from another seed so that the two are disjoint."""

WEIGHT_SEED = 0
EVAL_SEED = 0
CALIBRATION_SEED = 1
