"""Mutated data files never give a traceback: the suite's TOML files (the targets, profiles, audit settings, regression
tolerances, label floors, the ipu's chips and precisions) and a checkpoint's ``config.json``, each changed the way a
careless or hostile edit changes it (a value replaced by another type, a sign, a magnitude, ``inf``; a line deleted,
duplicated or cut; a byte flipped), are read by their own loader in this process: it accepts the file or raises its
own typed error naming the file, never anything else. What is accepted holds only numbers the suite can use (finite,
within TOML's 64-bit integers), and a checkpoint's accepted config is the one its file states.

Hypothesis runs derandomized (the same examples on every machine) with a modest number of examples."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from conformance.datafiles import FLOAT_MAGNITUDE, DataFileError
from conformance.hardware.ipu import policy
from conformance.hardware.ipu.timing import chips
from conformance.targets import accuracy, audit, label_floors, performance, profiles, regression
from models import CheckpointError, load_model, model_spec
from models.spec import ModelSpec
from models.widedeep import save_checkpoint

PROPERTY = settings(max_examples=40, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# file -> its loader called on a path (each caches by path: cleared before each call)
TOML_FILES = {
    "accuracy.toml": (accuracy.ACCURACY_FILE, lambda path: accuracy.load_targets(path), accuracy._load_targets),
    "performance.toml": (performance.PERFORMANCE_FILE, performance.load_performance_targets,
                         performance.load_performance_targets),
    "profiles.toml": (profiles.PROFILES_FILE, profiles.load_profiles, profiles.load_profiles),
    "audit.toml": (audit.AUDIT_FILE, audit.load_audit_config, audit.load_audit_config),
    "regression.toml": (regression.TOLERANCES_FILE, regression.load_tolerances, None),
    "label_floors.toml": (label_floors.FLOORS_FILE, label_floors.load_label_floors, label_floors.load_label_floors),
    "chips.toml": (chips.DEVICES_FILE, chips.load_devices, chips.load_devices),
    "precisions.toml": (policy.PRECISIONS_FILE, policy.load_precisions, policy.load_precisions),
}

# what an edit may put where a value was: other types, signs, magnitudes, non-finite and truncated numbers
HOSTILE_VALUES = ["inf", "-inf", "nan", "1e400", "-1", "0", "0.0", "-0.5", "1e-300", "1e300", "10.9",
                  "99999999999999999999", "9223372036854775807", "-9223372036854775808", "true", "false", '"x"', '""',
                  "[]", "{}", "[1, 2]", '["a", 1]', "{ a = 1 }", "1979-05-27", "0x10", "1_000", "+3", "2.", "'''"]


def _toml_numbers_usable(node) -> bool:
    """An independent statement of what the suite's data files may hold as numbers: finite floats no larger than
    FLOAT_MAGNITUDE and no nearer to zero than its inverse, integers of TOML's 64-bit range."""
    if isinstance(node, dict):
        return all(_toml_numbers_usable(v) for v in node.values())
    if isinstance(node, list):
        return all(_toml_numbers_usable(v) for v in node)
    if isinstance(node, bool):
        return True
    if isinstance(node, int):
        return -(1 << 63) <= node < (1 << 63)
    if isinstance(node, float):
        return math.isfinite(node) and (node == 0 or 1 / FLOAT_MAGNITUDE <= abs(node) <= FLOAT_MAGNITUDE)
    return True


@st.composite
def _edited(draw, text: str) -> bytes:
    """``text`` after 1 to 3 edits: a value replaced, a line deleted, duplicated or cut short, or a byte changed."""
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(lines) - 1))
        line = lines[at]
        action = draw(st.sampled_from(["value", "value", "value", "delete", "duplicate", "cut"]))
        if action == "value" and "=" in line and not line.lstrip().startswith("#"):
            key, _, rest = line.partition("=")
            lines[at] = f"{key}= {draw(st.sampled_from(HOSTILE_VALUES))}"
            if rest.rstrip().endswith(("{", "[")):  # a value that continued on later lines: those go too
                while at + 1 < len(lines) and lines[at + 1].strip() and "=" not in lines[at + 1]:
                    del lines[at + 1]
        elif action == "delete":
            del lines[at]
        elif action == "duplicate":
            lines.insert(at, line)
        elif action == "cut":
            lines[at] = line[:draw(st.integers(0, max(len(line) - 1, 0)))]
        if not lines:
            lines = [""]
    data = bytearray("\n".join(lines).encode())
    if data and draw(st.booleans()):
        at = draw(st.integers(0, len(data) - 1))
        data[at] = draw(st.sampled_from([0x00, 0x22, 0x3D, 0x5B, 0x5D, 0x7B, 0x0A, 0xFF, 0xC3, 0x2E, 0x2D]))
    return bytes(data)


