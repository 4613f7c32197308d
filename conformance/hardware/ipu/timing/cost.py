"""The IPU timing model: the time of one batch on a device, from the model's op trace, under bulk-synchronous execution.

Every op of the trace compiles to a few BSP supersteps (``timing.toml``); each superstep is local compute on the tiles,
a global sync (~90 cycles) and a compiled exchange (~100 cycles + bytes / (4 B per cycle per receiving tile)). Per op:

- matrix ops (linear, matmul, conv2d) run on the AMP units at the rate of their operand type (FP8 only there), with the
  contraction padded to the AMP's input grain and the output channels to its accumulator grain, spread over the tiles the
  op can fill, at a fitted fraction ``amp_efficiency`` of peak. Their exchange is that of the best 2-D tile grid
  (``pm x pn`` tiles): the activation operand goes to ``pn`` tile columns, the weight operand to ``pm`` tile rows,
  minimising ``a*pn + b*pm`` (the communication lower bound of a distributed matmul);
- vector ops (elementwise, norms, softmax, pooling, depthwise convs) run at the larger of their arithmetic time on the
  vector units and their SRAM traffic time, at a fitted fraction ``vector_efficiency``; operands broadcast over the output
  (biases, masks) are exchanged to every tile that holds part of the output;
- gathers (embedding lookups) are poplibs multiSlice: every tile holding a slice of the table tests each index, with the
  lookups split over copies of the table where exchanging the copy is cheaper than testing the indices;
- inference BatchNorm after a conv is folded into the conv (free).

Each superstep also pays ``superstep_overhead_cycles`` (fitted: vertex launch, supervisor and compute-set fixed costs).
The host sends the inputs and receives the outputs over the host link; with I/O tiles (overlap I/O) that transfer
overlaps compute, which then gets ``tiles - io_tiles`` tiles. The host runtime's handling of each request (a batch: copies
to and from the client's buffers, stream callbacks, queueing) costs ``host_request_us`` (fitted) in series with the device;
the host-device sync of a step (``[host] sync_us``, a PCIe round trip) is shared by the ``batches_per_step`` batches the
device loops over per step.

Outputs (:class:`BatchTime`): the steady-state time per batch when batches follow each other (what throughput sees) and the
latency of one batch sent alone (what a lone query sees), both split into compute, exchange, sync, host.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, RootModel

from conformance.datafiles import Schema, load_validated
from conformance.hardware.ipu.timing.chips import Chip, get_device
from conformance.hardware.ipu.timing.trace import OpRecord, Trace
from models import MODEL_NAMES

TIMING_FILE = Path(__file__).with_name("timing.toml")
CALIBRATION_FILE = Path(__file__).with_name("calibration.toml")
EXECUTION_FILE = Path(__file__).with_name("execution.toml")

PARAMETER_NAMES = ("amp_efficiency", "vector_efficiency", "superstep_overhead_cycles", "host_request_us")


@dataclass(frozen=True)
class Parameters:
    """The fitted efficiencies of the timing model (``calibration.toml``)."""

    amp_efficiency: float  # fraction of the AMP peak a matrix op sustains on the tiles it fills
    vector_efficiency: float  # fraction of vector peak / SRAM bandwidth a vector codelet sustains
    superstep_overhead_cycles: float  # fixed cycles per superstep beyond sync and exchange constants
    host_request_us: float  # host runtime's handling of one request (one batch), serial with the device

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


# -- the data files' schemas (validated when loaded: a DataFileError naming the file, line, key and what is allowed) --
class Supersteps(Schema):
    matrix: PositiveInt
    vector: PositiveInt
    reduction: PositiveInt
    gather: PositiveInt
    input: PositiveInt


class GatherConstants(Schema):
    cycles_per_index: PositiveFloat


class VectorConstants(Schema):
    grain_elements: PositiveInt


class MatrixConstants(Schema):
    k_split_elements: PositiveInt


class HostConstants(Schema):
    sync_us: NonNegativeFloat


class TimingFile(Schema):
    supersteps: Supersteps
    gather: GatherConstants
    vector: VectorConstants
    matrix: MatrixConstants
    host: HostConstants


Efficiency = Annotated[float, Field(gt=0, le=1)]  # a share of a peak rate, in (0, 1]


class ParametersSchema(Schema):
    amp_efficiency: Efficiency
    vector_efficiency: Efficiency
    superstep_overhead_cycles: NonNegativeFloat
    host_request_us: NonNegativeFloat


class FitSummary(Schema):
    device: str
    rows_fitted: PositiveInt
    max_abs_error: NonNegativeFloat
    rms_log_error: NonNegativeFloat


class FittedRow(Schema):
    model: Literal[MODEL_NAMES]
    precision: str
    batch: PositiveInt
    fit: bool
    published_qps: PositiveFloat
    predicted_qps: PositiveFloat
    published_ms_per_batch: PositiveFloat
    predicted_ms_per_batch: PositiveFloat
    published_avg_ms: PositiveFloat
    predicted_avg_ms: PositiveFloat
    error: float = Field(gt=-1)  # predicted / published - 1


class CalibrationFile(Schema):
    parameters: ParametersSchema
    fit: FitSummary
    row: list[FittedRow] = []


class ExecutionSchema(Schema):
    io_tiles: NonNegativeInt
    batches_per_step: PositiveInt
    packed: bool
    clients: PositiveInt


class ExecutionFile(RootModel[dict[Literal[MODEL_NAMES], ExecutionSchema]]):
    model_config = ConfigDict(strict=True)


@lru_cache(maxsize=None)
def load_constants(path: Path | None = None) -> dict:
    """The constants of ``timing.toml`` (or ``path``) as its tables, validated."""
    return load_validated(Path(path) if path is not None else TIMING_FILE, TimingFile).model_dump()


@lru_cache(maxsize=None)
def load_calibration(path: Path | None = None) -> dict:
    """The fit in ``calibration.toml`` (or ``path``) as its tables, validated."""
    path = Path(path) if path is not None else CALIBRATION_FILE
    if not path.is_file():
        raise FileNotFoundError(f"timing calibration {str(path)!r} is missing; run `ipu-conformance calibrate --write`")
    return load_validated(path, CalibrationFile).model_dump()


@lru_cache(maxsize=None)
def calibration_hash(path: Path | None = None) -> str:
    """The first 12 hex digits of the calibration file's SHA-256: which fit a simulated figure comes from."""
    return hashlib.sha256(Path(path or CALIBRATION_FILE).read_bytes()).hexdigest()[:12]


