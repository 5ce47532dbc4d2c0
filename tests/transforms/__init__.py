"""One test file per compiler/transforms/ module, named after it (a package, so that its
test_in_place.py and tests/runtime/test_in_place.py can both be collected)."""
