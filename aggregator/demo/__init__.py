"""The demo and its local protocol servers, kept out of the runtime core: ``run`` starts the
bundled sources on 127.0.0.1, harvests and serves them (``aggregator demo``); ``peers`` holds
the servers of every protocol, which the test suite and the benchmarks use as fixtures. Nothing
in harvest, mapping, validation, store or serving code imports this package."""
