"""The numerics tests run the CUDA simulator in this process (tests/conftest.py chose it)."""
import pytest

import specialvalues


@pytest.fixture
def fast_simulator():
    """A shorter thread switch interval while a test runs the simulator (specialvalues.py)."""
    with specialvalues.fast_simulator():
        yield
