"""The sweep driver's shard writer: every shard on disk when it closes, in order, a failed
write raised in the caller's thread, queued shards written on an error too."""

from __future__ import annotations

import numpy as np
import pytest

from brwsim.sweep import shardfile
from brwsim.errors import UserError
from brwsim.sweep.shardfile import Shard, ShardWriter, Variable, read_shard_file, seal


def _shard(i: int) -> Shard:
    return seal(Shard({"x": Variable(("budget",), np.arange(3.0) + i)},
                      {"budget": np.array([1, 2, 4])}, {"i": i}))


def test_every_shard_is_on_disk_when_the_writer_closes(tmp_path):
    with ShardWriter() as writer:
        for i in range(6):
            writer.put(_shard(i), tmp_path / f"s{i}.nc")
    for i in range(6):
        back = read_shard_file(tmp_path / f"s{i}.nc")
        np.testing.assert_array_equal(back["x"], np.arange(3.0) + i)
        assert back.attrs["i"] == i
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"s{i}.nc" for i in range(6)]


def test_a_failed_write_is_raised_in_the_caller_and_the_later_ones_are_skipped(tmp_path,
                                                                               monkeypatch):
    real = shardfile.write_shard

    def full_disk_at_one(shard, path):
        if shard.attrs["i"] == 1:
            raise UserError("writing s1.nc: no space left on device")
        real(shard, path)

    monkeypatch.setattr(shardfile, "write_shard", full_disk_at_one)
    with pytest.raises(UserError, match="no space left"):
        with ShardWriter() as writer:
            for i in range(3):
                writer.put(_shard(i), tmp_path / f"s{i}.nc")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s0.nc"]
    with pytest.raises(UserError, match="no space left"):       # put after the failure
        writer.put(_shard(3), tmp_path / "s3.nc")


def test_leaving_on_an_error_writes_the_queued_shards_and_keeps_the_error(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with ShardWriter() as writer:
            for i in range(3):
                writer.put(_shard(i), tmp_path / f"s{i}.nc")
            raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s0.nc", "s1.nc", "s2.nc"]
