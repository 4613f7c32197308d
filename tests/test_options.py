"""Options of the main job are checked before any test runs: each bad value is a usage error (exit 4) that names the
option (or environment variable) and the value, and no test body runs."""

from __future__ import annotations

import socket
import sys

import pytest

from conformance.distributed import cluster, make_engine

try:  # imported before pytester's in-process runs, which would otherwise unload it between runs (it loads once)
    import torch
except ImportError:
    torch = None
from models import MODEL_NAMES

SUITE = """
import pathlib


def test_ran():
    pathlib.Path(__file__).with_name("ran").touch()
"""


@pytest.fixture
def suite(pytester):
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeini("[pytest]\nfilterwarnings = ignore::pytest.PytestAssertRewriteWarning\n")
    pytester.path.joinpath("xfails-dir").mkdir()
    pytester.path.joinpath("binary.txt").write_bytes(b"\xff\xfe\x00[permanent]\n")
    return pytester


BAD_OPTIONS = [
    # (id, arguments, environment, a line of the message)
    ("model-empty", ["--model", ""], {}, "*argument --model: '' has an empty model name*"),
    ("model-comma", ["--model", ","], {}, "*argument --model: ',' has an empty model name*"),
    ("model-trailing-comma", ["--model", "resnet50,"], {}, "*argument --model: 'resnet50,' has an empty model name*"),
    ("model-blank", ["--model", " "], {}, "*argument --model: ' ' has an empty model name*"),
    ("model-twice-in-list", ["--model", "resnet50,widedeep,resnet50"], {},
     "*argument --model: 'resnet50,widedeep,resnet50' names model 'resnet50' twice ('resnet50' and 'resnet50')*"),
    ("model-alias-twice-in-list", ["--model", "bert,bert-base"], {},
     "*argument --model: 'bert,bert-base' names model 'bert-base' twice ('bert' and 'bert-base')*"),
    ("model-repeated-option", ["--model", "widedeep", "--model", "conformer,widedeep"], {},
     "*--model: 'widedeep' given more than once*"),
    ("model-repeated-alias", ["--model", "resnet50-v1.5", "--model", "resnet50"], {},
     "*--model: 'resnet50' given more than once (an alias counts as the model it names)*"),
    ("xfail-file-missing", ["--xfail-file", "missing.txt"], {}, "*--xfail-file missing.txt: no such file*"),
    ("xfail-file-directory", ["--xfail-file", "xfails-dir"], {},
     "*--xfail-file xfails-dir: a directory; expected a known-failures file*"),
    ("xfail-file-unreadable", ["--xfail-file", "binary.txt"], {}, "*--xfail-file binary.txt:1: not UTF-8 text*"),
    ("threads-zero", [], {"CONFORMANCE_THREADS": "0"},
     "*environment variable CONFORMANCE_THREADS='0' is not a positive integer*"),
    ("threads-word", [], {"CONFORMANCE_THREADS": "two"},
     "*environment variable CONFORMANCE_THREADS='two' is not a positive integer*"),
    ("threads-negative", [], {"CONFORMANCE_THREADS": "-2"}, "*CONFORMANCE_THREADS='-2' is not a positive integer*"),
    ("threads-fraction", [], {"CONFORMANCE_THREADS": "1.5"}, "*CONFORMANCE_THREADS='1.5' is not a positive integer*"),
    ("threads-blank", [], {"CONFORMANCE_THREADS": " "}, "*CONFORMANCE_THREADS=' ' is not a positive integer*"),
    ("threads-superscript", [], {"CONFORMANCE_THREADS": "\u00b2"}, "*CONFORMANCE_THREADS='\u00b2' is not a positive*"),
    ("threads-huge", [], {"CONFORMANCE_THREADS": "100000"}, "*CONFORMANCE_THREADS='100000' is more threads than any*"),
    ("kernels-unknown", [], {"CONFORMANCE_KERNELS": "cuda"}, "*CONFORMANCE_KERNELS='cuda' is not a kernel path*"),
    ("samples-fraction", ["--samples", "10.5"], {},
     "*argument --samples: '10.5': expected N or MODEL=N with N a positive integer*"),
    ("samples-exponent", ["--samples", "1e9"], {}, "*argument --samples: '1e9': expected N or MODEL=N*"),
    ("samples-huge", ["--samples", "widedeep=10000000000"], {}, "*--samples: 'widedeep=10000000000'*from 1 to 1,000,000*"),
    ("samples-digits", ["--samples", "9" * 5000], {}, "*argument --samples: '9999*"),
    ("shard-reversed", ["--shard", "3/2"], {}, "*argument --shard: --shard '3/2': expected 1 <= I <= N*"),
    ("shard-huge", ["--shard", "1/1000000"], {}, "*--shard '1/1000000': expected at most 1000 shares*"),
    ("report-dir-empty", ["--report-dir", ""], {}, "*argument --report-dir: '' is not a path (empty)*"),
    ("precision-empty", ["--precision", ","], {}, "*argument --precision: ',' has an empty precision name*"),
    ("device-unknown", ["--device", "h100"], {}, "*--device h100: hardware 'cpu' has no simulated chips*"),
    ("workers-zero", ["--workers", "0"], {}, "*argument --workers: '0': expected the number of local worker processes*"),
    ("workers-word", ["--workers", "all"], {}, "*argument --workers: 'all': expected the number of local worker*"),
    ("workers-huge", ["--workers", "100000"], {}, "*argument --workers: '100000'*from 1 to 256, got 100,000*"),
    ("cluster-malformed", ["--cluster", "scheduler"], {},
     "*argument --cluster: 'scheduler': not a Dask scheduler address; expected [[]tcp://[]]HOST:PORT*"),
    ("workers-and-cluster", ["--workers", "2", "--cluster", "127.0.0.1:8786"], {},
     "*--workers 2 and --cluster tcp://127.0.0.1:8786: give one of them*"),
    ("workers-and-xdist", ["--workers", "2", "-n", "2"], {}, "*--workers 2 and pytest-xdist's -n 2: give one of them*"),
    ("cluster-and-xdist", ["--cluster", "127.0.0.1:8786", "-n", "2"], {},
     "*--cluster tcp://127.0.0.1:8786 and pytest-xdist's -n 2: give one of them*"),
    ("array-unknown", ["--array", "jax"], {}, "*argument --array: unknown array library 'jax'*expected one of: numpy, torch*"),
    ("array-device-unknown", ["--array", "torch:tpu"], {}, "*argument --array: unknown torch device 'tpu'*"),
    ("array-numpy-device", ["--array", "numpy:cuda"], {}, "*argument --array: numpy runs on the host only*"),
    ("array-with-numpy-kernels", ["--array", "torch:cpu"], {"CONFORMANCE_KERNELS": "numpy"},
     "*--array torch:cpu and CONFORMANCE_KERNELS=numpy: the numpy kernel path (the oracle) computes on numpy*"),
    ("workers-cache-dir-file", ["--workers", "2", "--cache-dir", "binary.txt"], {},
     "*--cache-dir: cache directory *binary.txt* is not a directory*"),
]