def calibrated_parameters(path: Path | None = None) -> Parameters:
    return Parameters(**load_calibration(path)["parameters"])


@dataclass(frozen=True)
class Execution:
    """How the model is run: tiles reserved for I/O, device iterations per host call, sequence packing."""

    io_tiles: int = 0
    batches_per_step: int = 1
    packed: bool = False
    clients: int = 1

    def __post_init__(self):
        if self.io_tiles < 0 or self.batches_per_step < 1:
            raise ValueError(f"execution: io_tiles must be >= 0 and batches_per_step >= 1, got {self.io_tiles}, {self.batches_per_step}")


@lru_cache(maxsize=None)
def _execution_table(path: Path | None = None) -> dict:
    """The execution options of ``execution.toml`` (or ``path``) per model, validated."""
    return load_validated(Path(path) if path is not None else EXECUTION_FILE, ExecutionFile).model_dump()


def load_timing_data() -> None:
    """Load (and so validate) the timing model's data files: timing constants, calibration and execution options."""
    load_constants()
    load_calibration()
    _execution_table()


def default_execution(model_name: str, **overrides) -> Execution:
    """The seed benchmark's execution options for ``model_name`` (``execution.toml``), with ``overrides`` (None = keep)."""
    entry = dict(_execution_table().get(model_name, {}))
    entry.update({k: v for k, v in overrides.items() if v is not None})
    return Execution(**entry)


@dataclass
class Cost:
    compute: float = 0.0  # seconds
    exchange: float = 0.0
    sync: float = 0.0

    def add(self, other: "Cost") -> None:
        self.compute += other.compute
        self.exchange += other.exchange
        self.sync += other.sync

    @property
    def total(self) -> float:
        return self.compute + self.exchange + self.sync


@dataclass
class BatchTime:
    """Time of one batch. ``per_batch_s``: steady state, batch after batch; ``latency_s``: one batch sent alone."""

    device: str
    batch_size: int
    per_batch_s: float
    latency_s: float
    compute_s: float
    exchange_s: float
    sync_s: float
    host_s: float  # per batch: request handling, step sync share, host transfers not overlapped with compute
    host_transfer_s: float
    host_request_s: float
    compute_tiles: int
    by_kind: dict = field(default_factory=dict)

    @property
    def samples_per_second(self) -> float:
        return self.batch_size / self.per_batch_s


def _ceil_to(value: float, grain: int) -> float:
    return math.ceil(value / grain) * grain


