"""The ``ipu`` hardware: the Graphcore IPU emulated, bit-exact FP16/FP8 numerics (:mod:`conformance.hardware.ipu.ops`)
and a timing model of the chip (:mod:`conformance.hardware.ipu.timing`) behind LoadGen."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from conformance.hardware.base import Backend, Prepared, UnsupportedCombination
from conformance.hardware.devices import Workload
from conformance.hardware.ipu import fp8_scales, op_checks
from conformance.hardware.ipu.ops import Fp8Plan, IpuOps
from conformance.hardware.ipu.policy import PRECISIONS_FILE, Fp8Settings, Policy, load_precisions
from conformance.hardware.ipu.simulated import SimulatedIpu
from conformance.hardware.ipu.timing.chips import DEVICE_NAMES as CHIP_NAMES
from conformance.hardware.ipu.timing.chips import get_device, load_devices
from conformance.hardware.ipu.timing.cost import (
    TimingModel,
    calibration_hash,
    default_execution,
    load_timing_data,
    memory_fit,
)
from conformance.hardware.ipu.timing.predict import extrapolated_trace, model_trace
from conformance.numerics import compiled

# MLPerf's name of each storage format of precisions.toml
STORAGE_NAMES = {"f16": "fp16"}


class IpuPrepared(Prepared):
    """IpuOps at one precision, with the FP8 plan (formats and scales) every ops object of the run shares."""

    def __init__(self, model, policy: Policy, plan: Fp8Plan | None):
        super().__init__(model, policy.name, lambda recorder=None: IpuOps(policy, fp8_plan=plan, recorder=recorder))
        self.policy = policy
        self.plan = plan

    def details(self, ops: IpuOps) -> dict:
        if self.plan is None:
            return {}
        settings = self.plan.settings
        return {"fp8_scales": ops.scales_used,
                "fp8_calibration": {**self.plan.calibration, "input_format": settings.input_format,
                                    "weight_format": settings.weight_format, "skip": list(settings.skip)}}


class IpuBackend(Backend):
    name = "ipu"
    description = "Graphcore IPU emulator: bit-exact FP16/FP8 numerics in numpy"
    timing = "simulated"
    chips = CHIP_NAMES

    def __init__(self, chip: str | None = None, precisions_file: Path | None = None):
        load_devices()  # first: a chips.toml that is not valid is named, not taken for an unknown --device
        super().__init__(chip)
        self.policies, self.fp8_settings = load_precisions(precisions_file)
        load_timing_data()  # every data file is validated before a run uses the backend
        self.precisions = tuple(self.policies)
        self._plans: dict[tuple, tuple[object, Fp8Plan]] = {}
        self._devices: dict[tuple, SimulatedIpu] = {}

    def policy(self, precision: str) -> Policy:
        self.check_precision(precision)
        return self.policies[precision]

    def chip_support(self, precision: str) -> str | None:
        """A precision whose matrix ops compute in a type the chip has no matrix units for (FP8 on gc200 and bow)."""
        chip = get_device(self.chip)
        policy = self.policy(precision)
        needed = "fp8" if policy.fp8 == "all" else STORAGE_NAMES.get(policy.storage, policy.storage)
        if needed in chip.amp_tflops:
            return None
        return (f"the {chip.name} chip has no {needed} matrix units (chips.toml: it has "
                f"{', '.join(chip.amp_tflops)}), so {precision} does not run on it (--device {chip.name})")

    def accuracy_support(self, model_name: str, precision: str) -> str | None:
        reason = super().accuracy_support(model_name, precision)
        if reason is None and self.policy(precision).uses_fp8 and model_name not in self.fp8_settings:
            reason = (f"{model_name} at {precision}: no FP8 settings for {model_name!r} in {PRECISIONS_FILE.name} "
                      f"(models with FP8 settings: {', '.join(sorted(self.fp8_settings))})")
        return reason

    def fp8_plan(self, model, precision: str, *, settings: Fp8Settings | None = None, batch_size: int = 4,
                 calibration_samples: int | None = None, calibration_inputs=None) -> Fp8Plan:
        """The FP8 plan of ``model``: its settings (``settings`` or the model's table) and input scales calibrated
        on the calibration set or ``calibration_inputs`` (cached per model object, shared by every FP8 precision;
        weight scales are computed from the weights when used)."""
        policy = self.policy(precision)
        settings = settings or self.fp8_settings.get(model.name)
        if settings is None:
            raise UnsupportedCombination(f"{model.name} at {precision}: no FP8 settings in {PRECISIONS_FILE.name}")
        needs_inputs = policy.fp8 == "all" and settings.scales != "fixed"
        key = (id(model), settings, needs_inputs, calibration_samples)
        hit = self._plans.get(key)
        if hit is not None and hit[0] is model and calibration_inputs is None:
            return hit[1]
        plan = Fp8Plan(settings)
        if needs_inputs:
            plan.input_scales, plan.calibration = fp8_scales.calibrate_inputs(
                model, settings, batch_size=batch_size, samples=calibration_samples, inputs=calibration_inputs,
                store=self.scale_store, say=self.say)
        else:
            plan.calibration = {"method": settings.scales, "inputs": "not calibrated: " + (
                "fixed input scale" if settings.scales == "fixed" else "activations stay FP16")}
        if calibration_inputs is None:  # plans from caller-given inputs are the caller's to keep
            self._plans[key] = (model, plan)
        return plan

    def prepare(self, model, precision: str, calibration_inputs: dict | None = None, *, batch_size: int = 4,
                case: str | None = None) -> "IpuPrepared":
        """The ops of ``model`` at ``precision``; FP8 precisions calibrate their input scales first (once per model)."""
        policy = self.policy(precision)
        plan = None
        if policy.uses_fp8:
            settings = self.fp8_settings.get(case or model.name)
            if settings is None:
                raise UnsupportedCombination(self.accuracy_support(case or model.name, precision))
            plan = self.fp8_plan(model, precision, settings=settings, batch_size=batch_size,
                                 calibration_inputs=calibration_inputs)
        return IpuPrepared(model, policy, plan)

    def loadgen_device(self, model, precision: str, workload: Workload) -> SimulatedIpu:
        """The simulated IPU for ``model`` at ``precision``, kept per model object for the session (its answers are
        computed once, with the FP8 scales the accuracy tests calibrated on the same model); its timeline is reset for
        each run."""
        key = (id(model), precision, workload, self.chip)
        device = self._devices.get(key)
        if device is None or device.samples.model is not model:
            # the ops are prepared (FP8 scales calibrated) when answers are first computed, not before: a run on
            # virtual time needs none
            device = SimulatedIpu(model, precision, workload, default_execution(model.name).packed,
                                  lambda: self.prepare(model, precision).ops(), self.chip)
            self._devices[key] = device
        device.reset()
        return device

    def op_checks(self, model_name: str, precision: str, run: dict) -> tuple[int, dict]:
        """Probes through the ops the models use, against IEEE FP16 and ml_dtypes' FP8 (:mod:`.op_checks`); the skip
        list is checked against the FP8 scales the run used (``run["fp8_scales"]``, from :meth:`IpuPrepared.details`)."""
        return op_checks.op_checks(self, model_name, precision, run.get("fp8_scales"))

    def data_types(self, precision: str) -> dict[str, str]:
        """What the policy holds: tensors in its storage format, and at FP8 the matrix ops' weights (and inputs)."""
        if precision == "fp32":
            return super().data_types(precision)
        policy = self.policy(precision)
        storage = STORAGE_NAMES[policy.storage]
        if not policy.uses_fp8:
            return {"input_data_types": storage, "weight_data_types": storage,
                    "weight_transformations": f"cast fp32 -> {storage}, round to nearest even"}
        return {"input_data_types": f"{storage} (fp8 at matmul/conv inputs)" if policy.fp8 == "all" else storage,
                "weight_data_types": f"fp8 (matmul/conv), {storage} (other)",
                "weight_transformations": "post-training per-tensor power-of-two scaling, cast fp32 -> fp8"}

    def timing_model(self) -> dict:
        chip = get_device(self.chip)
        return {"chip": chip.name, "chip_description": chip.description, "calibration": calibration_hash()}

    def predicted_throughput(self, model_name: str, precision: str, batches, rows_per_sample: int) -> dict:
        """The timing model of this backend's chip at each device batch, batches timed as the simulated device times
        them (one sequence a row: the prediction does not pack)."""
        device = get_device(self.chip)
        timing = TimingModel(device)
        execution = default_execution(model_name, packed=False)
        per_s, fits = [], []
        for batch in batches:
            units = int(batch) * int(rows_per_sample)
            trace = extrapolated_trace(model_name, units, precision) or model_trace(model_name, units, precision)
            per_s.append(batch / timing.batch_time(trace, execution).per_batch_s)
            fits.append(bool(memory_fit(trace, device).fits))
        return {"samples_per_s": per_s, "fits": fits, "packed": bool(default_execution(model_name).packed)}

    def versions(self) -> dict[str, str]:
        return {"numpy": np.__version__}

    def start_up(self) -> str | None:
        missing = compiled.uncached_kernels()
        if not missing:
            return None
        return (f"compiling the emulator's kernels as they are first used: {len(missing)} of them are not in numba's "
                "cache here yet (about 1-2 min on 2 cores, once per machine)")
