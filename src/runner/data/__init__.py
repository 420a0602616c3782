"""Built-in data sets. Each is a callable returning ``(train_dataset, val_dataset)``."""

from runner.data.digits import load_digits
from runner.data.synthetic import make_classification, make_regression

__all__ = ["load_digits", "make_classification", "make_regression"]
