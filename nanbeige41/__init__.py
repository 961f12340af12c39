"""nanbeige41: a readable reference implementation of the Nanbeige4.1-3B post-training recipe.

The package holds what every stage shares: the model (model.py), the tokenizer and chat
format (tokenizer.py), KV-cache sampling (generate.py) and small helpers for losses,
checkpoints and distributed runs. The stages themselves are the top-level scripts.
"""
