"""``python -m delta_eval`` is the ``delta-eval`` command."""

import sys

from delta_eval.cli import main

sys.exit(main())
