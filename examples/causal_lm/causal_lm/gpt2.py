"""A tiny, randomly initialised GPT-2 from transformers (nothing downloaded), for the same recipe.
transformers is imported only here, when this builder runs: the rest of the example needs none."""

from torch import nn


def tiny_gpt2(
    vocab_size: int, max_positions: int, width: int = 64, heads: int = 4, layers: int = 2
) -> nn.Module:
    """``GPT2LMHeadModel(GPT2Config(...))`` with no dropout, as the tiny model here has none."""
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        raise ImportError(
            "model=tiny_gpt2 needs Hugging Face transformers: pip install transformers"
        ) from None
    config = GPT2Config(
        vocab_size=vocab_size, n_positions=max_positions, n_embd=width, n_head=heads, n_layer=layers,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    model.loss_type = "ForCausalLM"  # what it falls back to anyway, minus the warning that it did
    return model
