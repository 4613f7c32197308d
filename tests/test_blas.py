"""The models' FP32 products: the same bits on any number of threads, the whole product's within FP32 summation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from threadpoolctl import threadpool_info, threadpool_limits

from models import blas


@pytest.fixture
def threaded(monkeypatch):
    """Two threads, blocks of a few rows and no size below which a product stays whole: every product is cut."""
    monkeypatch.setattr(blas, "_threads", lambda: 2)
    monkeypatch.setattr(blas, "_PARALLEL_WORK", 0)
    return monkeypatch


def _whole(a, b):
    with threadpool_limits(limits=1, user_api="blas"):
        return np.matmul(a, b)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 70), st.integers(1, 90), st.integers(1, 70), st.sampled_from([(), (3,), (2, 2)]),
       st.sampled_from([2, 4, 7, 16]), st.integers(0, 2**32 - 1))
def test_the_bits_do_not_depend_on_the_thread_count(m, k, n, batch, block, seed):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(batch + (m, k)) * 10.0 ** rng.integers(-3, 4)).astype(np.float32)
    b = rng.standard_normal((k, n) if seed % 2 else batch + (k, n)).astype(np.float32)  # broadcast or batched
    results = []
    for threads in (1, 2, 3):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(blas, "_threads", lambda: threads)
            patch.setattr(blas, "_PARALLEL_WORK", 0)
            patch.setattr(blas, "BLOCK", block)
            results.append(blas.matmul(a, b).view(np.uint32))
    assert np.array_equal(results[0], results[1]) and np.array_equal(results[0], results[2])
    whole = _whole(a, b)
    got = results[0].view(np.float32)
    bound = 2 * k * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
    assert got.dtype == np.float32 and np.all(np.abs(got.astype(np.float64) - whole) <= bound)


def test_a_stack_of_matrices_is_numpys_call_per_matrix(threaded):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((6, 12, 64, 64)).astype(np.float32)
    b = rng.standard_normal((6, 12, 64, 32)).astype(np.float32)
    assert np.array_equal(blas.matmul(a, b).view(np.uint32), _whole(a, b).view(np.uint32))


@pytest.mark.parametrize("m, k, n", [(512, 768, 3072), (64, 576, 3136), (1, 2048, 1000), (2048, 13, 1)])
def test_model_sized_products_on_one_or_two_threads(monkeypatch, m, k, n):
    """Shapes the models run (bert's FFN, a resnet50 conv as W @ columns, the classifier, a narrow product) at the
    module's block size: the same bits on one thread and on two, written into ``out``."""
    rng = np.random.default_rng(m + n)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    results = []
    for threads in (1, 2):
        monkeypatch.setattr(blas, "_threads", lambda: threads)
        out = np.full((m, n), np.nan, np.float32)
        assert blas.matmul(a, b, out=out) is out
        results.append(out.view(np.uint32))
    assert np.array_equal(results[0], results[1])
    assert np.allclose(results[0].view(np.float32), _whole(a, b), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("a_shape, b_shape", [((4, 96, 64), (64, 48)), ((96, 64), (4, 64, 48)),
                                              ((2, 1, 96, 64), (1, 3, 64, 48)), ((3, 96, 64), (2, 1, 64, 48))])
def test_an_operand_without_the_batch_axes_is_broadcast_not_copied(threaded, a_shape, b_shape):
    """A stack times one matrix (a linear layer's weight), one matrix times a stack, and batch axes that broadcast
    within themselves: numpy's call per matrix, whatever the split."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
    assert np.array_equal(blas.matmul(a, b).view(np.uint32), _whole(a, b).view(np.uint32))


def test_other_dtypes_and_vectors_are_numpys_matmul(threaded):
    a, b = np.arange(6.0).reshape(2, 3), np.arange(3.0)
    assert np.array_equal(blas.matmul(a, b), a @ b) and blas.matmul(a, b).dtype == np.float64


def test_blas_is_back_to_its_thread_count_after_a_product(threaded):
    before = [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]
    blas.matmul(np.ones((300, 40), np.float32), np.ones((40, 300), np.float32))
    assert [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"] == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_thread_counts_are_positive_integers(bad):
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        blas.use_threads(bad)


def test_blas_threads_are_restored_whatever_order_threads_leave_the_single_threaded_section(monkeypatch):
    """Two threads in the single-threaded section, the first in leaving first: BLAS is limited once, when the first
    enters, and restored once, when the last leaves (not by the first one out, which would leave the other thread's
    blocks multi-threaded, nor to the other's saved limit of one, which would change later FP32 products)."""
    import threading

    calls = []

    class Limiter:
        def restore_original_limits(self):
            calls.append("restore")

    class Controller:
        def limit(self, limits, user_api):
            calls.append(("limit", limits, user_api))
            return Limiter()

    monkeypatch.setattr(blas, "_controller", lambda: Controller())
    first_in, second_in, first_left = threading.Event(), threading.Event(), threading.Event()
    seen = []

    def first():
        with blas.single_threaded():
            first_in.set()
            second_in.wait(10)
        first_left.set()

    def second():
        first_in.wait(10)
        with blas.single_threaded():
            second_in.set()
            first_left.wait(10)
            seen.append(list(calls))  # the first thread has left: still limited

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == [[("limit", 1, "blas")]]
    assert calls == [("limit", 1, "blas"), "restore"]


_OTHER_KERNEL = """
import json, sys
import numpy as np
from models import blas
rng = np.random.default_rng(0)
a, b = rng.standard_normal((64, 576), dtype=np.float32), rng.standard_normal((576, 448), dtype=np.float32)
with blas.single_threaded():
    product = np.matmul(a, b)
print(json.dumps({"arithmetic": blas.host_arithmetic(), "product": product.view(np.uint32).tolist()}))
"""


def _with_kernel(coretype: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    done = subprocess.run([sys.executable, "-c", _OTHER_KERNEL], capture_output=True, text=True, env=env, timeout=120,
                          cwd=Path(__file__).resolve().parents[1], check=True)
    return json.loads(done.stdout)


def test_the_host_arithmetic_names_the_blas_kernel_whose_sums_it_decides():
    """One OpenBLAS build on one machine, made to run its Sandybridge kernels (no FMA): another product of the same
    float32 operands, and another host arithmetic, so nothing keyed by it is shared between the two."""
    here = _with_kernel(None)
    if not any(api == "openblas" and kernel not in (None, "Sandybridge")
               for api, _, kernel in here["arithmetic"]["blas"].values()):
        pytest.skip(f"numpy's BLAS here cannot be told to run other kernels: {here['arithmetic']['blas']}")
    other = _with_kernel("Sandybridge")
    if other["arithmetic"] == here["arithmetic"]:
        pytest.skip("this OpenBLAS build does not follow OPENBLAS_CORETYPE (not built with DYNAMIC_ARCH)")
    assert [kernel for _, _, kernel in other["arithmetic"]["blas"].values()] == ["Sandybridge"]
    assert other["product"] != here["product"]


def test_another_packages_blas_is_not_numpys_arithmetic(monkeypatch):
    """scipy's own OpenBLAS, loaded later, is not what numpy's products call."""
    import scipy.linalg  # noqa: F401 - its BLAS loaded too

    blas._host_arithmetic.cache_clear()
    numpys = blas.host_arithmetic()["blas"]
    loaded = blas.blas_signature()
    assert len(loaded) > len(numpys) >= 1
    monkeypatch.setattr(blas, "blas_signature", lambda: {**loaded, "libother_openblas.so": ["openblas", "0", "Zen"]})
    blas._host_arithmetic.cache_clear()
    try:
        assert blas.host_arithmetic()["blas"] == numpys
    finally:
        blas._host_arithmetic.cache_clear()


def test_the_host_arithmetic_is_a_copy_each_caller_may_change():
    """A caller that edits its value (adds a field to a key) leaves every later caller's value as it was."""
    first = blas.host_arithmetic()
    first["blas"].clear()
    first["numpy_simd"].append("X")
    assert blas.host_arithmetic()["blas"] and "X" not in blas.host_arithmetic()["numpy_simd"]
