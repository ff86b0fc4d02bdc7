"""``python -m brwsim.cli``: the ``brwsim`` command."""

import sys

from brwsim.cli.main import main

sys.exit(main())
