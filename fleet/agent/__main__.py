"""``python -m fleet.agent``: the agent's command line, as ``ckptfleet-agent`` and the built file run it."""

import sys

from .cli import main

sys.exit(main())
