"""Serving and deploying ssa-hf models.

- `server`: transformers' own OpenAI-compatible server with a model loader that resolves ssa-hf classes
  (`ssa-hf serve`); continuous batching runs on the models' paged attention (`ssa_hf.models.paged`).

Nothing is imported here: each module is imported where it is used (the server module imports transformers' serving
stack).
"""
