"""flower.py's tests (run them with ``python -m tests.run``)."""

import os

# A test says for itself whether it runs "in CI" (flower tells agents at once that nobody can answer a
# question there): the runner's own CI variable must not change what flower does under test.
os.environ.pop("CI", None)
