"""Counter-based randomness: every random number is a hash of (seed, node path, purpose).

A node's key is derived from its parent's key and its rank, ``child_key(k, r)``; the
numbers a node needs come from ``stream(purpose_key(k, PURPOSE), j)`` for j = 0, 1, ...
The environment is therefore a function, not a stream (docs/design.md, idea 1): any
algorithm, order or worker count sees the same tree.
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import kernel

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_ONE = np.uint64(1)
_CHILD = np.uint64(0xD1B54A32D192ED03)
_INV53 = 1.0 / 9007199254740992.0

# Purposes: one extra mix per use of a node's key.
DIST = np.uint64(0x243F6A8885A308D3)     # the node's next-token distribution
PATH = np.uint64(0x13198A2E03707344)     # the target's sampled token at the node
REGIME = np.uint64(0xA4093822299F31D0)   # context / regime variables
ROOT = np.uint64(0x082EFA98EC4E6C89)     # iteration -> root key


@kernel
def mix(x):
    """splitmix64 finaliser of ``x + golden``: a strong 64-bit bijective mixer."""
    z = x + _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@kernel
def child_key(key, rank):
    """Key of the child of rank ``rank`` (0 = most likely) of the node with ``key``."""
    return mix(key ^ mix(np.uint64(rank) * _CHILD + _ONE))


@kernel
def purpose_key(key, purpose):
    """Key of one purpose (``DIST``, ``PATH``, ``REGIME``) of a node."""
    return mix(key ^ purpose)


@kernel
def root_key(seed_key, iteration):
    """Root key of one iteration (independent trees per iteration)."""
    return mix(mix(seed_key ^ ROOT) + np.uint64(iteration) * _GOLDEN)


@kernel
def unit(key, j):
    """The j-th uniform of a stream, in (0, 1]: never 0, so its log is finite."""
    return (np.float64(mix(key + np.uint64(j) * _GOLDEN) >> _S11) + 1.0) * _INV53


@kernel
def normal(key, j):
    """A standard normal from uniforms ``2j`` and ``2j + 1`` of a stream (Box-Muller)."""
    u1 = unit(key, 2 * j)
    u2 = unit(key, 2 * j + 1)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


@kernel
def gamma_parts(shape, key):
    """Gamma(shape, 1) as (x, b): the variate is x * exp(b); the stream ``key`` is its own.

    Marsaglia & Tsang (2000) for shape >= 1; for shape < 1 the boost
    G(shape) = G(shape + 1) * U**(1/shape), whose log b = log(U) / shape is returned apart
    (0.0 for shape >= 1) so that tiny shapes need not underflow. Marsaglia & Tsang's
    squeeze decides most rounds without a logarithm. Stream indices: 0 for the
    boost, then 3i+1, 3i+2 (a normal, Box-Muller) and 3i+3 (acceptance) for round i < 64;
    the acceptance rate is above 95%, so 64 rounds are never exhausted in practice.
    """
    a = shape
    boost_log = 0.0
    if a < 1.0:
        boost_log = math.log(unit(key, 0)) / a
        a += 1.0
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    v = 1.0
    for i in range(64):
        u1 = unit(key, 3 * i + 1)
        u2 = unit(key, 3 * i + 2)
        x = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
        v = 1.0 + c * x
        if v <= 0.0:
            continue
        v = v * v * v
        u = unit(key, 3 * i + 3)
        x2 = x * x
        # the squeeze accepts a subset of the exact test's region: the same draws, fewer logs
        if u < 1.0 - 0.0331 * x2 * x2 or math.log(u) < 0.5 * x2 + d - d * v + d * math.log(v):
            break
    return d * v, boost_log


@kernel
def gamma(shape, key):
    """Gamma(shape, 1) variate; the whole stream ``key`` belongs to this one variate
    (:func:`gamma_parts`).

    Returns
    -------
    float
        The variate (0.0 only if it underflows double precision).
    """
    x, boost_log = gamma_parts(shape, key)
    return x * math.exp(boost_log)
