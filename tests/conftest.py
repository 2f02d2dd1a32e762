import os

import pytest


@pytest.fixture
def hetgen_bin():
    """The built hetgen executable. A missing one fails the test rather than skipping it, so a
    run that checked no rendered file can never pass."""
    binary = os.environ.get("HETGEN_BIN")
    if not binary:
        pytest.fail("HETGEN_BIN is not set: point it at the built hetgen binary (make test does)")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"HETGEN_BIN={binary} is not an executable file")
    return binary
