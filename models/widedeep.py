"""Wide & Deep click-through-rate model (Cheng et al. 2016) on Criteo's 26 categorical and 13 numeric features.

Inputs:
- ``categorical_ids`` (batch, 26) int: per feature, the hashed category id in ``[0, bucket_sizes[i])``;
- ``numeric_features`` (batch, 13) float: Criteo's integer counts I1..I13 after ``log(1 + x)`` (missing -> 0).

Output: ``probabilities`` (batch, 2) float: column 0 no click, column 1 click (Criteo label 1); rows sum to 1.

Wide part: a linear model over the sparse features (one weight per hashed category of each feature, summed) plus a
linear term over the numeric features. Deep part: one embedding table per categorical feature, the 26 embeddings
concatenated with the 13 numeric features, an MLP (1024-512-256, ReLU) and a linear head. The two logits are summed;
a sigmoid gives the click probability.

Seeded weights are fitted to a synthetic Criteo-like click process (see :func:`seeded_params`): the model predicts
mostly confident low click probabilities with a tail (mean ~0.25), as a trained CTR model does.

Checkpoint (``config.json`` with the :class:`WideDeepConfig` fields + ``model.safetensors``; :func:`save_checkpoint`
writes one), tensor names, with ``F`` = feature index 0..25, ``V_F`` = ``bucket_sizes[F]``, ``D`` = embedding_dim:

    wide.categorical.F.weight   (V_F, 1)     per-category weight of feature F
    wide.numeric.weight         (1, 13)      numeric weights of the wide linear model
    wide.numeric.bias           (1,)
    deep.embeddings.F.weight    (V_F, D)     embedding table of feature F
    deep.mlp.K.weight / .bias   (H_K, H_K-1) / (H_K,)   K = 0..len(hidden_sizes)-1, H_-1 = 26 * D + 13
    deep.head.weight / .bias    (1, H_last) / (1,)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from models import arrays
from models.base import (
    cached_params,
    CheckpointError,
    InputError,
    InputSpec,
    Model,
    ParamInit,
    apply_overrides,
    check_fields,
    check_parameter_memory,
    checkpoint_config,
    parameter_bytes,
    read_checkpoint,
    take_params,
)
from models.ops import Ops
from models.spec import BUILTIN_TABLES, ModelSpec

# Distinct values of C1..C26 in the Criteo Kaggle display-advertising training set (as counted by DLRM's Kaggle
# preprocessing). The full tables (33.8M rows) would need ~2 GB per 16-wide embedding set; production Wide & Deep
# models hash each feature into a fixed number of buckets instead, as we do: buckets = min(cardinality, HASH_BUCKET_CAP).
CRITEO_KAGGLE_CARDINALITIES = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)
HASH_BUCKET_CAP = 100_000  # 7 features are capped; 0.84M rows in all (54 MB of FP32 embeddings at D=16)
CRITEO_CLICK_RATE = 0.256  # share of clicks in the Criteo Kaggle training set
# What each size may be (inclusive; for the lists, each entry and how many): hashed ids index an int32 range, an MLP of
# more than 64 layers or a million units is a mistake. The memory the parameters take is checked when they are built.
CONFIG_RANGES = {
    "bucket_sizes": (1, 2**31 - 1),
    "num_numeric": (1, 4_096),
    "embedding_dim": (1, 65_536),
    "hidden_sizes": (1, 1_048_576),
}
CONFIG_LENGTHS = {"bucket_sizes": (1, 1_024), "hidden_sizes": (1, 64)}


@dataclass(frozen=True)
class WideDeepConfig:
    """Defaults: the Criteo feature layout of the seed benchmark's wide&deep (26 categorical + 13 numeric) with a
    Wide & Deep paper-sized tower (1024-512-256 ReLU MLP); embedding dimension 16 as in MLPerf DLRM's Criteo Kaggle
    configuration; hash buckets capped at 100k per feature (see CRITEO_KAGGLE_CARDINALITIES)."""

    bucket_sizes: tuple[int, ...] = tuple(min(c, HASH_BUCKET_CAP) for c in CRITEO_KAGGLE_CARDINALITIES)
    num_numeric: int = 13
    embedding_dim: int = 16
    hidden_sizes: tuple[int, ...] = (1024, 512, 256)

    def __post_init__(self):
        check_fields(self, CONFIG_RANGES, CONFIG_LENGTHS)  # integers are integers (10.9 is refused, not truncated)

    @property
    def num_categorical(self) -> int:
        return len(self.bucket_sizes)


def param_shapes(config: WideDeepConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor of the checkpoint format (see the module docstring)."""
    shapes = {}
    for f, buckets in enumerate(config.bucket_sizes):
        shapes[f"wide.categorical.{f}.weight"] = (buckets, 1)
    shapes["wide.numeric.weight"] = (1, config.num_numeric)
    shapes["wide.numeric.bias"] = (1,)
    for f, buckets in enumerate(config.bucket_sizes):
        shapes[f"deep.embeddings.{f}.weight"] = (buckets, config.embedding_dim)
    width = config.num_categorical * config.embedding_dim + config.num_numeric
    for k, hidden in enumerate(config.hidden_sizes):
        shapes[f"deep.mlp.{k}.weight"] = (hidden, width)
        shapes[f"deep.mlp.{k}.bias"] = (hidden,)
        width = hidden
    shapes["deep.head.weight"] = (1, width)
    shapes["deep.head.bias"] = (1,)
    return shapes


