"""Built-in data sets. Each is a callable returning ``(train_dataset, val_dataset)``."""

from runner.data.digits import load_digits
from runner.data.synthetic import make_classification, make_regression
from runner.data.text import load_text

__all__ = ["load_digits", "load_text", "make_classification", "make_regression"]
