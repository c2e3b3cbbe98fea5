"""``python -m seps`` is ``seps-bench``."""

from seps.cli import main

raise SystemExit(main())
