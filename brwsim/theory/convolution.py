"""Linear convolution of real sequences by real FFTs (``scipy.fft``).

The renewal solver (:mod:`brwsim.theory`) and convolved spine laws (:mod:`brwsim.theory.laws`)
need one operation, the full linear convolution of two float64 vectors. This is what
``scipy.signal.fftconvolve`` computes for 1-D real input (the same transforms at the same
padded length, so the same numbers), without importing ``scipy.signal``, which pulls in
``scipy.stats`` and costs about 0.4 s at start-up.
"""

from __future__ import annotations

import numpy as np
from scipy import fft as sp_fft

__all__ = ["fft_convolve"]


def fft_convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The full linear convolution ``(a * b)[k] = sum_j a[j] b[k - j]``, length ``a.size + b.size - 1``.

    Parameters
    ----------
    a, b : numpy.ndarray
        Non-empty 1-D float64 arrays.

    Returns
    -------
    numpy.ndarray
        The convolution, computed by real FFTs at the next fast length (round-off about
        1e-16 times the largest term, as ``scipy.signal.fftconvolve``).
    """
    n = a.size + b.size - 1
    size = sp_fft.next_fast_len(n, real=True)
    return sp_fft.irfft(sp_fft.rfft(a, size) * sp_fft.rfft(b, size), size)[:n]
