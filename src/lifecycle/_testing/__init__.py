"""Implementation of :mod:`lifecycle.testing` (the public face)."""
