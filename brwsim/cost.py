"""Wall-clock cost of one speculative-decoding step: the verifier call and the drafting.

A step of a batch of B requests with a shared budget of P draft nodes runs the drafter
(one step per depth level of the forest, plus a cost per drafted node), then one
verifier call over **B + P tokens**: each request's root (the token that plain decoding
would process anyway) plus the P draft nodes. Plain decoding is the same verifier call
with B tokens and no drafter.

Verifier models:

* :class:`Roofline`: a dense decoder on one GPU. A call of n tokens reads the weights
  once and each request's KV cache once, and does 2 FLOPs per parameter per token;
  its time is ``max(bytes / bandwidth, flops / peak) + overhead``: memory-bound until
  it turns compute-bound (Williams, Waterman & Patterson, *Roofline*, CACM 2009).
  Presets for common GPUs are in :data:`GPUS`.
* :class:`MeasuredTable`: a CSV of ``tokens,ms`` measured on your own server,
  interpolated piecewise-linearly (monotone between the points).
* :class:`Constant`: the same time for any call (the tokens-per-call limit).

:class:`Drafter` adds the drafting time; :class:`CostModel` combines the two. All are
frozen dataclasses validated on construction (:class:`~brwsim.errors.UserError`). The
assumptions and where they break are in ``docs/cost.md``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import numpy as np

from brwsim.errors import UserError
from brwsim.validate import check_input_file, check_range

__all__ = ["GPU", "GPUS", "Roofline", "MeasuredTable", "Constant", "Drafter", "CostModel",
           "get_gpu", "make_cost"]


#: Documented range of every cost quantity (SI units: FLOP/s, bytes/s, bytes, seconds).
#: Outside it a step time would overflow, underflow or turn a speedup into inf/NaN
#: (``params = 1e308``, ``ms = 1e-320``); the bounds are far beyond any real hardware.
RANGES: dict[str, tuple[float, float]] = {
    "peak_flops": (1e3, 1e21), "bandwidth": (1e3, 1e18), "memory": (0.0, 1e18),
    "params": (1.0, 1e15), "bytes_per_param": (1e-3, 1e3), "kv_bytes_per_token": (0.0, 1e12),
    "context": (0.0, 1e12), "seconds": (1e-9, 1e6), "drafter": (0.0, 1e6), "tokens": (1.0, 1e12),
}


def _positive(name: str, value: Any, zero_ok: bool = False, kind: str = "seconds") -> float:
    """``value`` checked by :func:`brwsim.validate.check_range` against ``RANGES[kind]``.

    ``zero_ok`` admits an exact 0 (no overhead, no drafter) below the range's low end.
    """
    low, high = RANGES[kind]
    if zero_ok and not isinstance(value, bool) and isinstance(value, (int, float, np.number)) \
            and value == 0:
        return 0.0
    return check_range(name, value, low, high,
                       why="outside the documented range of brwsim.cost.RANGES")


@dataclass(frozen=True)
class GPU:
    """Peak dense tensor FLOP/s and memory bandwidth of one accelerator.

    Parameters
    ----------
    name : str
        Label.
    peak_flops : float
        Dense (no sparsity) BF16 tensor-core FLOP/s.
    bandwidth : float
        Memory bandwidth in bytes/s (HBM or GDDR).
    memory : float, default 0
        Memory capacity in bytes (informational; 0 = unknown).
    source : str
        Where the numbers come from.
    """

    name: str
    peak_flops: float
    bandwidth: float
    memory: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "peak_flops", _positive(f"{self.name}: peak FLOP/s", self.peak_flops, kind="peak_flops"))
        object.__setattr__(self, "bandwidth", _positive(f"{self.name}: memory bandwidth", self.bandwidth, kind="bandwidth"))
        object.__setattr__(self, "memory", _positive(f"{self.name}: memory", self.memory, zero_ok=True, kind="memory"))


#: Datasheet numbers: dense BF16 tensor FLOP/s (the sparsity figures are twice these) and
#: memory bandwidth, SXM / board variants as named.
GPUS: dict[str, GPU] = {
    # NVIDIA A100 Tensor Core GPU datasheet (2021): A100 80GB SXM, BF16 tensor 312 TFLOPS
    # (624 with sparsity), HBM2e 2,039 GB/s, 80 GB.
    "a100": GPU("A100 80GB SXM", 312e12, 2.039e12, 80e9,
                "NVIDIA A100 datasheet: BF16 tensor 312 TFLOPS dense, HBM2e 2039 GB/s"),
    # NVIDIA H100 Tensor Core GPU datasheet (2023): H100 SXM, BF16 tensor 1,979 TFLOPS with
    # sparsity = 989 dense, HBM3 3.35 TB/s, 80 GB.
    "h100": GPU("H100 SXM", 989e12, 3.35e12, 80e9,
                "NVIDIA H100 datasheet: BF16 tensor 989 TFLOPS dense (1979 sparse), HBM3 3.35 TB/s"),
    # NVIDIA H200 Tensor Core GPU datasheet (2024): H200 SXM, BF16 tensor 1,979 TFLOPS with
    # sparsity = 989 dense, HBM3e 4.8 TB/s, 141 GB.
    "h200": GPU("H200 SXM", 989e12, 4.8e12, 141e9,
                "NVIDIA H200 datasheet: BF16 tensor 989 TFLOPS dense (1979 sparse), HBM3e 4.8 TB/s"),
    # NVIDIA HGX B200 (Blackwell datasheet, 2024): per GPU FP16/BF16 tensor 4.5 PFLOPS with
    # sparsity = 2.25 dense, HBM3e 8 TB/s, 180 GB.
    "b200": GPU("B200 (HGX)", 2.25e15, 8.0e12, 180e9,
                "NVIDIA Blackwell HGX B200 datasheet: BF16 tensor 2.25 PFLOPS dense (4.5 sparse), HBM3e 8 TB/s"),
    # NVIDIA Ada GPU architecture whitepaper v2.1, table 2: GeForce RTX 4090, FP16/BF16
    # tensor with FP32 accumulate 165.2 TFLOPS dense (330.3 sparse), GDDR6X 1,008 GB/s, 24 GB.
    "rtx4090": GPU("GeForce RTX 4090", 165.2e12, 1.008e12, 24e9,
                   "NVIDIA Ada whitepaper: BF16 tensor (FP32 accumulate) 165.2 TFLOPS dense, GDDR6X 1008 GB/s"),
}


def get_gpu(name: str | GPU) -> GPU:
    """A preset of :data:`GPUS` by (case-insensitive) name, e.g. ``"h100"``; a GPU passes through."""
    if isinstance(name, GPU):
        return name
    key = str(name).lower().replace("-", "").replace(" ", "").replace("_", "")
    key = {"4090": "rtx4090", "geforcertx4090": "rtx4090"}.get(key, key)
    if key not in GPUS:
        raise UserError(f"unknown gpu {name!r}; known: {', '.join(GPUS)} (or give peak_tflops and bandwidth_tbs)")
    return GPUS[key]


@dataclass(frozen=True)
class Roofline:
    """Roofline time of one verifier call of a dense decoder.

    A call of n tokens for a batch of B requests moves ``params * bytes_per_param``
    (the weights, read once) plus ``B * context * kv_bytes_per_token`` (each request's
    KV cache, read once; a request's draft tokens share its cache) bytes, and does
    ``2 * params * n`` FLOPs. Time = max(bytes / bandwidth, flops / peak) + overhead.

    Parameters
    ----------
    params : float
        Parameters of the target model.
    gpu : GPU or str
        The accelerator (a :data:`GPUS` name or a :class:`GPU`).
    bytes_per_param : float, default 2
        2 for BF16/FP16 weights, 1 for FP8/INT8, 0.5 for 4-bit.
    kv_bytes_per_token : float, default 0
        KV-cache bytes per context token over all layers
        (2 * layers * kv_heads * head_dim * bytes per element).
    context : float, default 0
        Context length per request (tokens already in the cache).
    overhead : float, default 0
        Fixed seconds per call (kernel launches, sampling, scheduling).
    """

    params: float
    gpu: Union[GPU, str] = "h100"
    bytes_per_param: float = 2.0
    kv_bytes_per_token: float = 0.0
    context: float = 0.0
    overhead: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu", get_gpu(self.gpu))
        object.__setattr__(self, "params", _positive("params", self.params, kind="params"))
        object.__setattr__(self, "bytes_per_param", _positive("bytes_per_param", self.bytes_per_param, kind="bytes_per_param"))
        for name, kind in (("kv_bytes_per_token", "kv_bytes_per_token"), ("context", "context"),
                           ("overhead", "seconds")):
            object.__setattr__(self, name, _positive(name, getattr(self, name), True, kind))

    def bytes_moved(self, batch: Any) -> np.ndarray:
        """Bytes read by one call of a batch of ``batch`` requests."""
        return self.params * self.bytes_per_param + np.asarray(batch, np.float64) * (
            self.context * self.kv_bytes_per_token)

    def time(self, tokens: Any, batch: Any) -> np.ndarray:
        """Seconds of one call of ``tokens`` tokens for ``batch`` requests."""
        n = np.asarray(tokens, np.float64)
        memory = self.bytes_moved(batch) / self.gpu.bandwidth
        compute = 2.0 * self.params * n / self.gpu.peak_flops
        return np.maximum(memory, compute) + self.overhead

    def ridge_tokens(self, batch: int = 1) -> float:
        """Tokens per call at which the call turns compute-bound (the roofline's ridge)."""
        return float(self.bytes_moved(batch) / self.gpu.bandwidth * self.gpu.peak_flops
                     / (2.0 * self.params))

    def describe(self) -> str:
        """One line for tables and netCDF attributes."""
        return (f"roofline: {self.params:.3g} params x {self.bytes_per_param:g} B on {self.gpu.name} "
                f"({self.gpu.peak_flops / 1e12:.4g} TFLOP/s, {self.gpu.bandwidth / 1e12:.4g} TB/s), "
                f"KV {self.kv_bytes_per_token:g} B/token x context {self.context:g}, "
                f"overhead {self.overhead * 1e3:g} ms")


@dataclass(frozen=True)
class MeasuredTable:
    """A measured verifier: call time against tokens per call, interpolated.

    Piecewise-linear between the measured points (so monotone, and exact at them), the
    first point's time below it, and the last segment's slope beyond the last point
    (compute-bound calls grow linearly). The batch size does not enter: time the
    verifier at the batch size you plan for.

    Parameters
    ----------
    tokens : sequence of float
        Tokens per call, strictly increasing, >= 1.
    seconds : sequence of float
        Call times, positive and non-decreasing.
    source : str
        Where the table came from (a path).
    """

    tokens: tuple[float, ...]
    seconds: tuple[float, ...]
    source: str = ""

    def __post_init__(self) -> None:
        try:
            t = np.asarray(self.tokens, np.float64).ravel()
            s = np.asarray(self.seconds, np.float64).ravel()
        except (TypeError, ValueError):
            raise UserError(f"cost table{self._where()}: tokens and times must be numbers") from None
        if t.size != s.size or t.size < 2:
            raise UserError(f"cost table{self._where()}: needs at least two (tokens, ms) rows")
        if not (np.all(np.isfinite(t)) and np.all(np.isfinite(s))):
            raise UserError(f"cost table{self._where()}: non-finite entry")
        if np.any(t < 1) or np.any(np.diff(t) <= 0):
            raise UserError(f"cost table{self._where()}: tokens must be >= 1 and strictly increasing")
        if np.any(s <= 0) or np.any(np.diff(s) < 0):
            raise UserError(f"cost table{self._where()}: times must be positive and non-decreasing "
                            "in tokens (average repeated timings first)")
        (_, thi), (slo, shi) = RANGES["tokens"], RANGES["seconds"]
        if np.any(t > thi) or np.any(s < slo) or np.any(s > shi):
            raise UserError(f"cost table{self._where()}: tokens must be <= {thi:g} and times in "
                            f"[{slo * 1e3:g}, {shi * 1e3:g}] ms (the documented range of "
                            f"brwsim.cost.RANGES), got up to {t.max():g} tokens and times "
                            f"{s.min() * 1e3:g}..{s.max() * 1e3:g} ms")
        object.__setattr__(self, "tokens", tuple(t.tolist()))
        object.__setattr__(self, "seconds", tuple(s.tolist()))

    def _where(self) -> str:
        return f" {self.source}" if self.source else ""

    @classmethod
    def from_csv(cls, path: str | Path) -> "MeasuredTable":
        """Read a CSV with a header naming ``tokens`` and ``ms`` columns (other columns ignored)."""
        p = check_input_file(path, "cost table")       # a named pipe would block the open
        try:
            with p.open(newline="") as fh:
                rows = list(csv.reader(fh))
        except OSError as exc:
            raise UserError(f"cost table {path}: cannot read ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise UserError(f"cost table {path}: not a text CSV file") from None
        rows = [r for r in rows if r and any(c.strip() for c in r) and not r[0].lstrip().startswith("#")]
        if not rows:
            raise UserError(f"cost table {path}: empty")
        header = [c.strip().lower() for c in rows[0]]
        if "tokens" not in header or "ms" not in header:
            raise UserError(f"cost table {path}: the header must name 'tokens' and 'ms' columns, "
                            f"got {rows[0]}")
        it, im = header.index("tokens"), header.index("ms")
        tokens, ms = [], []
        for line, r in enumerate(rows[1:], start=2):
            try:
                tokens.append(float(r[it]))
                ms.append(float(r[im]))
            except (ValueError, IndexError):
                raise UserError(f"cost table {path}: row {line} is not two numbers: {r}") from None
        return cls(tuple(tokens), tuple(m / 1e3 for m in ms), str(path))

    def time(self, tokens: Any, batch: Any = 1) -> np.ndarray:
        """Seconds of one call of ``tokens`` tokens (``batch`` is ignored)."""
        t, s = np.asarray(self.tokens), np.asarray(self.seconds)
        n = np.asarray(tokens, np.float64)
        slope = (s[-1] - s[-2]) / (t[-1] - t[-2])
        inside = np.interp(n, t, s)
        return np.where(n > t[-1], s[-1] + slope * (n - t[-1]), inside) + 0.0 * np.asarray(batch)

    def describe(self) -> str:
        return (f"measured table {self.source or ''} ({len(self.tokens)} points, "
                f"{self.tokens[0]:g}..{self.tokens[-1]:g} tokens)")


@dataclass(frozen=True)
class Constant:
    """Every verifier call takes ``seconds``, whatever its size (tokens per call is the speed)."""

    seconds: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", _positive("constant call time", self.seconds))

    def time(self, tokens: Any, batch: Any = 1) -> np.ndarray:
        return np.full(np.broadcast(np.asarray(tokens), np.asarray(batch)).shape, self.seconds)

    def describe(self) -> str:
        return f"constant {self.seconds * 1e3:g} ms per call"


@dataclass(frozen=True)
class Drafter:
    """Drafting time of one step: per depth level of the forest and per drafted node.

    An EAGLE-style head (or a separate draft model) runs one batched forward per tree
    level, so a forest of depth D costs ``D * per_level``; ``per_node`` adds the work that
    grows with the nodes drafted (sampling, tree bookkeeping, a compute-bound drafter).

    Parameters
    ----------
    per_level, per_node : float, default 0
        Seconds (0: free drafting, the speed-of-light of the verifier alone).
    """

    per_level: float = 0.0
    per_node: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "per_level", _positive("drafter per_level", self.per_level, True, "drafter"))
        object.__setattr__(self, "per_node", _positive("drafter per_node", self.per_node, True, "drafter"))

    def time(self, depth: Any, nodes: Any) -> np.ndarray:
        """Seconds of drafting a forest of ``depth`` levels and ``nodes`` nodes."""
        return self.per_level * np.asarray(depth, np.float64) + self.per_node * np.asarray(nodes, np.float64)


Verifier = Union[Roofline, MeasuredTable, Constant]


@dataclass(frozen=True)
class CostModel:
    """Verifier plus drafter: the wall-clock time of one speculative step.

    Parameters
    ----------
    verifier : Roofline, MeasuredTable or Constant
    drafter : Drafter, default free drafting
    """

    verifier: Verifier
    drafter: Drafter = field(default_factory=Drafter)

    def __post_init__(self) -> None:
        if not isinstance(self.verifier, (Roofline, MeasuredTable, Constant)):
            raise UserError(f"verifier must be a Roofline, MeasuredTable or Constant, got {self.verifier!r}")
        if not isinstance(self.drafter, Drafter):
            raise UserError(f"drafter must be a Drafter, got {self.drafter!r}")

    def step_time(self, batch: Any, budget: Any, depth: Any) -> np.ndarray:
        """Seconds of one step: drafting ``budget`` nodes over ``depth`` levels, then
        verifying ``batch + budget`` tokens."""
        b = np.asarray(batch, np.float64)
        p = np.asarray(budget, np.float64)
        return self.verifier.time(b + p, b) + self.drafter.time(depth, p)

    def plain_time(self, batch: Any) -> np.ndarray:
        """Seconds of one plain decoding step of ``batch`` requests (one token each)."""
        b = np.asarray(batch, np.float64)
        return self.verifier.time(b, b)

    def describe(self) -> str:
        d = self.drafter
        return (f"{self.verifier.describe()}; drafter {d.per_level * 1e3:g} ms/level + "
                f"{d.per_node * 1e3:g} ms/node")


def _ms(name: str, value: Any, zero_ok: bool = False, kind: str = "seconds",
        scale: float = 1e-3) -> float:
    """An option in user units (ms, TFLOP/s, TB/s) times ``scale``, range-checked in SI units
    (the message names the option and its value as given)."""
    v = check_range(name, value)
    if zero_ok and v == 0:
        return 0.0
    low, high = RANGES[kind]
    check_range(name, v, low / scale, high / scale,
                why="outside the documented range of brwsim.cost.RANGES")
    return v * scale


def make_cost(*, gpu: str | None = None, params: float | None = None, bytes_per_param: float = 2.0,
              kv_bytes_per_token: float = 0.0, context: float = 0.0, overhead_ms: float = 0.0,
              peak_tflops: float | None = None, bandwidth_tbs: float | None = None,
              table: str | None = None, constant_ms: float | None = None,
              draft_level_ms: float = 0.0, draft_node_ms: float = 0.0) -> CostModel:
    """A :class:`CostModel` from flat options (the CLI's and a sweep's ``[cost]`` section).

    Exactly one verifier: ``table`` (a CSV path), ``constant_ms``, or a roofline from
    ``params`` with ``gpu`` (a preset) or ``peak_tflops`` and ``bandwidth_tbs`` (which
    override a preset's numbers).
    """
    drafter = Drafter(_ms("draft_level_ms", draft_level_ms, True, "drafter"),
                      _ms("draft_node_ms", draft_node_ms, True, "drafter"))
    chosen = [x is not None for x in (table, constant_ms, params)]
    if sum(chosen) != 1:
        raise UserError("cost: give exactly one verifier: a cost table, a constant call time, "
                        "or params (with a gpu or peak_tflops and bandwidth_tbs)")
    roofline_only = [name for name, v in (("gpu", gpu), ("peak_tflops", peak_tflops),
                                          ("bandwidth_tbs", bandwidth_tbs)) if v is not None]
    if params is None and roofline_only:
        raise UserError(f"cost: {', '.join(roofline_only)} apply to a roofline (params) only, "
                        "not to a cost table or a constant call time")
    if table is not None:
        return CostModel(MeasuredTable.from_csv(table), drafter)
    if constant_ms is not None:
        return CostModel(Constant(_ms("constant_ms", constant_ms)), drafter)
    if peak_tflops is not None or bandwidth_tbs is not None:
        base = get_gpu(gpu) if gpu is not None else None
        if base is None and (peak_tflops is None or bandwidth_tbs is None):
            raise UserError("cost: a custom GPU needs both peak_tflops and bandwidth_tbs")
        flops = _ms("peak_tflops", peak_tflops, kind="peak_flops", scale=1e12) if peak_tflops is not None else base.peak_flops
        bw = _ms("bandwidth_tbs", bandwidth_tbs, kind="bandwidth", scale=1e12) if bandwidth_tbs is not None else base.bandwidth
        device = GPU(base.name + " (modified)" if base else "custom", flops, bw)
    elif gpu is None:
        raise UserError("cost: a roofline needs a gpu (one of " + ", ".join(GPUS) + ") or "
                        "peak_tflops and bandwidth_tbs")
    else:
        device = get_gpu(gpu)
    verifier = Roofline(params, device, bytes_per_param, kv_bytes_per_token, context,
                        _ms("overhead_ms", overhead_ms, True))
    return CostModel(verifier, drafter)
