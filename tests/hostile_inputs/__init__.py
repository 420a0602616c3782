"""The hostile-input cases, shared by the suite (tests/test_hostile_inputs.py) and its long form
(scripts/bad_inputs.py): the cases, the fixtures they need, how one is run and judged."""
