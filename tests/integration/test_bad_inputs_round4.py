"""Bad inputs and faults of issue 40 (items 3 to 7): checkpoint configs, memory bombs refused
by what they declare, outputs (symbolic links, empty paths, stale temporary files, a full
stdout), stale sweep resumes and bank checksums, and inputs accepted but wrong.

The harness is ``test_bad_inputs.py``'s: one ``brwsim: error:`` line, exit status 2, nothing
left behind. Memory bombs run the command in a child process under an address-space limit
(``RLIMIT_AS``), so a regression fails the test instead of taking the machine down.
"""

from __future__ import annotations

import json
import math
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from brwsim import Transformer, UserError
from brwsim.cli.common import bound_check
from brwsim.cli.plan import edge_notes
from tests.integration.test_bad_inputs import (
    FAST_RUN,
    FIXTURES,
    ROOT,
    SMALL,
    _commands,
    api_error,
    listing,
    one_line_error,
    without_compile_notice,
)
from tests.integration.test_bad_inputs_files import watchdog

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from tinyckpt import write_gpt2  # noqa: E402

#: Address space of a child running a memory bomb: room for Python, numpy, numba and
#: netCDF, far below what any bomb here declares.
LIMIT = 6 << 30


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def run_limited(argv: list, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """``brwsim argv`` in a child under :data:`LIMIT` of address space."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "brwsim.cli", *map(str, argv)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env,
                          preexec_fn=_limited)


def limited_error(argv: list, cwd: Path, *needles: str) -> str:
    """:func:`run_limited`: status 2, one error line holding every needle, nothing left."""
    before = listing(cwd)
    res = run_limited(argv, cwd)
    lines = without_compile_notice(res.stderr)
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("brwsim: error: "), res.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert listing(cwd) == before
    return lines[0]


# --- 3. checkpoint config.json ---------------------------------------------------------------

def _config_text(folder: Path, edit) -> Path:
    write_gpt2(folder, seed=1)
    cfg = json.loads((folder / "config.json").read_text())
    text = edit(cfg)
    (folder / "config.json").write_text(text if isinstance(text, str) else json.dumps(cfg))
    return folder


@pytest.mark.parametrize("edit,needle", [
    (lambda c: c.update(model_type=["gpt2"]), "config key 'model_type' = ['gpt2'] is not a string"),
    (lambda c: c.update(model_type={"a": 1}), "config key 'model_type' = {'a': 1} is not a string"),
    (lambda c: c.update(activation_function=["gelu"]),
     "config key 'activation_function' = ['gelu'] is not a string"),
    (lambda c: c.update(activation_function={"x": 1}), "'activation_function' = {'x': 1}"),
    (lambda c: json.dumps(c).replace('"n_layer": 2', '"n_layer": ' + "9" * 5000), "not JSON"),
    (lambda c: c.update(n_embd=int("9" * 4000)), "config key 'n_embd' = 999"),
    (lambda c: c.update(layer_norm_epsilon=int("9" * 400)), "'layer_norm_epsilon' = 999"),
], ids=["model-type-list", "model-type-dict", "activation-list", "activation-dict",
        "5000-digits", "4000-digits", "400-digit-float"])
def test_config_values_of_the_wrong_kind(capsys, tmp_path, edit, needle):
    folder = _config_text(tmp_path / "ck", edit)
    err = one_line_error(capsys, ["run", "--family", f"transformer(path={folder})", *FAST_RUN,
                                  "--no-out"], tmp_path, needle)
    assert str(folder) in err


def test_config_that_is_a_named_pipe(capsys, tmp_path):
    folder = tmp_path / "ck"
    write_gpt2(folder, seed=1)
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")
    with watchdog(60):
        one_line_error(capsys, ["run", "--family", f"transformer(path={folder})", *FAST_RUN,
                                "--no-out"], tmp_path, "named pipe")


# --- 4. memory bombs, refused by what they declare --------------------------------------------

def test_config_linked_to_dev_zero(tmp_path):
    folder = tmp_path / "ck"
    write_gpt2(folder, seed=1)
    (folder / "config.json").unlink()
    (folder / "config.json").symlink_to("/dev/zero")
    limited_error(["run", "--family", f"transformer(path={folder})", *FAST_RUN, "--no-out"],
                  tmp_path, "character device")


def test_huge_config_file_is_refused_by_its_size(capsys, tmp_path):
    folder = tmp_path / "ck"
    write_gpt2(folder, seed=1)
    with open(folder / "config.json", "r+b") as fh:
        fh.truncate(1 << 30)                                    # sparse: 1 GiB of nothing
    one_line_error(capsys, ["run", "--family", f"transformer(path={folder})", *FAST_RUN,
                            "--no-out"], tmp_path, "is 1 GiB, above the 16 MiB")


def _sparse_safetensors(path: Path, name: str, shape: tuple[int, ...]) -> int:
    """A safetensors file whose header declares one float32 tensor of ``shape``, its data
    a hole (a sparse file); returns the declared bytes."""
    nbytes = math.prod(shape) * 4
    header = json.dumps({name: {"dtype": "F32", "shape": list(shape),
                                "data_offsets": [0, nbytes]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as fh:
        fh.write(len(header).to_bytes(8, "little") + header)
        fh.truncate(8 + len(header) + nbytes)
    return nbytes


def test_safetensors_declaring_16_gib(tmp_path):
    folder = tmp_path / "ck"
    write_gpt2(folder, seed=1)
    _sparse_safetensors(folder / "model.safetensors", "transformer.wte.weight", (1 << 31, 2))
    limited_error(["run", "--family", f"transformer(path={folder})", *FAST_RUN, "--no-out"],
                  tmp_path, "16 GiB declared", "has shape (2147483648, 2)")


def test_safetensors_declaring_more_than_the_file_holds(capsys, tmp_path):
    folder = tmp_path / "ck"
    write_gpt2(folder, seed=1)
    path = folder / "model.safetensors"
    _sparse_safetensors(path, "transformer.wte.weight", (257, 32))
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - 4)
    one_line_error(capsys, ["run", "--family", f"transformer(path={folder})", *FAST_RUN,
                            "--no-out"], tmp_path, "declares 32.1 KiB")


def test_sparse_prompts_file_of_1_gib(tmp_path):
    prompts = tmp_path / "prompts.txt"
    with open(prompts, "wb") as fh:
        fh.truncate(1 << 30)
    limited_error(["capture", "target", prompts, "--out", tmp_path / "b.nc", "--quiet"],
                  tmp_path, "is 1 GiB, above the 64 MiB")
    limited_error(["run", "--family", f"transformer(path=target, prompts={prompts})",
                   *FAST_RUN, "--no-out"], tmp_path, "is 1 GiB")


def _netcdf_bomb(path: Path, run: bool) -> None:
    """A netCDF file of a few KiB declaring a dimension of 2**34 (chunks never written)."""
    import netCDF4

    with netCDF4.Dataset(path, "w") as nc:
        nc.source = "brwsim test"
        if run:
            nc.createDimension("budget", 2)
            nc.createDimension("iteration", 1 << 34)
            nc.createVariable("budget", "i8", ("budget",))[:] = [1, 2]
            nc.createVariable("accepted", "i4", ("budget", "iteration"), chunksizes=(1, 1024))
        else:
            nc.createDimension("position", 1 << 34)
            nc.createDimension("rank", 2)
            nc.createVariable("probs", "f8", ("position", "rank"), chunksizes=(1024, 2))
            nc.createVariable("tail_mass", "f8", ("position",), chunksizes=(1024,))


@pytest.mark.parametrize("command", ["bank-stats", "empirical", "plan-bank", "inspect", "plot"])
def test_netcdf_declaring_a_2_34_dimension(tmp_path, command):
    path = tmp_path / "bomb.nc"
    _netcdf_bomb(path, run=command in ("inspect", "plot"))
    assert path.stat().st_size < 1 << 20
    argv = {"bank-stats": ["bank-stats", path, "--budgets", "1,4"],
            "empirical": ["run", "--family", f"empirical(bank={path})", *FAST_RUN, "--no-out"],
            "plan-bank": ["plan", "--bank", path, "--params", "8e9", "--batch", "1",
                          "--budgets", "1,4", "--iterations", "2", "--quiet"],
            "inspect": ["inspect", path],
            "plot": ["plot", path, "--out", tmp_path / "f.png"]}[command]
    limited_error(argv, tmp_path, "declares", "of length 17179869184")


# --- 5. outputs ---------------------------------------------------------------------------------

WRITERS = ["run", "import-logprobs", "plot", "plan", "export-acceptance", "bank-stats"]


@pytest.mark.parametrize("command", [*WRITERS, "capture"])
def test_out_onto_a_symbolic_link_is_refused(capsys, tmp_path, command):
    target = tmp_path / "target.nc"
    target.write_bytes(b"precious")
    link = tmp_path / ("o.png" if command in ("plot", "bank-stats") else "o.nc")
    link.symlink_to(target)
    if command == "capture":
        prompts = tmp_path / "p.txt"
        prompts.write_text("hello\n")
        argv = ["capture", "target", prompts, "--out", link, "--tokens", "2", "--quiet"]
    else:
        argv = _commands(tmp_path, link)[command]
    capsys.readouterr()                   # a first compilation's notice is not the error
    one_line_error(capsys, argv, tmp_path, "is a symbolic link")
    assert link.is_symlink() and target.read_bytes() == b"precious"


@pytest.mark.parametrize("command", [*WRITERS, "capture", "sweep"])
def test_empty_out_is_refused(capsys, tmp_path, command):
    if command == "capture":
        prompts = tmp_path / "p.txt"
        prompts.write_text("hello\n")
        argv = ["capture", "target", prompts, "--out", "", "--tokens", "2", "--quiet"]
    else:
        argv = _commands(tmp_path, Path("PLACEHOLDER"))[command]
        argv = ["" if str(a) == "PLACEHOLDER" else a for a in argv]
    capsys.readouterr()
    one_line_error(capsys, argv, tmp_path, "empty path")


def test_stale_temporary_of_a_killed_write_is_removed(tmp_path):
    """A writer SIGKILLed inside its atomic write leaves ``.a.json.<host>-<pid>-<rand>.tmp``;
    the next write of a.json removes it (and keeps a live writer's)."""
    code = ("import sys, time\nfrom brwsim.io import atomic_path\n"
            "with atomic_path(sys.argv[1]) as tmp:\n"
            "    tmp.write_text('half')\n    print(tmp, flush=True)\n    time.sleep(600)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "a.json")],
                             stdout=subprocess.PIPE, text=True, env=env)
    tmp = Path(child.stdout.readline().strip())
    assert tmp.exists() and tmp.name.startswith(".a.json.")
    child.kill()
    child.wait()
    from brwsim.io import atomic_path
    with atomic_path(tmp_path / "b.json") as other:      # another name: not touched
        other.write_text("{}")
    assert tmp.exists()
    res = subprocess.run([sys.executable, "-m", "brwsim.cli", "export-acceptance", "--family",
                          SMALL, "--budget", "4", "--iterations", "2", "--out", "a.json"],
                         cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]


def test_export_acceptance_into_a_full_stdout_leaves_no_file(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-m", "brwsim.cli", "export-acceptance",
                              "--family", SMALL, "--budget", "4", "--iterations", "2",
                              "--out", "a.json"], cwd=tmp_path, stdout=full, stderr=subprocess.PIPE,
                             text=True, env=env, timeout=300)
    lines = without_compile_notice(res.stderr)
    assert res.returncode == 2, res.stderr[-2000:]
    assert lines == ["brwsim: error: writing stdout: No space left on device"], lines
    assert listing(tmp_path) == []


# --- 6. stale resumes and bank checksums --------------------------------------------------------

def _bank(path: Path, source: str = "chat.jsonl") -> Path:
    from brwsim.cli import main

    assert main(["import-logprobs", str(FIXTURES / source), "--out", str(path)]) == 0
    return path


def test_a_bank_edited_through_netcdf_is_refused(capsys, tmp_path):
    import netCDF4

    bank = _bank(tmp_path / "bank.nc")
    capsys.readouterr()
    with netCDF4.Dataset(bank, "r+") as nc:          # netCDF recomputes its Fletcher-32
        probs = nc["probs"][:]
        probs[0, 0] = np.nextafter(probs[0, 0], 0)
        nc["probs"][:] = probs
    needle = "do not match their recorded SHA-256"
    one_line_error(capsys, ["bank-stats", bank, "--budgets", "1,4"], tmp_path, needle)
    one_line_error(capsys, ["plan", "--bank", bank, "--params", "8e9", "--batch", "1",
                            "--budgets", "1,4", "--iterations", "2", "--quiet"], tmp_path, needle)
    from brwsim import Empirical
    api_error(lambda: Empirical(path=str(bank)), needle)


def test_a_bank_with_a_flipped_byte_is_refused(capsys, tmp_path):
    bank = _bank(tmp_path / "bank.nc")
    capsys.readouterr()
    import xarray as xr

    with xr.open_dataset(bank) as ds:
        value = float(ds["probs"].values[0, 0])
    data = bytearray(bank.read_bytes())
    at = bytes(data).find(np.float64(value).tobytes())
    assert at > 0
    data[at + 3] ^= 0x10
    bank.write_bytes(bytes(data))
    one_line_error(capsys, ["bank-stats", bank, "--budgets", "1,4"], tmp_path)


@pytest.mark.slow
def test_a_resume_after_a_bank_changed_redoes_its_shards(tmp_path):
    from brwsim import sweep
    from brwsim.sweep import StaleInputWarning

    bank = _bank(tmp_path / "bank.nc")
    toml = tmp_path / "s.toml"
    toml.write_text(f'[sweep]\niterations = 4\nchunk = 2\nbudgets = [1, 2]\nprediction = "none"\n'
                    f'[[sweep.family]]\nname = "empirical"\npath = "{bank}"\n')
    first = sweep(toml, tmp_path / "sw")
    assert first.run == 3
    bank.unlink()
    _bank(bank, "varying_k.jsonl")                  # same path, other bytes
    with pytest.warns(StaleInputWarning, match=r"3 shards .*bank\.nc changed"):
        again = sweep(toml, tmp_path / "sw")
    assert again.run == 3 and again.reused == 0 and again.discarded == 3
    with _no_warning():
        third = sweep(toml, tmp_path / "sw")
    assert third.run == 0 and third.reused == 3


class _no_warning:
    def __enter__(self):
        import warnings

        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("error", UserWarning)

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


# --- 7. accepted but wrong ----------------------------------------------------------------------

def test_prompt_and_prompts_together_are_refused(capsys, tmp_path):
    api_error(lambda: Transformer("target", prompt="x", prompts="code"), "not both")
    one_line_error(capsys, ["run", "--family", "transformer(path=target, prompt='x', prompts=code)",
                            *FAST_RUN, "--no-out"], tmp_path, "give prompt or prompts, not both")


def test_capture_top_k_above_the_vocabulary_is_refused(capsys, tmp_path):
    vocab = Transformer("target", prompt="x").vocab_size
    capsys.readouterr()
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello\n")
    one_line_error(capsys, ["capture", "target", prompts, "--out", tmp_path / "b.nc",
                            "--tokens", "2", "--quiet", "--top-k", str(vocab + 1)], tmp_path,
                   f"top_k must be at most the model's vocabulary of {vocab} tokens, got {vocab + 1}")


def test_bound_check_allows_a_rounding_tie():
    bound = 0.98
    assert bound_check(math.nextafter(bound, 2), 0.0, bound) == "below"
    assert bound_check(bound + 55 * math.ulp(bound), 0.0, bound) == "below"
    assert bound_check(bound * (1 + 1e-9), 0.0, bound) == "ABOVE (bug)"
    assert bound_check(bound * (1 + 1e-9), 1e-9, bound) == "within SE"


@pytest.mark.parametrize("n", [42, 49, 50])
def test_uniform_fixed_at_p1_is_not_above_its_bound(capsys, n):
    """E[X|T] = 1/n = the bound at P = 1 (one node, no choice); at n = 42 the two came out
    55 ulps apart and the table said "ABOVE (bug)"."""
    from brwsim.cli import main

    probs = ", ".join([repr(1 / n)] * n)
    assert main(["run", "--family", f"fixed(probs=[{probs}])", "--budgets", "1",
                 "--iterations", "4", "--quiet", "--no-out"]) == 0
    out = capsys.readouterr().out
    assert "ABOVE (bug)" not in out and "below" in out, out


def test_plan_says_when_p_star_sits_at_an_edge(capsys, tmp_path):
    assert edge_notes([1, 4], [8, 2], [2, 4, 8]) == [
        "note: B=1: P* = 8 is the largest of --budgets; the optimum may lie beyond it "
        "(offer larger budgets)",
        "note: B=4: P* = 2 is the smallest of --budgets; the optimum may lie below it "
        "(offer smaller budgets)"]
    assert edge_notes([1], [4], [2, 4, 8]) == [] and edge_notes([1], [0], [2, 4]) == []
    from brwsim.cli import main

    assert main(["plan", "--family", SMALL, "--params", "8e9", "--batch", "1",
                 "--budgets", "1,2", "--iterations", "4", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "P* = 2 is the largest of --budgets; the optimum may lie beyond it" in out, out
