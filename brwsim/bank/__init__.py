"""Banks of real next-token distributions: import, bounds, storage.

A *bank* is a netCDF file with one row per generated position of a real model: the sorted
top-k probabilities, the tail mass outside them, the sampled token's rank and bounds of the
full distribution's entropy and second log-moment. ``brwsim import-logprobs`` (or
:func:`import_logprobs`) writes one; ``empirical(path=bank.nc)``,
``entropytarget(entropies=bank.nc)`` and ``brwsim bank-stats`` read it.

Modules, one concept each:

* input sources: :mod:`brwsim.bank.openai_json` (OpenAI-compatible chat and legacy
  completions, streams, batch wrappers: OpenAI, vLLM, SGLang, llama.cpp ``/v1``),
  :mod:`brwsim.bank.llamacpp` (llama.cpp's native ``/completion``), :mod:`brwsim.bank.npz`
  (arrays), with :mod:`brwsim.bank.entries` (one position's listed tokens) and
  :mod:`brwsim.bank.jsonfile` (JSON Lines, server-sent events, JSON documents);
* :mod:`brwsim.bank.rows`: the checks that turn raw log-probabilities into bank rows;
* :mod:`brwsim.bank.bounds`: the entropy and second log-moment bounds;
* :mod:`brwsim.bank.collect` and :mod:`brwsim.bank.importer`: one import, file by file;
* :mod:`brwsim.bank.store`: the bank's variables, writing and validated reading;
:mod:`brwsim.bankstats` (moments, bounds and predicted E[X] of a bank) builds on the
families and the theory, which themselves read banks through :mod:`brwsim.bank.store`,
so it lives above them, outside this package.
"""

from __future__ import annotations

from brwsim.bank.bounds import entropy_bounds
from brwsim.bank.collect import BadInputWarning
from brwsim.bank.importer import import_logprobs
from brwsim.bank.store import BANK_VARIABLES, bank_bounds, bank_entropies, load_bank

__all__ = ["BANK_VARIABLES", "BadInputWarning", "bank_bounds", "bank_entropies",
           "entropy_bounds", "import_logprobs", "load_bank"]
