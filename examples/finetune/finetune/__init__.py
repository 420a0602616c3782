"""Fine-tuning from the config alone: a backbone of blocks and a head (``finetune/model.py``), the
first blocks frozen, backbone and head at two learning rates, no weight decay on biases and norms
(``conf/experiment/finetune.yaml``); runner is not edited and no parameter is tagged in Python."""

from finetune.model import Backbone, Classifier, classifier

__all__ = ["Backbone", "Classifier", "classifier"]
