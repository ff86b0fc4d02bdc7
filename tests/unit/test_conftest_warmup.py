"""The test command's numba warm-up says what it does while it runs (issue 39)."""

from __future__ import annotations

from tests.conftest import warm_up


def test_warm_up_prints_a_start_a_heartbeat_and_each_end():
    lines: list[str] = []
    codes = warm_up(["import time; time.sleep(0.6)", "raise SystemExit(3)"], lines.append,
                    heartbeat=0.2)
    assert codes == [0, 3]
    assert lines[0].startswith("brwsim tests: compiling 2 numba kernel groups")
    assert any("still compiling" in line for line in lines)
    ends = [line for line in lines if "ready after" in line]
    assert len(ends) == 2 and "(status 3)" in ends[0] and "(status 0)" in ends[1]
