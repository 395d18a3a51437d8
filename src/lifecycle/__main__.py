"""``python -m lifecycle``: the ``lifecycle`` command."""

from .cli import main

raise SystemExit(main())
