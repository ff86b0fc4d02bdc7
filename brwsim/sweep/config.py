"""Sweep configurations: TOML files validated up front into a :class:`SweepConfig`.

Format (natural logarithms everywhere; see ``docs/sweeps.md``)::

    [sweep]
    seed = 0                      # non-negative integer (or a decimal string for > 63 bits)
    iterations = 20000            # independent trees per parameter point
    chunk = 1000                  # iterations per task (default 1000); never the worker count
    budgets = [1, 4, 16, 64]      # or a string: "1..4096" (powers of two), "1-64", "1,4,16"
    prediction = "numerical"      # renewal-theory prediction: "numerical", "asymptotic", "none"
    title = "my sweep"            # optional
    batch = [1, 8, 64]            # optional: requests sharing each budget; a list is the
                                  # last grid dimension of every block (default 1)

    [sweep.cost]                  # optional: price each point (brwsim.cost.make_cost options)
    gpu = "h100"
    params = 8e9

    [[sweep.family]]              # one block per family kind; each becomes a netCDF group
    name = "dirichlet"
    alpha = [0.01, 0.05, 0.2]     # a list makes a grid dimension
    vocab = 1000

    [[sweep.family]]              # nested families are family strings
    name = "tempered"
    family = "zipf(s=1.2, vocab=1000)"
    T = [0.5, 1.0, 2.0]

    [[sweep.family]]              # or whole families as strings: one grid dimension "family"
    family = ["zipf(s=1.1, vocab=32000)", "peaked(a=4, b=0.5, s=1.1, vocab=32000)"]
    label = "llm_like"            # optional group name (default: the family name)

**Grid rule.** Each family declares its parameters' kinds (``Family.param_kinds``, see
:data:`brwsim.families.base.PARAM_KINDS`). A value one list level deeper than its kind
is a grid dimension named after the parameter: a list for a ``scalar`` or ``family``
parameter, a list of lists for a ``list`` (``fixed.probs``, ``mixture.weights``,
``entropytarget.entropies``) or ``families`` parameter (``mixture.families``), a list of
matrices for a ``matrix`` (``markovregime.transition``, ``empirical.bank``). Grid values
must be distinct; the points of a block are the Cartesian product of its grid dimensions
in the order the keys appear (row-major). A swept list-valued parameter's coordinate is
the JSON text of each value.

Every family of every point is built while loading, so unknown keys, wrong types and
invalid values are reported as a :class:`~brwsim.errors.UserError` naming the key path
(``sweep.family[1].alpha[2]: must be a finite number > 0, got -1``) before any work starts.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import math
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.textform import parse_budgets
from brwsim.cost import make_cost
from brwsim.engine import validate_batch, validate_budgets
from brwsim.errors import UserError
from brwsim.families import FAMILIES, Family, parse_family
from brwsim.io import file_sha256
from brwsim.policies import POLICIES, Optimal, parse_policy
from brwsim.theory.predict import check_family
from brwsim.validate import check_input_file, check_int, echo

__all__ = ["SweepConfig", "Block", "Point", "load_config", "PREDICTION_METHODS", "CONFIG_FORMAT",
           "COST_KEYS"]

#: Version of the normalised configuration (part of the hash).
CONFIG_FORMAT = 1
#: List depth of a value of each parameter kind (one more level makes a grid).
_DEPTH = {"scalar": 0, "family": 0, "list": 1, "families": 1, "matrix": 2}
PREDICTION_METHODS = ("numerical", "asymptotic", "none")
DEFAULT_CHUNK = 1000
#: Most parameter points of one sweep (every point's family is built while loading).
MAX_POINTS = 100_000
#: Most tasks (shard files) of one sweep: points x (chunks per point + 1 theory task).
MAX_TASKS = 1_000_000

_SWEEP_KEYS = ("seed", "iterations", "chunk", "budgets", "prediction", "title", "batch", "cost",
               "family", "policy")
#: Keys of a sweep's ``[sweep.cost]`` table (the options of :func:`brwsim.cost.make_cost`).
COST_KEYS = ("gpu", "params", "bytes_per_param", "kv_bytes_per_token", "context", "overhead_ms",
             "peak_tflops", "bandwidth_tbs", "table", "constant_ms", "draft_level_ms",
             "draft_node_ms")
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_LEADING_NAME = re.compile(r"(\w+) (.*)\Z", re.DOTALL)


@dataclass(frozen=True)
class Block:
    """One ``[[sweep.family]]`` table: a family kind and its grid of parameter points.

    Attributes
    ----------
    index : int
        Position of the block in the file (``sweep.family[index]``).
    label : str
        Name of the block's netCDF group.
    name : str
        Family name (``FAMILIES`` key), or ``""`` for a block of family strings.
    fixed : dict
        Parameters with one value (normalised, JSON-serialisable).
    grid : dict of str to list
        Swept parameters and their values, in file order (the dimension order).
    families : tuple of Family
        The family of every point of the block, row-major over ``grid``.
    first_point : int
        Global index of the block's first point.
    """

    index: int
    label: str
    name: str
    fixed: dict[str, Any]
    grid: dict[str, list[Any]]
    families: tuple[Family, ...]
    first_point: int
    batches: tuple[int, ...] = ()
    policies: tuple[str, ...] = ()

    def batch(self, local: int) -> int:
        """Batch size B of the block's point ``local`` (1 without a ``batch`` setting)."""
        return self.batches[local] if self.batches else 1

    def policy(self, local: int) -> str:
        """Drafting policy (string form) of the block's point ``local`` (``""``: the optimal tree)."""
        return self.policies[local] if self.policies else ""

    def key_local(self, local: int) -> int:
        """The point whose root key ``local`` uses: its family's point at the first policy
        and batch size.

        With a ``policy`` or ``batch`` grid (the block's last dimensions) the points of one
        family under every policy and batch size share their roots, so policies and batch
        sizes are compared on common random numbers.
        """
        trailing = math.prod(len(self.grid[k]) for k in ("policy", "batch") if k in self.grid)
        return local - local % trailing

    @property
    def shape(self) -> tuple[int, ...]:
        """Grid shape (one entry per swept parameter; ``()`` for a single point)."""
        return tuple(len(v) for v in self.grid.values())

    @property
    def n_points(self) -> int:
        """Number of parameter points of the block."""
        return len(self.families)

    def grid_values(self, local: int) -> dict[str, Any]:
        """Swept parameter values of the block's point ``local`` (row-major index)."""
        idx = np.unravel_index(local, self.shape) if self.grid else ()
        return {k: v[i] for (k, v), i in zip(self.grid.items(), idx)}


