"""``python -m lifecycle.cli``."""

from . import main

raise SystemExit(main())
