"""The quickstart model: a tiny Llama-architecture model trained on CPU from this repository's own
text, so that `kiln build` of examples/quickstart quantizes a real (if small) language model and its
quality gate measures something. `scripts/make_quickstart_model.py` drives it (with scripts/ on
sys.path: `import quickstart_model`). It is not part of the `compiler` package, and the wheel does
not ship it."""
