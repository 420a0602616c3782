"""The config: its typed schema, the rules derived from it, and its conversion from Hydra's."""