class WideDeep(Model):
    name = "widedeep"
    output_names = ("probabilities",)

    @property
    def input_specs(self):
        c = self.config
        return (InputSpec("categorical_ids", (c.num_categorical,), "int", "int64"),
                InputSpec("numeric_features", (c.num_numeric,), "float", "float32"))

    def validate_inputs(self, inputs):
        batch = super().validate_inputs(inputs)
        ids = inputs["categorical_ids"]
        xp = arrays.namespace(ids)
        buckets = arrays.asarray_like(np.asarray(self.config.bucket_sizes), ids)
        bad = (ids < 0) | (ids >= buckets)
        if bool(xp.any(bad)):
            rows, features = xp.nonzero(bad)  # in row-major order
            row, f = int(rows[0]), int(features[0])
            raise InputError(f"{self.name}: input 'categorical_ids' has id {int(ids[row, f])} for feature {f} (sample {row}); "
                             f"expected hashed ids in [0, {self.config.bucket_sizes[f]})")
        return batch

    def forward(self, inputs, ops: Ops):
        ids = inputs["categorical_ids"]                                                # (B, 26)
        p, c, xp = self.params_like(ids), self.config, arrays.namespace(ids)
        numeric = ops.input(inputs["numeric_features"], name="numeric_features")       # (B, 13)

        # wide: sum over features of the weight of each sample's category, plus a linear term in the numeric features
        wide_terms = [ops.embedding(p[f"wide.categorical.{f}.weight"], ids[:, f], name=f"wide.categorical.{f}")
                      for f in range(c.num_categorical)]                               # 26 x (B, 1)
        wide_weights = xp.concat(wide_terms, axis=1)                                   # (B, 26)
        ones = arrays.asarray_like(np.ones((c.num_categorical, 1), np.float32), ids)
        wide_sparse = ops.matmul(wide_weights, ones, name="wide.categorical_sum")      # (B, 1)
        wide_dense = ops.linear(numeric, p["wide.numeric.weight"], p["wide.numeric.bias"], name="wide.numeric")
        wide = ops.add(wide_sparse, wide_dense, name="wide")                           # (B, 1)

        # deep: embeddings ++ numeric -> MLP -> logit
        embedded = [ops.embedding(p[f"deep.embeddings.{f}.weight"], ids[:, f], name=f"deep.embeddings.{f}")
                    for f in range(c.num_categorical)]                                 # 26 x (B, D)
        h = xp.concat(embedded + [numeric], axis=1)                                    # (B, 26*D + 13)
        for k in range(len(c.hidden_sizes)):
            h = ops.linear(h, p[f"deep.mlp.{k}.weight"], p[f"deep.mlp.{k}.bias"], name=f"deep.mlp.{k}")
            h = ops.relu(h, name=f"deep.mlp.{k}.activation")                          # (B, H_k)
        deep = ops.linear(h, p["deep.head.weight"], p["deep.head.bias"], name="deep.head")  # (B, 1)

        logit = ops.add(wide, deep, name="logit")                                      # (B, 1)
        click = ops.sigmoid(logit, name="click_probability")                           # (B, 1)
        no_click = ops.sub(np.float32(1), click, name="no_click_probability")          # (B, 1)
        return {"probabilities": xp.concat([no_click, click], axis=1)}                 # (B, 2)

    def sample_inputs(self, batch_size: int, seed: int = 0):
        return criteo_like_inputs(self.config, batch_size, np.random.default_rng([seed, 0x57444550]))  # tag "WDEP"