def _load(name: str, path: Path):
    _, loader, cached = TOML_FILES[name]
    if cached is not None:
        cached.cache_clear()
    try:
        return loader(path)
    finally:
        if cached is not None:
            cached.cache_clear()


@pytest.mark.parametrize("name", list(TOML_FILES))
def test_the_shipped_files_load(name):
    assert _load(name, TOML_FILES[name][0])


@pytest.mark.parametrize("name", list(TOML_FILES))
def test_an_edited_toml_file_is_accepted_or_refused_naming_it(name, tmp_path):
    path = tmp_path / name
    _check_edits(TOML_FILES[name][0].read_text(encoding="utf-8"), path, lambda: _load(name, path), name)


# a model's own tables (in its spec's tables folder), each read with the suite's: model, table, the loader reading it
MODEL_TABLES = {
    "resnet50/accuracy.toml": ("resnet50", "accuracy", accuracy.load_targets),
    "widedeep/performance.toml": ("widedeep", "performance", performance.load_performance_targets),
    "bert-base/profiles.toml": ("bert-base", "profiles", profiles.load_profiles),
    "resnet50/fp8.toml": ("resnet50", "fp8", policy.load_precisions),
    "conformer/audit.toml": ("conformer", "audit", audit.load_audit_config),
}


@pytest.mark.parametrize("name", list(MODEL_TABLES))
def test_an_edited_model_table_is_accepted_or_refused_naming_it(name, tmp_path, monkeypatch):
    model, kind, loader = MODEL_TABLES[name]
    original = model_spec(model).table(kind)
    path = tmp_path / original.name
    table = ModelSpec.table
    monkeypatch.setattr(ModelSpec, "table", lambda self, k: path if (self.name, k) == (model, kind) else table(self, k))

    def load():
        _clear_caches()
        try:
            return loader()
        finally:
            _clear_caches()

    _check_edits(original.read_text(encoding="utf-8"), path, load, str(path))


def _clear_caches() -> None:
    for _, _, cached in TOML_FILES.values():
        if cached is not None:
            cached.cache_clear()
    profiles.reference_samples.cache_clear()


def _check_edits(text: str, path: Path, load, says: str) -> None:
    """Edits of ``text`` written to ``path``: each is accepted with usable numbers, or refused naming ``says``; both
    happen."""
    seen = {"refused": 0, "accepted": 0}

    @PROPERTY
    @given(data=_edited(text))
    def check(data: bytes) -> None:
        path.write_bytes(data)
        try:
            load()
        except DataFileError as exc:  # every loader's own error is one of these
            event("refused")
            seen["refused"] += 1
            assert says in str(exc), f"the refusal does not name {says}: {exc}"
            assert "Traceback" not in str(exc)
            return
        event("accepted")
        seen["accepted"] += 1
        document = tomllib.loads(data.decode("utf-8"))  # accepted: valid UTF-8 TOML
        assert _toml_numbers_usable(document), f"{says}: accepted numbers the suite cannot use:\n{data.decode()[:2000]}"

    check()
    assert seen["refused"] and seen["accepted"], f"{says}: the edits were not put to both sides: {seen}"


# -- a checkpoint's config.json ---------------------------------------------------------------------------------------
CONFIG_VALUES = st.one_of(
    st.sampled_from([-3, -1, 0, 1, 2, 7, 8, 10.9, 2.0, 1e9, 10**30, 2**63, True, False, None, "8", "", "gelu", "relu",
                     [], [8], [8, 8], [-1], [2.5], {}, {"a": 1}, float("inf"), float("nan"), 1e-300]),
    st.integers(-10, 10**12), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6))


