"""``python -m brwsim.cli``: the ``brwsim`` command (used by tests that need a process)."""

from brwsim.cli.main import main

raise SystemExit(main())
