"""A user's own image classifier, plugged into runner without editing it: a small conv net for the
bundled 8x8 digits, trained with a torchmetrics F1 score and early stopping on it."""

from image_classifier.models import small_cnn

__all__ = ["small_cnn"]
