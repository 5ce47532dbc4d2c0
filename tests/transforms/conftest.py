import os
import sys

# the hand-built typed chains and FileCheck of the compiler tests (tests/compiler/chainbuild.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "compiler"))