class TimingModel:
    """Prices traces on ``device`` with ``params`` (the calibrated ones by default)."""

    def __init__(self, device: Chip | str = "c600", params: Parameters | None = None, constants: dict | None = None):
        self.device = get_device(device) if isinstance(device, str) else device
        self.params = params or calibrated_parameters()
        self.constants = constants or load_constants()

    # -- per op ---------------------------------------------------------------------------------------------------
    def _fixed(self, steps: int) -> Cost:
        """``steps`` supersteps of fixed cost: the sync, the exchange's fixed part and the compute set's overhead."""
        d, clock = self.device, self.device.clock_hz
        return Cost(compute=steps * self.params.superstep_overhead_cycles / clock,
                    exchange=steps * d.exchange_fixed_cycles / clock, sync=steps * d.sync_cycles / clock)

    def _exchange_s(self, nbytes: float, tiles: int) -> float:
        return nbytes / (tiles * self.device.exchange_bytes_per_cycle_per_tile * self.device.clock_hz)

    def matrix_cost(self, op: OpRecord, tiles: int) -> Cost:
        d = self.device
        peak = d.amp_flops_per_cycle_per_tile(op.compute_type)
        k_pad = _ceil_to(op.k, d.amp_k_grain[op.compute_type])
        n_pad = _ceil_to(op.n, d.amp_n_grain)
        work = 2.0 * op.groups * op.m * n_pad * k_pad
        units = op.groups * op.m * (n_pad / d.amp_n_grain) * max(1.0, k_pad / self.constants["matrix"]["k_split_elements"])
        used = max(1.0, min(tiles, units))
        compute = work / (used * peak * self.params.amp_efficiency * d.clock_hz)
        volume = self._matrix_exchange_bytes(op, used, n_pad, k_pad)
        cost = self._fixed(self.constants["supersteps"]["matrix"])
        cost.compute += compute
        cost.exchange += self._exchange_s(volume, tiles)
        return cost

    def _matrix_exchange_bytes(self, op: OpRecord, tiles: float, n_pad: float, k_pad: float) -> float:
        """Bytes exchanged by the cheapest ``pm x pn x pk`` split of each group's ``m x n x k`` problem over its tiles: the
        A operand goes to ``pn`` tile columns, B to ``pm`` tile rows (a weight is placed once, so only its extra copies
        move), and a split contraction sends ``pk`` partial sums per output to be reduced; the result is written once."""
        d = self.device
        if op.weight_operand:
            a, b = op.in_bytes, op.weight_bytes
        else:  # two activations: split in_bytes by element counts of m x k and k x n
            a = op.in_bytes * op.m / (op.m + op.n)
            b = op.in_bytes - a
        ag, bg = a / op.groups, b / op.groups
        partials = op.m * op.n * op.partial_bytes  # per group
        group_tiles = tiles / op.groups
        if group_tiles <= 1:
            return a + b + op.out_bytes
        best = math.inf
        pk = 1.0
        while pk <= min(group_tiles, max(k_pad / d.amp_k_grain[op.compute_type], 1.0)):
            plane = group_tiles / pk
            pn = min(max(math.sqrt(plane * bg / ag) if ag > 0 else plane, 1.0), plane, max(n_pad / d.amp_n_grain, 1.0))
            pm = min(max(plane / pn, 1.0), op.m)
            b_copies = pm - 1 if op.weight_operand else pm
            volume = ag * pn + bg * b_copies + (partials * pk if pk > 1 else 0.0)
            best = min(best, volume)
            pk *= 2
        return op.groups * best + op.out_bytes

    def vector_cost(self, op: OpRecord, tiles: int) -> Cost:
        d = self.device
        elements = max(op.in_bytes, op.out_bytes) / 2
        used = max(1.0, min(tiles, elements / self.constants["vector"]["grain_elements"]))
        eff = self.params.vector_efficiency
        arithmetic = op.flops / (used * d.vector_flops_per_cycle_per_tile(op.compute_type) * eff)
        traffic = (op.in_bytes + op.out_bytes + op.weight_bytes) / (used * d.sram_bytes_per_cycle_per_tile * eff)
        steps = self.constants["supersteps"]["reduction" if op.reduction else ("input" if op.op == "input" else "vector")]
        cost = self._fixed(steps)
        cost.compute += max(arithmetic, traffic) / d.clock_hz
        # every tile holding part of the output receives the broadcast operand (or the part of it it needs)
        cost.exchange += self._exchange_s(min(op.broadcast_bytes * used, op.out_bytes), tiles)
        return cost

    def gather_cost(self, op: OpRecord, tiles: int) -> Cost:
        d = self.device
        per_index = self.constants["gather"]["cycles_per_index"]
        bandwidth = tiles * d.exchange_bytes_per_cycle_per_tile
        # split the lookups over `split` copies of the table: n*c/split cycles testing indices + copying the table
        split = min(max(math.sqrt(op.indices * per_index * bandwidth / max(op.table_bytes, 1.0)), 1.0), tiles)
        cycles = op.indices * per_index / split + op.table_bytes * (split - 1) / bandwidth
        cost = self._fixed(self.constants["supersteps"]["gather"])
        cost.compute += cycles / d.clock_hz
        cost.exchange += self._exchange_s(op.out_bytes + op.in_bytes, tiles)
        return cost

    def op_cost(self, op: OpRecord, tiles: int) -> Cost:
        if op.folded:
            return Cost()
        if op.kind == "matrix":
            return self.matrix_cost(op, tiles)
        if op.kind == "gather":
            return self.gather_cost(op, tiles)
        return self.vector_cost(op, tiles)

    # -- per batch ------------------------------------------------------------------------------------------------
    def batch_time(self, trace: Trace, execution: Execution = Execution()) -> BatchTime:
        d = self.device
        for op in trace.ops:
            if op.kind == "matrix" and op.compute_type not in d.amp_tflops:
                raise ValueError(f"device {d.name!r} has no {op.compute_type} matrix units (precision {trace.precision}); "
                                 f"it supports {', '.join(d.amp_tflops)}")
        if execution.io_tiles >= d.tiles:
            raise ValueError(f"io_tiles {execution.io_tiles} leaves no compute tiles on {d.name} ({d.tiles} tiles)")
        tiles = d.tiles - execution.io_tiles
        total = Cost()
        by_kind: dict[str, dict] = {}
        for op in trace.ops:
            cost = self.op_cost(op, tiles)
            total.add(cost)
            entry = by_kind.setdefault(op.kind, {"ops": 0, "seconds": 0.0, "flops": 0.0})
            entry["ops"] += 1
            entry["seconds"] += cost.total
            entry["flops"] += op.flops
        transfer = (trace.input_bytes + trace.output_bytes) / (d.host_gbps * 1e9)
        request = self.params.host_request_us * 1e-6
        step_sync = self.constants["host"]["sync_us"] * 1e-6
        device_s = total.total
        if execution.io_tiles > 0:  # overlap I/O: the next batch streams in while this one computes
            exposed_transfer = max(device_s, transfer) - device_s
        else:
            exposed_transfer = transfer
        host = exposed_transfer + request + step_sync / execution.batches_per_step
        per_batch = device_s + host
        latency = device_s + transfer + request + step_sync  # a batch sent alone: nothing to overlap with
        return BatchTime(
            device=d.name, batch_size=trace.batch_size, per_batch_s=per_batch, latency_s=latency,
            compute_s=total.compute, exchange_s=total.exchange, sync_s=total.sync,
            host_s=host, host_transfer_s=transfer, host_request_s=request,
            compute_tiles=tiles, by_kind=by_kind,
        )


