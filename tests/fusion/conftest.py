import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def examples_dir():
    return EXAMPLES
