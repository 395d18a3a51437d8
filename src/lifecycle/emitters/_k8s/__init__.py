"""Private parts of :mod:`lifecycle.emitters.kubernetes`: the Event record, the correlator,
the sinks and the collector. None of them imports the ``kubernetes`` client at import time."""
