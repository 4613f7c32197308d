"""Deterministic speech-like inputs for the Conformer: normalised log-mel features (static, delta, delta-delta) of
synthetic utterances, and the padding mask of their subsampled frames.

No real speech corpus can be downloaded here, so the generator imitates what matters to the numerics: the spectral
structure of voiced speech (formants, a harmonic comb of a gliding pitch, spectral tilt), syllable-rate energy with
pauses, per-utterance mean/variance normalisation, and how much of each row is padding. Every sample draws from its own
random stream keyed by ``(seed, sample index)``, so the first ``n`` samples of a batch do not depend on the batch size.
"""

from __future__ import annotations

import math

import numpy as np


def speech_like(batch_size: int, seed: int, channels: int, bins: int, frames: int,
                subsampling: int = 4) -> dict[str, np.ndarray]:
    """``src`` (batch, channels, bins, frames) float32 and ``src_pad_mask`` (batch, frames // subsampling) bool.

    Log-mel-like features: formant envelopes and a mel-warped harmonic comb of a gliding pitch over syllable-rate energy
    with pauses, plus noise; static, delta and delta-delta channels, mean/variance normalised per utterance. Valid
    lengths are uniform in [40%, 100%] of the frames (multiples of ``subsampling``); the tail is 0 in src and True in
    the mask (True = padded, one entry per ``subsampling`` frames). Sample ``i`` depends only on (seed, i)."""
    steps = frames // subsampling
    src = np.zeros((batch_size, channels, bins, frames), np.float32)
    pad_mask = np.ones((batch_size, steps), bool)
    for i in range(batch_size):
        rng = np.random.default_rng([seed, i, 0xC0F])
        valid = subsampling * int(rng.integers(max(1, math.ceil(0.4 * steps)), steps + 1))
        src[i, :, :, :valid] = speech_like_features(rng, bins, valid, channels)  # (C, F, valid)
        pad_mask[i, : valid // subsampling] = False
    return {"src": src, "src_pad_mask": pad_mask}


def mel_centres(bins: int, low_hz: float = 20.0, high_hz: float = 8000.0) -> np.ndarray:
    mel = np.linspace(2595 * np.log10(1 + low_hz / 700), 2595 * np.log10(1 + high_hz / 700), bins + 2)
    return 700 * (10 ** (mel / 2595) - 1)  # (bins + 2,) Hz: band edges and centres of a triangular mel filterbank


def smooth_walk(rng, length: int, scale: float, smooth: int) -> np.ndarray:
    steps = rng.standard_normal(length + smooth)
    kernel = np.hanning(smooth + 2)[1:-1]
    walk = np.convolve(np.cumsum(steps), kernel / kernel.sum(), mode="valid")[:length]
    return scale * (walk - walk.mean()) / (walk.std() + 1e-9)


def deltas(x: np.ndarray, window: int = 2) -> np.ndarray:
    """Kaldi/ESPnet delta features along the last axis (regression over +-window frames, edges replicated)."""
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(window, window)], mode="edge")
    t = x.shape[-1]
    num = sum(n * (padded[..., window + n: window + n + t] - padded[..., window - n: window - n + t])
              for n in range(1, window + 1))
    return num / (2 * sum(n * n for n in range(1, window + 1)))


def speech_like_features(rng: np.random.Generator, bins: int, frames: int, channels: int) -> np.ndarray:
    """(channels, bins, frames) normalised log-mel (+ deltas) of a synthetic utterance."""
    edges = mel_centres(bins)
    centres, bandwidth = edges[1:-1], (edges[2:] - edges[:-2]) / 2  # (F,) Hz
    tpos = np.arange(frames)
    # Formants: three resonances gliding slowly around typical vowel values.
    formants = [(500, 250), (1500, 500), (2500, 400)]
    log_env = np.zeros((bins, frames))
    for k, (f_mean, f_spread) in enumerate(formants):
        fk = f_mean + smooth_walk(rng, frames, f_spread, 12)  # (T,)
        width = 80 + 40 * k
        log_env += (2.5 - 0.5 * k) * np.exp(-0.5 * ((centres[:, None] - fk[None, :]) / (width + bandwidth[:, None])) ** 2)
    log_env -= 1.5 * (centres[:, None] / centres[-1])  # spectral tilt
    # Voicing: a mel-warped harmonic comb of a gliding pitch, visible where harmonics are wider apart than the band.
    f0 = rng.uniform(100, 220) * np.exp(smooth_walk(rng, frames, 0.12, 20))  # (T,) Hz
    visibility = np.exp(-((bandwidth[:, None] / f0[None, :]) ** 2))  # (F, T)
    comb = 1.0 + 0.9 * visibility * np.cos(2 * np.pi * centres[:, None] / f0[None, :])
    voiced = (np.sin(2 * np.pi * tpos / rng.uniform(20, 30) + rng.uniform(0, 2 * np.pi)) > -0.3).astype(float)
    # Energy: syllable-rate modulation (~4 Hz at 100 frames/s) and pauses.
    energy = 1.5 * np.sin(2 * np.pi * tpos / rng.uniform(20, 30) + rng.uniform(0, 2 * np.pi)) + smooth_walk(rng, frames, 0.7, 30)
    for _ in range(rng.integers(0, 3)):
        start = int(rng.integers(0, max(1, frames - 20)))
        energy[start: start + int(rng.integers(8, 30))] -= 4.0
    power = np.exp(log_env + energy[None, :]) * np.where(voiced[None, :] > 0, comb, 0.6)
    logmel = np.log(power + 0.05) + 0.15 * rng.standard_normal((bins, frames))
    stack = [logmel]
    while len(stack) < channels:
        stack.append(deltas(stack[-1]))
    feats = np.stack(stack[:channels])  # (C, F, T)
    mean = feats.mean(axis=-1, keepdims=True)
    std = feats.std(axis=-1, keepdims=True) + 1e-5
    return ((feats - mean) / std).astype(np.float32)
