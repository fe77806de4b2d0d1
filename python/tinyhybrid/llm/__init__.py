"""tinyhybrid.llm: run llama-family models from .gguf files (tinygrad.llm's module names): model, tokenizer, sampling,
the terminal chat (python -m tinyhybrid.llm) and an OpenAI-compatible server. Importing the package loads nothing
heavy: each submodule is imported where it is used."""
