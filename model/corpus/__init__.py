"""Training data: tokenizer, corpus sources, generated stories and scenes, token streams.

tokenizer (byte-level BPE), sources (public-domain text, cleaned), stories (long-range recall
drills), scenes (box pictures for the vision tower), dataset (the token stream and held-out
batches). Depends on nothing else in model/ but the leaves.
"""
