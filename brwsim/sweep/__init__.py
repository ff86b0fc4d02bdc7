"""Parameter sweeps: config -> tasks keyed (point, chunk) -> joblib -> shards -> results.nc.

* :mod:`~brwsim.sweep.config`: the TOML configuration, validated whole before any work.
* :mod:`~brwsim.sweep.shards`: one task's shard (a netCDF file with its checksum).
* :mod:`~brwsim.sweep.claim`: the output folder's lock, recorded configuration and clean-up.
* :mod:`~brwsim.sweep.execute`: the plan of missing tasks and their joblib/dask execution.
* :mod:`~brwsim.sweep.merge`: the streaming merge into ``results.nc``.
* :mod:`~brwsim.sweep.driver`: :func:`sweep`, which ties them together.
"""

from brwsim.sweep.driver import MixedCodeWarning, StaleInputWarning, SweepReport, sweep
from brwsim.sweep.execute import BACKENDS

__all__ = ["sweep", "SweepReport", "MixedCodeWarning", "StaleInputWarning", "BACKENDS"]
