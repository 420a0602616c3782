"""pytorch/examples' word-level language model (``word_language_model``), plugged into runner:
the data set and the model; the training recipe is runner's config (``conf/experiment/word_lm.yaml``)."""

from word_lm.data import load_words, tokenize, vocabulary
from word_lm.model import RNNModel, rnn_model

__all__ = ["RNNModel", "load_words", "rnn_model", "tokenize", "vocabulary"]
