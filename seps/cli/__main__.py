"""``python -m seps.cli``."""

from . import main

raise SystemExit(main())
