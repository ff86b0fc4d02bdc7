"""numba's cache index under a lock (brwsim.kernels._locked): processes that save
different signatures of one function at once keep every entry, each with its own data.

Without the lock numba's read-add-write of the index loses entries and points two keys at
one data file; ``test_unlocked_saves_race`` shows that the race is real here (numba's own
save, the same processes), so the first test is not passing by luck of timing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from numba.core import caching

import brwsim.kernels  # noqa: F401  (installs the lock)

WRITERS, KEYS = 4, 40

SCRIPT = """
import os, sys, time
from numba.core import caching
if sys.argv[3] == "locked":
    import brwsim.kernels  # noqa: F401
else:
    caching.IndexDataCacheFile.save = getattr(caching.IndexDataCacheFile.save, "numba_save",
                                              caching.IndexDataCacheFile.save)
folder, me = sys.argv[1], sys.argv[2]
cache = caching.IndexDataCacheFile(folder, "f", "stamp")
while not os.path.exists(os.path.join(folder, "go")):
    time.sleep(0.001)
for i in range(%d):
    cache.save(f"{me}-{i}", f"data of {me}-{i}")
""" % KEYS


def _race(folder, how: str) -> tuple[int, int]:
    """(entries in the index, entries whose data is their own) after WRITERS processes each
    saved KEYS keys of their own into one index at once."""
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(SCRIPT), str(folder), f"w{w}",
                               how]) for w in range(WRITERS)]
    time.sleep(1.0)                          # (all started and waiting)
    (folder / "go").touch()
    assert all(p.wait(timeout=120) == 0 for p in procs)
    cache = caching.IndexDataCacheFile(str(folder), "f", "stamp")
    index = cache._load_index()
    own = sum(cache.load(k) == f"data of {k}" for k in index)
    return len(index), own


def test_concurrent_saves_keep_every_entry(tmp_path):
    assert _race(tmp_path, "locked") == (WRITERS * KEYS, WRITERS * KEYS)


@pytest.mark.slow
def test_unlocked_saves_race(tmp_path):
    """numba's unlocked save, raced the same way, loses entries (or mixes data)."""
    lost = [_race(tmp_path / str(r), "unlocked") != (WRITERS * KEYS,) * 2
            for r in range(3) if not (tmp_path / str(r)).mkdir()]
    assert any(lost)
