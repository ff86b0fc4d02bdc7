"""The first contact with ``brwsim``: bare command, ``--help``, ``-V``, a mistyped command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from brwsim.cli.parser import COMMANDS


def brwsim(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "brwsim.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize("args", [(), ("--help",), ("-h",)])
def test_bare_brwsim_prints_the_commands_and_writes_nothing(tmp_path, args):
    r = brwsim(*args, cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    for name, _, _ in COMMANDS:                    # one line per command, with its summary
        assert sum(ln.split()[:1] == [name] for ln in lines) == 1, name
    assert len(lines) < 30
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(flag):
    from brwsim import __version__

    r = brwsim(flag)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"brwsim {__version__}\n", "")


@pytest.mark.parametrize("args,needle", [
    (("runn",), "unknown command 'runn'; did you mean 'run'?"),
    (("--family", "uniform(k=2)"), "unknown option '--family' before a command"),
    (("run", "-x"), "run: unrecognized arguments: -x"),
    (("theory", "--budgets"), "theory: argument --budgets: expected one argument"),
])
def test_usage_errors_are_one_line_with_one_prefix(tmp_path, args, needle):
    r = brwsim(*args, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("brwsim: error: "), r.stderr
    assert r.stderr.count("error") == 1 and "error: brwsim" not in r.stderr and needle in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_help_version_and_unknown_commands_import_nothing_heavy():
    """``brwsim --help``, ``-V`` and a mistyped command load no numpy, numba or xarray."""
    code = ("import sys\nfrom brwsim.cli import main\n"
            "codes = [main(a) for a in ([], ['--help'], ['-V'], ['nope'], ['--x'])]\n"
            "heavy = [m for m in ('numpy', 'numba', 'xarray', 'scipy', 'matplotlib') if m in sys.modules]\n"
            "print(codes, heavy, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stderr.splitlines()[-1] == "[0, 0, 0, 2, 2] []", r.stderr


def test_the_package_names_stay_functions_after_their_submodules_load():
    """``brwsim.sweep``, ``plan``, ``simulate`` and ``generate`` are functions although each
    is also a submodule's name, whatever imported the submodule first."""
    code = ("import brwsim.sweep, brwsim.plan, brwsim.simulate, brwsim.generate, brwsim\n"
            "import inspect\n"
            "assert all(inspect.isfunction(getattr(brwsim, n)) for n in "
            "('sweep', 'plan', 'simulate', 'generate', 'bank_stats')), 'a module'\n"
            "assert all(hasattr(brwsim, n) for n in brwsim.__all__)\n"
            "assert inspect.ismodule(brwsim.bank) and inspect.isclass(brwsim.Dirichlet)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def test_argument_errors_of_every_command_import_nothing_heavy():
    """``brwsim COMMAND --bogus`` (and a missing required argument) is refused by the
    argument parser before any numpy, numba or xarray is loaded (issue 39)."""
    names = [name for name, _, _ in COMMANDS]
    code = ("import sys\nfrom brwsim.cli import main\n"
            f"codes = [main([n, '--bogus']) for n in {names!r}]\n"
            "heavy = [m for m in ('numpy', 'numba', 'xarray', 'scipy', 'matplotlib') if m in sys.modules]\n"
            "print(set(codes), heavy, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stderr.splitlines()[-1] == "{2} []", r.stderr


def test_the_light_parser_keeps_the_real_defaults_and_the_family_list():
    from brwsim.capture import DEFAULT_TOKENS, EXACT_VOCAB
    from brwsim.cli import bank, sweep
    from brwsim.sweep import BACKENDS

    assert (bank.DEFAULT_TOKENS, bank.EXACT_VOCAB) == (DEFAULT_TOKENS, EXACT_VOCAB)
    assert sweep.BACKENDS == BACKENDS
    r = brwsim("run", "--help")
    assert r.returncode == 0 and "families (name(parameters)" in r.stdout
    assert "dirichlet(" in r.stdout and "policies for --policy" in r.stdout