@pytest.mark.parametrize("args, env, message", [case[1:] for case in BAD_OPTIONS], ids=[case[0] for case in BAD_OPTIONS])
def test_bad_option_is_usage_error_before_any_test(suite, monkeypatch, args, env, message):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = suite.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert not (suite.path / "ran").exists()


def test_a_cluster_that_does_not_answer_is_a_usage_error_before_any_test(suite, monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = suite.runpytest("--cluster", f"127.0.0.1:{port}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--cluster tcp://127.0.0.1:{port}: no Dask scheduler answered within 1 s*"])
    assert not (suite.path / "ran").exists()


def test_a_cluster_whose_workers_run_other_sources_is_a_usage_error_before_any_test(suite, monkeypatch):
    with make_engine(workers=1) as local:
        address = local.client.scheduler.address
        monkeypatch.setattr(cluster, "suite_version", lambda: "0" * 64)  # this process's sources, as seen by the check
        result = suite.runpytest("--cluster", address)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*1 of 1 workers of the cluster at {address} run other suite sources than this "
                                 "process (version 000000000000)*install this version of the suite on them*"])
    assert not (suite.path / "ran").exists()


def test_an_array_device_that_is_not_there_is_a_usage_error_before_any_test(suite):
    if torch is None:
        pytest.skip("torch is not installed")
    if torch.cuda.is_available():
        device, says = f"cuda:{torch.cuda.device_count()}", "does not exist"
    else:
        device, says = "cuda", "no CUDA device is available to torch"
    result = suite.runpytest("--array", f"torch:{device}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--array torch:{device}: array library torch:{device}: {says}*"])
    assert not (suite.path / "ran").exists()


def test_a_missing_array_package_is_a_usage_error_naming_it(suite, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails as where it is not installed
    result = suite.runpytest("--array", "torch:cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--array torch:cpu: array library torch:cpu needs torch, which cannot be imported*"
                                 "pip install 'ipu-conformance[[]torch[]]'*"])
    assert not (suite.path / "ran").exists()


def test_empty_model_message_lists_the_models(suite):
    result = suite.runpytest("--model", "")
    assert all(name in result.stderr.str() for name in MODEL_NAMES)


@pytest.mark.parametrize("args, env", [
    (["--model", "bert", "--model", "resnet50,widedeep"], {}),
    (["--model", " resnet50 , widedeep "], {}),
    ([], {"CONFORMANCE_THREADS": "1"}),
    ([], {"CONFORMANCE_THREADS": "12"}),
    ([], {"CONFORMANCE_THREADS": ""}),  # empty: as if unset
    (["--xfail-file", "empty.txt"], {}),
    (["--array", "torch:cpu"], {}),
], ids=["models-distinct", "models-spaced", "threads-1", "threads-12", "threads-empty", "xfail-file-empty",
        "array-torch-cpu"])
def test_good_options_run(suite, monkeypatch, args, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    suite.path.joinpath("empty.txt").write_text("")
    result = suite.runpytest(*args)
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    assert (suite.path / "ran").exists()
