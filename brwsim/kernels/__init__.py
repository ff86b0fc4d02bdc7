"""Private numba kernels: pure functions, arrays in and arrays out.

Nothing here is public API; :mod:`brwsim.simulate` and the family classes wrap them.

Kernels that never allocate are compiled with :data:`kernel` (``cache=True`` and
``_nrt=False``): without the numba runtime they carry no reference counting, which
otherwise costs two atomic operations per array argument and call (measured: 200 -> 36
ns per tree node on Uniform(3)). Functions that allocate use plain ``nb.njit(cache=True)``.
"""

import numba as nb

kernel = nb.njit(cache=True, _nrt=False)
