"""Real model files: GGUF checkpoints, their tokenizers and chat templates, the catalogue.

:mod:`~brwsim.models.gguffile` validates and maps a GGUF file; :mod:`~brwsim.models.gguf`
reads it as a Hugging Face configuration and float32 tensors;
:mod:`~brwsim.models.tokenizer` rebuilds its tokenizer; :mod:`~brwsim.models.chat` renders
conversations with a chat template; :mod:`~brwsim.models.catalogue` fetches the models
obtainable from the package index into the cache folder.
"""