@dataclass(frozen=True)
class Point:
    """One parameter point: a family, its block and its global index."""

    index: int
    block: Block
    local: int
    family: Family


@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep configuration.

    Attributes
    ----------
    seed : int
        Root seed (non-negative).
    iterations, chunk : int
        Trees per point and iterations per task.
    budgets : numpy.ndarray
        Sorted distinct budgets (int64).
    prediction : str
        ``"numerical"``, ``"asymptotic"`` or ``"none"``.
    title : str
        Title of the merged dataset.
    blocks : tuple of Block
    normalized : dict
        The configuration as JSON-serialisable data (stored in the outputs).
    hash : str
        SHA-256 (hex) of the canonical JSON of ``normalized``.
    cost : SweepCost or None
        The ``[sweep.cost]`` table, parsed.
    written : frozenset of str
        The ``[sweep]`` keys the configuration itself sets (the rest of ``normalized`` are
        defaults); not part of the hash.
    source_sha256 : dict of str to str
        SHA-256 of the TOML file by path (empty for a mapping).
    """

    seed: int
    iterations: int
    chunk: int
    budgets: np.ndarray
    prediction: str
    title: str
    blocks: tuple[Block, ...]
    normalized: dict[str, Any]
    hash: str
    cost: Any = None
    written: frozenset = frozenset()
    source_sha256: Any = None

    def input_sha256(self) -> dict[str, str]:
        """SHA-256 of every file the sweep reads, by path: the TOML file, the files of
        every point's family (banks, corpora, weights) and of its policies (a draft model)."""
        out = dict(self.source_sha256 or {})
        for p in self.points():
            out.update(p.family.input_files())
        for text in {t for b in self.blocks for t in b.policies if t}:
            out.update(parse_policy(text).input_files())    # a draft model's checkpoint
        return out

    @property
    def n_points(self) -> int:
        """Total number of parameter points."""
        return sum(b.n_points for b in self.blocks)

    @property
    def n_chunks(self) -> int:
        """Tasks (chunks of iterations) per point."""
        return -(-self.iterations // self.chunk)

    def chunks(self) -> list[tuple[int, int, int]]:
        """``(chunk index, first iteration, count)`` of every chunk of a point."""
        return [(c, c * self.chunk, min(self.chunk, self.iterations - c * self.chunk))
                for c in range(self.n_chunks)]

    def points(self) -> Iterator[Point]:
        """Every point, block by block, row-major within a block."""
        for block in self.blocks:
            for local, fam in enumerate(block.families):
                yield Point(block.first_point + local, block, local, fam)

    def point_key(self, point: int) -> np.uint64:
        """64-bit root key of a point: ``SeedSequence(seed, spawn_key=(k,))``.

        k is the point itself, or with a ``batch`` grid the same family's point at the
        first batch size (:meth:`Block.key_local`).
        """
        k = int(point)
        for block in self.blocks:
            if block.first_point <= k < block.first_point + block.n_points:
                k = block.first_point + block.key_local(k - block.first_point)
                break
        ss = np.random.SeedSequence(self.seed, spawn_key=(k,))
        return ss.generate_state(1, np.uint64)[0]


def load_config(source: str | os.PathLike[str] | Mapping[str, Any] | SweepConfig) -> SweepConfig:
    """Read and validate a sweep configuration.

    Parameters
    ----------
    source : path-like, mapping or SweepConfig
        A TOML file, the mapping ``tomllib`` would return for one (``{"sweep": {...}}``),
        or an already validated configuration (returned unchanged).

    Returns
    -------
    SweepConfig

    Raises
    ------
    brwsim.errors.UserError
        For a missing or malformed file and for any unknown key, wrong type or invalid
        value, naming its key path.
    """
    if isinstance(source, SweepConfig):
        return source
    if isinstance(source, Mapping):
        return _from_mapping(source)
    if not isinstance(source, (str, os.PathLike)):
        raise UserError(f"a sweep configuration must be a TOML file path, a mapping or a "
                        f"SweepConfig, got {echo(source)}")
    path = Path(source)
    if path.exists():
        check_input_file(path, "configuration file")   # not a pipe or a device: it would block
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise UserError(f"{path}: no such configuration file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file (a TOML configuration is UTF-8 text)") from None
    except RecursionError:
        raise UserError(f"{path}: invalid TOML: nested too deeply") from None
    try:
        cfg = _from_mapping(data)
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    return replace(cfg, source_sha256={str(path): file_sha256(path)})


def _from_mapping(data: Mapping[str, Any]) -> SweepConfig:
    for key in data:
        if key != "sweep":
            raise UserError(f"{key}: unknown key (the configuration is one [sweep] table)")
    sweep = data.get("sweep")
    if not isinstance(sweep, Mapping):
        raise UserError("sweep: missing [sweep] table")
    for key in sweep:
        if key not in _SWEEP_KEYS:
            raise UserError(f"sweep.{key}: unknown key; known: {', '.join(_SWEEP_KEYS)}")
    seed = _seed(sweep.get("seed", 0))
    iterations = _positive_int("sweep.iterations", _required(sweep, "iterations"))
    chunk = min(_positive_int("sweep.chunk", sweep.get("chunk", DEFAULT_CHUNK)), iterations)
    n_chunks = -(-iterations // chunk)
    if n_chunks + 1 > MAX_TASKS:
        raise UserError(f"sweep.iterations: {iterations} iterations in chunks of {chunk} make "
                        f"{n_chunks} tasks per point, above the maximum {MAX_TASKS} tasks "
                        "(shard files) of a sweep; raise sweep.chunk or lower sweep.iterations")
    budgets = _budgets(_required(sweep, "budgets"))
    method = sweep.get("prediction", "numerical")
    if method not in PREDICTION_METHODS:
        raise UserError(f"sweep.prediction: must be one of {', '.join(PREDICTION_METHODS)}, got {echo(method)}")
    title = sweep.get("title", "")
    if not isinstance(title, str):
        raise UserError(f"sweep.title: must be a string, got {echo(title)}")
    batch = _batch(sweep["batch"]) if "batch" in sweep else None
    policies = _policies(sweep["policy"], batch) if "policy" in sweep else None
    cost, cost_norm = _cost(sweep["cost"]) if "cost" in sweep else (None, None)
    blocks = _blocks(_required(sweep, "family"), batch, policies)
    n_points = sum(b.n_points for b in blocks)
    if n_points * (n_chunks + 1) > MAX_TASKS:
        raise UserError(f"sweep: {n_points} points x {n_chunks + 1} tasks per point (chunks of "
                        f"{chunk} iterations, plus theory) exceed the maximum {MAX_TASKS} tasks "
                        "(shard files) of a sweep; raise sweep.chunk or use fewer points")
    normalized = {
        "format": CONFIG_FORMAT, "seed": str(seed), "iterations": iterations, "chunk": chunk,
        "budgets": budgets.tolist(), "prediction": method, "title": title,
        "family": [{"label": b.label, "name": b.name, "fixed": b.fixed, "grid": b.grid}
                   for b in blocks],
    }
    if batch is not None:                # absent keys keep older configurations' hashes
        normalized["batch"] = batch
    if policies is not None:
        normalized["policy"] = policies
    if cost_norm is not None:
        normalized["cost"] = cost_norm
    digest = hashlib.sha256(json.dumps(normalized, sort_keys=True).encode()).hexdigest()
    return SweepConfig(seed, iterations, chunk, budgets, method,
                       title or f"brwsim sweep over {sum(b.n_points for b in blocks)} points",
                       blocks, normalized, digest, cost, frozenset(sweep))


def _batch(value: Any) -> int | list[int]:
    """``sweep.batch``: one batch size, or a list of them (the last grid dimension of every block)."""

    values = value if isinstance(value, list) else [value]
    if not values:
        raise UserError("sweep.batch: empty list (a list makes a grid dimension: give at least one value)")
    out = []
    for i, b in enumerate(values):
        where = f"sweep.batch[{i}]" if isinstance(value, list) else "sweep.batch"
        if isinstance(b, bool) or not isinstance(b, int):
            raise UserError(f"{where}: must be a positive integer, got {b!r}")
        try:
            out.append(validate_batch(b))
        except UserError as exc:
            raise UserError(f"{where}: {_unprefixed('batch', str(exc))}") from None
        if out[-1] in out[:-1]:
            raise UserError(f"{where}: duplicate grid value {b!r}")
    return out if isinstance(value, list) else out[0]


def _cost(value: Any) -> tuple[Any, dict[str, Any]]:
    """``[sweep.cost]``: the options of :func:`brwsim.cost.make_cost`, validated by building it."""

    if not isinstance(value, Mapping):
        raise UserError("sweep.cost: must be a table, e.g. [sweep.cost] gpu = \"h100\", params = 8e9")
    for key, v in value.items():
        if key not in COST_KEYS:
            raise UserError(f"sweep.cost.{key}: unknown key; known: {', '.join(COST_KEYS)}")
        if key in ("gpu", "table"):
            if not isinstance(v, str):
                raise UserError(f"sweep.cost.{key}: must be a string, got {v!r}")
        elif isinstance(v, bool) or not isinstance(v, (int, float)):
            raise UserError(f"sweep.cost.{key}: must be a number, got {v!r}")
    try:
        cost = make_cost(**dict(value))
    except UserError as exc:
        raise UserError(f"sweep.cost: {exc}") from None
    norm = dict(sorted(value.items()))
    if "table" in norm:                  # the table's contents, not its path, define the sweep
        norm["table"] = {"tokens": list(cost.verifier.tokens), "seconds": list(cost.verifier.seconds)}
    return cost, norm


def _required(sweep: Mapping[str, Any], key: str) -> Any:
    if key not in sweep:
        raise UserError(f"sweep.{key}: missing (required)")
    return sweep[key]


def _seed(value: Any) -> int:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return check_int("sweep.seed:", value, 0)


def _positive_int(path: str, value: Any) -> int:
    return check_int(f"{path}:", value, 1)


def _budgets(value: Any) -> np.ndarray:

    if isinstance(value, str):
        try:
            value = parse_budgets(value)
        except UserError as exc:
            raise UserError(f"sweep.budgets: {_unprefixed('budgets', str(exc))}") from None
    if not isinstance(value, list):
        raise UserError(f"sweep.budgets: must be a list of positive integers or a string like "
                        f"'1..4096', got {echo(value)}")
    for i, b in enumerate(value):
        check_int(f"sweep.budgets[{i}]:", b, 1)
    try:
        return validate_budgets(value)
    except UserError as exc:
        raise UserError(f"sweep.budgets: {_unprefixed('budgets', str(exc))}") from None


def _blocks(value: Any, batch: int | list[int] | None = None,
            policies: list[str] | None = None) -> tuple[Block, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(b, Mapping) for b in value):
        raise UserError("sweep.family: must be one or more [[sweep.family]] tables")
    blocks: list[Block] = []
    first = 0
    used: set[str] = set()
    for i, table in enumerate(value):
        block = _with_batch(_with_policies(_block(i, table, first, used, MAX_POINTS - first),
                                           policies), batch)
        used.add(block.label)
        blocks.append(block)
        first += block.n_points
    return tuple(blocks)


def _block(i: int, table: Mapping[str, Any], first: int, used: set[str], room: int) -> Block:
    where = f"sweep.family[{i}]"
    label = table.get("label")
    if "name" in table:
        name, params = _family_name(where, table["name"]), {k: v for k, v in table.items()
                                                            if k not in ("name", "label")}
        fixed, grid = _split_params(where, name, params)
    else:
        name = ""
        extra = [k for k in table if k not in ("family", "label")]
        if extra or "family" not in table:
            bad = extra[0] if extra else None
            raise UserError(f"{where}{'.' + bad if bad else ''}: a block needs 'name' (a family name "
                            "and its parameters) or only 'family' (family strings)")
        fixed, grid = _family_strings(where, table["family"])
    label = _label(where, label, name or "family", used)
    n = math.prod(len(v) for v in grid.values())
    if n > room:
        shape = " x ".join(str(len(v)) for v in grid.values())
        raise UserError(f"{where}: a grid of {shape} = {n} points takes the sweep above the "
                        f"maximum {MAX_POINTS} points; split it into several sweeps")
    families = tuple(_build_points(where, name, fixed, grid))
    return Block(i, label, name, fixed, grid, families, first)


def _with_batch(block: Block, batch: int | list[int] | None) -> Block:
    """The block with its points' batch sizes; a list adds ``batch`` as its last grid dimension."""
    if batch is None:
        return block
    if "batch" in block.grid or "batch" in block.fixed:
        raise UserError(f"sweep.family[{block.index}]: a family parameter named 'batch' clashes "
                        "with sweep.batch")
    if not isinstance(batch, list):
        return Block(block.index, block.label, block.name, block.fixed, block.grid, block.families,
                     block.first_point, (batch,) * block.n_points, block.policies)
    families = tuple(f for f in block.families for _ in batch)
    pols = tuple(p for p in block.policies for _ in batch)
    return Block(block.index, block.label, block.name, block.fixed, {**block.grid, "batch": batch},
                 families, block.first_point, tuple(b for _ in block.families for b in batch), pols)


def _with_policies(block: Block, policies: list[str] | None) -> Block:
    """The block with a ``policy`` grid dimension after its parameters (before ``batch``)."""
    if policies is None:
        return block
    if "policy" in block.grid or "policy" in block.fixed:
        raise UserError(f"sweep.family[{block.index}]: a family parameter named 'policy' clashes "
                        "with [[sweep.policy]]")
    n = block.n_points * len(policies)
    if block.first_point + n > MAX_POINTS:
        raise UserError(f"sweep.family[{block.index}]: {block.n_points} points x {len(policies)} "
                        f"policies take the sweep above the maximum {MAX_POINTS} points")
    parsed = [parse_policy(p) for p in policies]
    optimal = repr(parse_policy("optimal()"))
    for family in block.families:          # as simulate() does, before anything is written
        for text, policy in zip(policies, parsed):
            try:
                if not getattr(family, "batched", False):
                    policy.check(family.spec())
                elif repr(policy) != optimal:
                    policy.check_batched(family)
            except UserError as exc:
                raise UserError(f"sweep.family[{block.index}] {family!r} with policy {text}: "
                                f"{exc}") from None
    return Block(block.index, block.label, block.name, block.fixed,
                 {**block.grid, "policy": list(policies)},
                 tuple(f for f in block.families for _ in policies), block.first_point,
                 policies=tuple(p for _ in block.families for p in policies))


def _policies(value: Any, batch: int | list[int] | None) -> list[str]:
    """``[[sweep.policy]]`` tables: each a policy name and its parameters, a list making a grid.

    Returns the distinct policies' string forms in file order (row-major within a table):
    the values of every block's ``policy`` dimension.
    """
    if not isinstance(value, list) or not value or not all(isinstance(t, Mapping) for t in value):
        raise UserError("sweep.policy: must be one or more [[sweep.policy]] tables, e.g. "
                        "name = \"dynamic\", depth = [4, 6, 8], topk = 10")
    out: list[str] = []
    for i, table in enumerate(value):
        where = f"sweep.policy[{i}]"
        name = table.get("name")
        if not isinstance(name, str) or name.lower() not in POLICIES:
            raise UserError(f"{where}.name: unknown policy {echo(name)}; known: "
                            f"{', '.join(sorted(POLICIES))}")
        cls = POLICIES[name.lower()]
        allowed = list(inspect.signature(cls).parameters)
        axes: list[tuple[str, list[Any]]] = []
        for key, v in table.items():
            if key == "name":
                continue
            if key not in allowed:
                raise UserError(f"{where}.{key}: unknown key; {cls.name} takes {', '.join(allowed) or 'no parameters'}")
            swept = _depth(v) > _DEPTH[cls.param_kinds.get(key, "scalar")]
            if swept and not v:
                raise UserError(f"{where}.{key}: empty list (a list makes a grid dimension: give "
                                "at least one value)")
            axes.append((key, list(v) if swept else [v]))
        for combo in itertools.product(*(vals for _, vals in axes)):
            kwargs = {k: c for (k, _), c in zip(axes, combo)}
            try:
                text = repr(cls(**kwargs))
            except (UserError, TypeError, ValueError) as exc:
                raise UserError(f"{where}: {exc}") from None
            if text in out:
                raise UserError(f"{where}: duplicate policy {text}")
            out.append(text)
            if len(out) > MAX_POINTS:
                raise UserError(f"sweep.policy: more than {MAX_POINTS} policies")
    batches = batch if isinstance(batch, list) else [batch or 1]
    if max(batches) > 1 and any(p != repr(Optimal()) for p in out):
        raise UserError("sweep.policy: drafting policies other than optimal() run one request "
                        "per tree (no sweep.batch > 1)")
    return out


def _family_name(where: str, name: Any) -> str:
    if not isinstance(name, str) or name.lower() not in FAMILIES:
        raise UserError(f"{where}.name: unknown family {echo(name)}; known: {', '.join(sorted(FAMILIES))}")
    return name.lower()


def _label(where: str, label: Any, default: str, used: set[str]) -> str:
    if label is None:
        label, k = default, 2
        while label in used:
            label, k = f"{default}_{k}", k + 1
        return label
    if not isinstance(label, str) or not _LABEL.match(label):
        raise UserError(f"{where}.label: must be an identifier (letters, digits, _), got {echo(label)}")
    if label in used:
        raise UserError(f"{where}.label: {echo(label)} is already the label of another block")
    return label


def _depth(value: Any) -> int:
    """List nesting of a TOML value (0 for a scalar or string, 1 for a flat list, ...)."""
    if not isinstance(value, list):
        return 0
    return 1 + max((_depth(v) for v in value), default=0)


def _split_params(where: str, name: str, params: Mapping[str, Any]) -> tuple[dict, dict]:
    cls = FAMILIES[name]
    allowed = list(inspect.signature(cls).parameters)
    fixed: dict[str, Any] = {}
    grid: dict[str, list[Any]] = {}
    for key, value in params.items():
        path = f"{where}.{key}"
        if key not in allowed:
            raise UserError(f"{path}: unknown key; {name} takes {', '.join(allowed)}")
        kind = cls.param_kind(key)
        depth = _depth(value)
        if depth > _DEPTH[kind]:
            grid[key] = _grid_values(path, name, key, value)
        elif kind in ("list", "matrix", "families"):
            fixed[key] = _list_value(path, name, key, value)
        else:
            fixed[key] = _scalar(path, name, key, value)
    return fixed, grid


def _family_strings(where: str, value: Any) -> tuple[dict, dict]:
    path = f"{where}.family"
    if isinstance(value, list):
        return {}, {"family": _grid_values(path, "", "family", value)}
    if not isinstance(value, str):
        raise UserError(f"{path}: must be a family string or a list of them, got {echo(value)}")
    return {"family": _parse(path, value)}, {}


def _scalar(path: str, name: str, key: str, value: Any) -> Any:
    if isinstance(value, bool):
        raise UserError(f"{path}: must be a number or a string, got a boolean")
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{path}: must be finite, got {echo(value)}")
    if isinstance(value, str):
        kind = FAMILIES[name].param_kind(key) if name else "family"
        return _parse(path, value) if kind == "family" else value
    if not isinstance(value, (int, float)):
        raise UserError(f"{path}: must be a number or a string, got {type(value).__name__} {echo(value)}")
    return value


def _grid_values(path: str, name: str, key: str, values: list[Any]) -> list[Any]:
    if not values:
        raise UserError(f"{path}: empty list (a list makes a grid dimension: give at least one value)")
    if len(values) > MAX_POINTS:
        raise UserError(f"{path}: {len(values)} grid values exceed the maximum {MAX_POINTS} "
                        "points of a sweep")
    kind = FAMILIES[name].param_kind(key) if name else "family"
    out: list[Any] = []
    seen: set[str] = set()                          # linear, not quadratic, in the grid size
    for j, v in enumerate(values):
        if _depth(v) != _DEPTH[kind] or isinstance(v, dict):
            what = {"scalar": "a number or a string", "family": "a family string",
                    "list": "a list", "families": "a list of family strings",
                    "matrix": "a list of lists"}[kind]
            raise UserError(f"{path}[{j}]: a grid value of {name or 'family'}.{key} must be "
                            f"{what} ({kind} parameter), got {echo(v)}")
        out.append(_list_value(f"{path}[{j}]", name, key, v) if _DEPTH[kind]
                   else _scalar(f"{path}[{j}]", name, key, v))
        text = json.dumps(out[-1], sort_keys=True)
        if text in seen:
            raise UserError(f"{path}[{j}]: duplicate grid value {echo(v)}")
        seen.add(text)
    if _DEPTH[kind] == 0 and len({isinstance(v, str) for v in out}) > 1:
        raise UserError(f"{path}: a grid mixes numbers and strings")
    return out


def _list_value(path: str, name: str, key: str, value: Any) -> Any:
    kind = FAMILIES[name].param_kind(key)
    if kind == "families":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UserError(f"{path}: must be a list of family strings, got {echo(value)}")
        return [_parse(f"{path}[{j}]", v) for j, v in enumerate(value)]
    if isinstance(value, str):                   # e.g. entropies = "bank.nc"
        return value
    if not isinstance(value, list):
        raise UserError(f"{path}: must be a list ({name}.{key} is a {kind} parameter), "
                        f"got {echo(value)}")
    return value


def _parse(path: str, text: str) -> str:
    """The canonical string form of a family string (validated by building it)."""
    try:
        return repr(parse_family(text))
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None


def _build_points(where: str, name: str, fixed: dict[str, Any],
                  grid: dict[str, list[Any]]) -> Iterator[Family]:
    keys = list(grid)
    for combo in itertools.product(*grid.values()):
        kwargs = {**fixed, **dict(zip(keys, combo))}
        try:
            family = _build(name, kwargs)
            check_family(family)          # exactly as ``brwsim run`` checks its family
            yield family
        except (UserError, TypeError, ValueError) as exc:
            raise _point_error(where, name, fixed, grid, kwargs, exc) from None


def _build(name: str, kwargs: dict[str, Any]) -> Family:
    if not name:
        return parse_family(kwargs["family"])
    cls = FAMILIES[name]
    sig = inspect.signature(cls)
    args = {k: _materialise(name, k, v) for k, v in kwargs.items()}
    try:
        sig.bind(**args)
    except TypeError as exc:
        raise UserError(f"{name} takes {', '.join(sig.parameters)}: {exc}") from None
    return cls(**args)


def _materialise(name: str, key: str, value: Any) -> Any:
    """Family strings of family parameters become families; everything else is as given."""
    kind = FAMILIES[name].param_kind(key)
    if kind == "families":
        return [parse_family(v) for v in value]
    if kind == "family":
        return parse_family(value)
    return value


def _point_error(where: str, name: str, fixed: dict, grid: dict, kwargs: dict,
                 exc: Exception) -> UserError:
    """Name the key (and grid index) an error of a family constructor is about."""
    msg = str(exc)
    m = _LEADING_NAME.match(msg)
    if m and m.group(1) in grid:
        key = m.group(1)
        return UserError(f"{where}.{key}[{grid[key].index(kwargs[key])}]: {m.group(2)}")
    at = ", ".join(f"{k}={_short(kwargs[k])}" for k in grid)
    at = f" (at {at})" if at else ""
    if m and m.group(1) in fixed:
        return UserError(f"{where}.{m.group(1)}: {m.group(2)}{at}")
    return UserError(f"{where}: {msg}{at}")


def _unprefixed(name: str, msg: str) -> str:
    """``msg`` without a leading ``name`` (``"budgets: x"``, ``"budgets must ..."`` -> ``"must ..."``)."""
    for lead in (f"{name}: ", f"{name} "):
        if msg.startswith(lead):
            return msg[len(lead):]
    return msg


def _short(v: Any) -> str:
    text = repr(v) if isinstance(v, (str, list)) else f"{v:g}" if isinstance(v, float) else str(v)
    return text if len(text) <= 40 else text[:37] + "..."
