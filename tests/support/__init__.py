"""Helpers shared by the test suites (real files, real servers; no fakes)."""