# -- SRAM -----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryFit:
    weight_bytes: float
    activation_bytes: float  # peak of the live activations
    sram_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weight_bytes + self.activation_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.sram_bytes

    def message(self, what: str) -> str:
        verdict = "fits in" if self.fits else "does NOT fit in"
        text = (f"{what}: weights {self.weight_bytes / 1e6:.1f} MB + peak activations {self.activation_bytes / 1e6:.1f} MB = "
                f"{self.total_bytes / 1e6:.1f} MB {verdict} the {self.sram_bytes / 1e6:.0f} MB of SRAM")
        if not self.fits:
            text += ("; it needs more IPUs (pipelining/sharding) or a smaller batch, or streaming of the weights, "
                     "which this single-IPU timing model does not price")
        return text


def memory_fit(trace: Trace, device: Chip) -> MemoryFit:
    """Weights once at their stored types, plus the peak of live activations: while an op runs, its output and the
    outputs of every earlier op that a later op still reads are held (liveness from the trace's sources)."""
    last_use = list(range(len(trace.ops)))
    for index, op in enumerate(trace.ops):
        for source in op.sources:
            last_use[source] = max(last_use[source], index)
    ending: dict[int, float] = {}
    live = peak = 0.0
    for index, op in enumerate(trace.ops):
        live += op.out_bytes
        peak = max(peak, live)
        ending[last_use[index]] = ending.get(last_use[index], 0.0) + op.out_bytes
        live -= ending.pop(index, 0.0)
    return MemoryFit(trace.weight_bytes, peak, device.sram_bytes)