def _tiny_widedeep(directory: Path) -> Path:
    model = load_model("widedeep", seed=3, hidden_sizes=(8,), bucket_sizes=(5,) * 26, embedding_dim=2)
    return save_checkpoint(model, directory)


def _tiny_bert(directory: Path) -> Path:
    sizes = dict(vocab_size=40, hidden_size=8, num_attention_heads=2, intermediate_size=12, max_position_embeddings=16,
                 type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12, num_hidden_layers=1)
    model = load_model("bert-base", seed=1, seq_len=16, **sizes)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"model_type": "bert", **sizes}))
    save_file({k: np.ascontiguousarray(v) for k, v in model.params.items()}, str(directory / "model.safetensors"))
    return directory


CHECKPOINTS = {"widedeep": (_tiny_widedeep, {}), "bert-base": (_tiny_bert, {"seq_len": 16})}


@st.composite
def _edited_config(draw, config: dict):
    """``config`` after 1 to 3 edits: a field set to another value or type, deleted, or an unknown field added; or the
    JSON text itself damaged."""
    config = json.loads(json.dumps(config))
    for _ in range(draw(st.integers(1, 3))):  # "same": the value written again, as it was (the file stays valid)
        action = draw(st.sampled_from(["set", "set", "set", "delete", "add", "element", "retype", "same", "same"]))
        key = draw(st.sampled_from(sorted(config))) if config else None
        if action == "set" and key is not None:
            config[key] = draw(CONFIG_VALUES)
        elif action == "delete" and key is not None:
            del config[key]
        elif action == "add":
            config[draw(st.sampled_from(["extra", "num_layers", "hidden", "torch_dtype", "architectures"]))] = \
                draw(CONFIG_VALUES)
        elif action == "retype" and key is not None:  # the same value as another JSON type: "4", 4.0, [4]
            value = config[key]
            config[key] = draw(st.sampled_from([json.dumps(value), float(value) if isinstance(value, int) else value,
                                                [value]]))
        elif action == "element" and key is not None and isinstance(config[key], list) and config[key]:
            config[key][draw(st.integers(0, len(config[key]) - 1))] = draw(CONFIG_VALUES)
    text = json.dumps(config, allow_nan=True).encode()
    if draw(st.integers(0, 4)) == 0:  # damaged bytes: cut short, or a byte replaced
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] if draw(st.booleans()) else text[:at] + draw(st.sampled_from([b"\xff", b"{", b"]", b"\x00"])) \
            + text[at + 1:]
    return config, text


@pytest.mark.parametrize("name", list(CHECKPOINTS))
def test_an_edited_config_json_is_accepted_as_stated_or_refused_naming_it(name, tmp_path):
    make, overrides = CHECKPOINTS[name]
    directory = make(tmp_path / "ckpt")
    original = json.loads((directory / "config.json").read_text())
    load_model(name, checkpoint=directory, **overrides)  # unedited, it loads
    seen = {"refused": 0, "accepted": 0}

    @PROPERTY
    @given(edit=_edited_config(original))
    def check(edit) -> None:
        config, text = edit
        (directory / "config.json").write_bytes(text)
        try:
            model = load_model(name, checkpoint=directory, **overrides)
        except CheckpointError as exc:
            event("refused")
            seen["refused"] += 1
            assert str(directory) in str(exc), f"the refusal does not name the checkpoint: {exc}"
            return
        event("accepted")
        seen["accepted"] += 1
        stated = json.loads(text)  # accepted: the JSON is whole and means what it says
        for field_name, value in stated.items():
            if hasattr(model.config, field_name):
                held = getattr(model.config, field_name)
                held = list(held) if isinstance(held, tuple) else held
                assert held == value and type(held) is type(value) or (
                    isinstance(value, list) and held == value), \
                    f"{name}: config.json says {field_name} = {value!r}, the model holds {held!r}"

    check()
    assert seen["refused"] and seen["accepted"], f"{name}: the edits were not put to both sides: {seen}"
