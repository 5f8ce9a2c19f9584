"""What the tests and the tools share, and nothing they own: the random-weight fixtures, the
reference networks they are checked against, the real model files and sample photos, and the
browser of the page's tests.

Development only (tools/bootstrap.sh --dev installs it, editable). It imports the project's
packages but never `tests` or `tools`, so both can import it without importing each other
(tests/unit/test_import_graph.py). Each module imports what it needs when it is imported: this
package itself imports nothing.
"""