def criteo_like_inputs(config: WideDeepConfig, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Criteo-like features. Categorical: per feature, Zipf-distributed popularity ranks (exponent ~U(1.05, 1.6),
    as the heavy-headed category frequencies of Criteo) folded into the bucket range and scattered by a fixed
    multiplicative hash. Numeric: heavy-tailed counts (log-normal, per-feature location and spread; 0-40% missing,
    filled with 0), then ``log(1 + x)`` as in the standard Criteo preprocessing."""
    feature_rng = np.random.default_rng(0x43524954)  # per-feature distribution shapes are fixed, not per seed ("CRIT")
    exponents = feature_rng.uniform(1.05, 1.6, config.num_categorical)
    hash_mult = feature_rng.integers(1, 2**31 - 1, config.num_categorical) | 1
    hash_offset = feature_rng.integers(0, 2**31 - 1, config.num_categorical)
    ids = np.empty((batch, config.num_categorical), np.int64)
    for f, buckets in enumerate(config.bucket_sizes):
        ranks = (rng.zipf(exponents[f], batch) - 1) % buckets
        ids[:, f] = (ranks * hash_mult[f] + hash_offset[f]) % buckets
    location = feature_rng.uniform(0.0, 4.0, config.num_numeric)
    spread = feature_rng.uniform(0.8, 2.0, config.num_numeric)
    missing_rate = feature_rng.uniform(0.0, 0.4, config.num_numeric)
    counts = np.floor(np.exp(location + spread * rng.standard_normal((batch, config.num_numeric))))
    counts[rng.random((batch, config.num_numeric)) < missing_rate] = 0.0
    return {"categorical_ids": ids, "numeric_features": np.log1p(counts).astype(np.float32)}


# -- seeded weights -----------------------------------------------------------------------------------------------------
_CALIBRATION_SAMPLES = 4096
_NEWTON_STEPS = 8
_RIDGE = 1e-2  # L2 penalty of the head fit, per calibration sample (keeps the head from amplifying weak features)
_WIDE_LOGIT_STD = 1.3  # spread of the click process's per-category (memorised) term, in logits
_INTEREST_LOGIT_STD = 0.8  # spread of its nonlinear (generalised) term
_TEACHER_UNITS = 4


def _interest_inputs(config: WideDeepConfig, params, inputs) -> np.ndarray:
    """Latent factors of a sample: its 26 category embeddings and the numeric features, each standardised: (B, 26*D+13)."""
    ids = inputs["categorical_ids"]
    embedded = [params[f"deep.embeddings.{f}.weight"][ids[:, f]] for f in range(config.num_categorical)]
    return np.concatenate(embedded + [inputs["numeric_features"]], axis=1).astype(np.float64)


def seeded_params(config: WideDeepConfig, seed: int) -> dict[str, np.ndarray]:
    """Deterministic weights of a model trained on a synthetic Criteo-like click process.

    The click process (fixed by ``seed``): the logit of a sample is a per-category propensity summed over its 26
    features plus a linear term in the numeric ones (what the wide part memorises; the seeded wide weights, scaled to
    a spread of 1.3 logits) plus a nonlinear "interest" term: a small random ReLU network (4 units) of the category
    embeddings (N(0, 0.05^2), the latent factors) and numeric features, spread 0.8 logits. Clicks are Bernoulli.

    Training in closed form: the deep tower is He-normal with zero biases and its first layer's input columns scaled
    by 1/std of their input on the calibration samples (a trained first layer adapts to input scales; otherwise the
    numeric features, ~50x larger than the embeddings, would drown them). The head, over the wide logit and the 256 deep
    features, is a logistic regression (Newton steps, a small ridge) of the clicks of 4096 calibration samples. The
    model then predicts mostly confident low click probabilities with a tail, as a trained CTR model on Criteo does.
    """
    init = ParamInit(seed)
    params = {}
    for name, shape in param_shapes(config).items():
        if name.startswith("deep.embeddings."):
            params[name] = init.normal(name, shape, std=0.05)
        elif name.startswith("wide.") and name.endswith(".weight"):
            params[name] = init.normal(name, shape, std=1.0)
        elif name.endswith(".weight"):  # deep.mlp.K and deep.head
            params[name] = init.normal(name, shape, std=float(np.sqrt(2.0 / shape[1])))
        else:
            params[name] = init.constant(shape, 0.0)
    calibration = criteo_like_inputs(config, _CALIBRATION_SAMPLES, np.random.default_rng([seed, 0x43414C42]))  # "CALB"

    latent = _interest_inputs(config, params, calibration)
    latent_mean, latent_std = latent.mean(axis=0), latent.std(axis=0) + 1e-6
    first = "deep.mlp.0.weight"
    params[first] = (params[first] / latent_std[None, :]).astype(np.float32)

    activations = {}
    WideDeep(config, params).forward(calibration, Ops(recorder=activations.__setitem__))
    wide = activations["wide"].astype(np.float64).ravel()
    wide_scale = _WIDE_LOGIT_STD / wide.std()
    for name in params:
        if name.startswith("wide."):
            params[name] = (params[name] * wide_scale).astype(np.float32)
    wide = (wide - wide.mean()) * wide_scale

    teacher_rng = np.random.default_rng([seed, 0x54434852])  # "TCHR": the click process's interest network
    units = teacher_rng.standard_normal((latent.shape[1], _TEACHER_UNITS)) / np.sqrt(latent.shape[1])
    hidden = np.maximum((latent - latent_mean) / latent_std @ units, 0.0)
    interest = hidden @ teacher_rng.standard_normal(_TEACHER_UNITS)
    interest = (interest - interest.mean()) * (_INTEREST_LOGIT_STD / interest.std())
    true_logit = wide + interest
    true_logit += _logit_offset(true_logit, CRITEO_CLICK_RATE)
    clicks = (teacher_rng.random(len(true_logit)) < 1.0 / (1.0 + np.exp(-true_logit))).astype(np.float64)

    last = f"deep.mlp.{len(config.hidden_sizes) - 1}.activation"
    deep = activations[last].astype(np.float64)
    features = np.concatenate([activations["wide"].astype(np.float64) * wide_scale, deep, np.ones((len(deep), 1))], axis=1)
    coef = _logistic_regression(features, clicks)
    params["wide.numeric.weight"] *= np.float32(coef[0])
    params["wide.numeric.bias"] *= np.float32(coef[0])
    for f in range(config.num_categorical):
        params[f"wide.categorical.{f}.weight"] *= np.float32(coef[0])
    params["deep.head.weight"] = coef[None, 1:-1].astype(np.float32)
    params["deep.head.bias"] = np.array([coef[-1]], np.float32)
    return params


def _logit_offset(logit: np.ndarray, rate: float) -> float:
    """The shift that makes the mean of sigmoid(logit + shift) equal ``rate`` (bisection)."""
    low, high = -20.0, 20.0
    for _ in range(60):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if np.mean(1.0 / (1.0 + np.exp(-(logit + mid)))) < rate else (low, mid)
    return 0.5 * (low + high)


def _logistic_regression(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Coefficients of a ridge-penalised logistic regression of ``y`` on ``x`` (last column the intercept, not
    penalised) by Newton's method."""
    n, d = x.shape
    penalty = np.full(d, _RIDGE * n)
    penalty[-1] = 0.0
    coef = np.zeros(d)
    for _ in range(_NEWTON_STEPS):
        p = 1.0 / (1.0 + np.exp(-(x @ coef)))
        gradient = x.T @ (p - y) + penalty * coef
        hessian = (x * (p * (1 - p))[:, None]).T @ x + np.diag(penalty)
        coef -= np.linalg.solve(hessian, gradient)
    return coef


# -- checkpoints ----------------------------------------------------------------------------------------------------------
def save_checkpoint(model: WideDeep, directory) -> Path:
    """Write ``config.json`` (the config fields) and ``model.safetensors`` (the tensor names above) to ``directory``."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "widedeep", **asdict(model.config)}, indent=2))
    save_file({k: np.ascontiguousarray(v) for k, v in model.params.items()}, str(path / "model.safetensors"))
    return path


def build_config(**overrides) -> WideDeepConfig:
    """The validated config with ``overrides`` (no weights built)."""
    return apply_overrides(WideDeepConfig(), overrides)


def host_bytes(config: WideDeepConfig, batch: int) -> tuple[int, int]:
    """(float32 parameter bytes, bytes of the largest activation of one forward pass of ``batch`` rows)."""
    c = config
    return parameter_bytes(param_shapes(c)), 4 * batch * max(c.num_categorical * c.embedding_dim + c.num_numeric,
                                                             *c.hidden_sizes)



def assemble(config, params):
    """The model of ``config`` with seeded weights that a store kept (:func:`models.load_model`), checked to be
    exactly its tensors (a CheckpointError otherwise)."""
    return WideDeep(config, cached_params(params, param_shapes(config), "widedeep (cached seeded weights)"))


def load(checkpoint=None, seed: int = 0, allow_unused: bool = False, **overrides) -> WideDeep:
    """Seeded weights at the default size, or a directory written by :func:`save_checkpoint` (or any tool writing
    the same ``config.json`` fields and tensor names; every tensor used unless ``allow_unused``, see
    :func:`models.base.take_params`)."""
    if checkpoint is None:
        config = apply_overrides(WideDeepConfig(), overrides)
        check_parameter_memory(param_shapes(config), "widedeep (seeded weights)")
        return WideDeep(config, seeded_params(config, seed))
    raw, tensors = read_checkpoint(checkpoint)
    source = f"widedeep checkpoint {str(checkpoint)!r}"
    if raw.get("model_type") != "widedeep":
        raise CheckpointError(f"{source}: config.json model_type is {raw.get('model_type')!r}, expected 'widedeep'")
    known = ("bucket_sizes", "num_numeric", "embedding_dim", "hidden_sizes")
    unknown = sorted(set(raw) - set(known) - {"model_type"})
    if unknown:
        raise CheckpointError(f"{source}: config.json has unknown field(s) {unknown}; expected: model_type, "
                              f"{', '.join(known)}")
    fields = {k: raw[k] for k in known if k in raw}
    config = apply_overrides(checkpoint_config(WideDeepConfig(), fields, source), overrides)
    return WideDeep(config, take_params(tensors, param_shapes(config), source, allow_unused=allow_unused))


SPEC = ModelSpec(
    name="widedeep", module=__name__, model_class="WideDeep", primary_output="probabilities",
    task_metrics=("accuracy", "auc"), task_scorer="conformance.accuracy.metrics:click_agreement",
    label_metrics=("click_accuracy", "click_auc"), dataset_format="conformance.datasets.criteo",
    streamed_dataset=True, checkpoint_type="widedeep", aliases=("wide&deep", "wide_and_deep"),
    tables=BUILTIN_TABLES / "widedeep")
