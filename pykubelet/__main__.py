"""Allows ``python -m pykubelet``."""

from pykubelet.cmd.app import main

raise SystemExit(main())
