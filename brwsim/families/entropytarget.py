"""EntropyTarget: geometric or Zipf laws with exactly a drawn entropy."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.bank.store import bank_entropies
from brwsim.errors import UserError
from brwsim.families.base import Component, Family, Moments, check_int
from brwsim.families.geometric import Geometric
from brwsim.families.zipf import Zipf, _zipf_moments_at
from brwsim.kernels import dist as K
from brwsim.kernels.closed import ENTROPY_VOCAB, entropy_shape_param
from brwsim.kernels.special import zipf_sum
from brwsim.lazy import xarray as xr
from brwsim.theory.laws import (
    MAX_EXACT_ATOMS,
    SpineSteps,
    geometric_atom_count,
    mixture_law,
)
from brwsim.theory.sampled import SampledLaw
from brwsim.theory.zipf_laws import ZipfLaw
from brwsim.validate import MAX_VOCAB, check_input_file

__all__ = ["EntropyTarget"]


_QUANTILE_POINTS = 4096


_ZIPF_S_MAX = 60.0


_MIN_ENTROPY = 1e-9


def _entropy_values(entropies: Any, hmax: float) -> np.ndarray:
    if hasattr(entropies, "ppf"):          # a frozen scipy.stats distribution
        u = (np.arange(_QUANTILE_POINTS) + 0.5) / _QUANTILE_POINTS
        vals = np.asarray(entropies.ppf(u), dtype=np.float64)
        if not np.all(np.isfinite(vals)):
            raise UserError("entropies: the distribution's quantiles are not finite")
        return np.clip(vals, _MIN_ENTROPY, hmax)
    vals = np.asarray(entropies, dtype=np.float64).ravel()
    if vals.size == 0 or not np.all(np.isfinite(vals)):
        raise UserError("entropies must be a non-empty array of finite values (nats)")
    if (vals < 0).any() or (vals > hmax + 1e-12).any():
        raise UserError(f"entropies must lie in [0, {hmax:.6g}] nats for this shape, "
                        f"got range [{vals.min():.6g}, {vals.max():.6g}]")
    if (vals <= 0).all():
        raise UserError("entropies are all 0: every tree would be a chain (X = P)")
    return np.clip(vals, _MIN_ENTROPY, hmax)


class EntropyTarget(Family):
    """Each node draws an entropy and gets a distribution of a given shape with exactly it.

    Parameters
    ----------
    entropies : array-like, frozen scipy.stats distribution, bank path or bank Dataset
        Entropy samples in nats (e.g. measured from a real model; each node picks one
        uniformly), or a distribution, discretised at 4096 quantile midpoints and clipped
        to the shape's range, or a bank written by ``brwsim import-logprobs`` (a path, str
        or ``os.PathLike``, or the ``xarray.Dataset``): one value per position, its
        ``entropy_lower`` where ``entropy_upper`` is infinite (bank without a vocabulary
        size) and ``(entropy_lower + entropy_upper) / 2`` otherwise
        (:func:`brwsim.bank.bank_entropies`), clipped to the shape's range
        ``[0, log(vocab)]`` (Zipf) or ``[0, inf)`` (geometric).
    shape : {"geometric", "zipf"}
        q_i = (1 - r) r**i (infinite vocabulary), or q_i proportional to i**-s over
        ``vocab`` tokens. The parameter is solved per entropy value by safeguarded
        Newton to 1e-12 relative accuracy.
    vocab : int, optional
        Vocabulary of the Zipf shape (required for it).
    """

    name = "entropytarget"
    param_kinds = {"entropies": "list"}
    example = "entropytarget(entropies=[0.5, 1.5], shape=zipf, vocab=100)"

    def __init__(self, entropies: Any, shape: str = "geometric", vocab: int | None = None) -> None:
        if shape not in ("geometric", "zipf"):
            raise UserError(f"shape must be 'geometric' or 'zipf', got {shape!r}")
        self.shape = shape
        if shape == "zipf":
            if vocab is None:
                raise UserError("shape='zipf' needs vocab")
            self.vocab = check_int("vocab", vocab, 2, MAX_VOCAB)
            hmax = math.log(self.vocab)
        else:
            self.vocab = None
            hmax = math.log(MAX_VOCAB)   # an effective vocabulary of at most 2**40 tokens
        self._source = entropies if hasattr(entropies, "ppf") else None
        if isinstance(entropies, (str, os.PathLike, xr.Dataset)):
            if not isinstance(entropies, xr.Dataset):
                self._source = entropies = str(entropies)
                if Path(entropies).exists():
                    check_input_file(entropies, "entropies: bank file")
                else:
                    raise UserError(f"entropies: no such bank file {entropies!r} (give entropy "
                                    "values in nats, a distribution such as lognorm(s=0.5), "
                                    "or a bank written by brwsim import-logprobs)")
            entropies = np.clip(bank_entropies(entropies), 0.0, hmax)
        self.entropies = _entropy_values(entropies, hmax)
        code = 0 if shape == "geometric" else 1
        vocab_i = self.vocab or 0
        hi = 1.0 - 1e-16 if code == 0 else _ZIPF_S_MAX
        self.params_per_value = np.array(
            [entropy_shape_param(code, h, vocab_i, 0.0, hi) for h in self.entropies])

    def params(self) -> dict[str, Any]:
        if isinstance(self._source, str):
            src: Any = self._source
        else:
            src = self._source if self._source is not None else self.entropies.tolist()
        out: dict[str, Any] = {"entropies": src, "shape": self.shape}
        if self.vocab is not None:
            out["vocab"] = self.vocab
        return out

    def _tempered(self, beta: float) -> np.ndarray:
        p = self.params_per_value
        return p ** beta if self.shape == "geometric" else p * beta

    def components(self, beta: float = 1.0) -> list[Component]:
        param = self._tempered(beta)
        if self.shape == "geometric":
            log_norm = np.zeros_like(param)
        else:
            log_norm = np.log([zipf_sum(self.vocab, s, 0) for s in param])
        return [Component(K.ENTROPY, ipar={ENTROPY_VOCAB: self.vocab or 0},
                          data=np.column_stack([param, log_norm]).ravel())]

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:

        param = self._tempered(beta)[rng.integers(self.entropies.size)]
        if self.shape == "geometric":
            return Geometric(param).sample_full(rng) if param > 0 else np.array([1.0])
        return Zipf(param, self.vocab).sample_full(rng)

    def top1_mean(self) -> float:
        """Mean top-1 probability over the entropy values: 1 - r (geometric) or 1 / Z(s)."""
        p = self.params_per_value
        if self.shape == "geometric":
            return float(np.mean(1.0 - p))
        return float(np.mean([1.0 / zipf_sum(self.vocab, s, 0) for s in p]))

    def spine_law(self):
        """The exact spine-step law: each distinct shape parameter's law, weighted by its share.

        Geometric values contribute their atoms, Zipf values their exact
        :class:`~brwsim.theory.zipf_laws.ZipfLaw` (up to 64 distinct values) or atoms; a law that
        would need more than :data:`~brwsim.theory.laws.MAX_EXACT_ATOMS` atoms (thousands of
        distinct values on a large vocabulary) is sampled instead.
        """

        parts = self.value_laws()
        return SampledLaw(self) if parts is None else mixture_law(*parts)

    def value_laws(self) -> tuple[list, np.ndarray] | None:
        """The exact spine-step law of each distinct shape parameter and its share, or None
        when they would need more than :data:`~brwsim.theory.laws.MAX_EXACT_ATOMS` atoms
        (computed once per instance: thousands of values' laws for a correlated family)."""
        return self.memoized("value_laws", self._value_laws)

    def _value_laws(self) -> tuple[list, np.ndarray] | None:
        values, counts = np.unique(self.params_per_value, return_counts=True)
        share = counts / counts.sum()
        if self.shape == "zipf" and values.size <= 64 and self.vocab > 65_536:
            return [ZipfLaw(v, self.vocab, mu=h, mu2=m2)
                    for v, (h, m2) in ((v, _zipf_moments_at(v, self.vocab)) for v in values)], share
        if self.shape == "zipf":
            atoms = values.size * self.vocab
        else:                                      # r = 0 is one atom (q = [1])
            atoms = sum(geometric_atom_count(v) if v > 0 else 1 for v in values)
        if atoms > MAX_EXACT_ATOMS:
            return None
        return [Geometric(v).spine_law() if self.shape == "geometric" and v > 0
                else SpineSteps.atoms([0.0], [1.0]) if self.shape == "geometric"
                else Zipf(v, self.vocab, spread=0).spine_law() for v in values], share

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:

        if self.shape == "geometric":
            m2 = [Geometric(r).moments().mu2 if r > 0 else 0.0 for r in self.params_per_value]
        else:
            m2 = [_zipf_moments_at(s, self.vocab)[1] for s in self.params_per_value]
        h = self.entropies
        return Moments(float(h.mean()), float(np.mean(m2)), h2=float((h * h).mean()))
