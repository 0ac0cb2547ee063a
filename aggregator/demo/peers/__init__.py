"""Local protocol servers: the demo's sources and the test suite's fixture servers."""
