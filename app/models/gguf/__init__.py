"""GGUF files → Hearth model folders (ONNX graph, tokenizer, manifest)."""

#: The exact-offsets form the converter writes (``quant``), recorded in a conversion's
#: manifest: 2 = MatMulNBits' default zero point 8 and block offsets ``o + 8·s``. Conversions
#: without a record (form 1) carry per-block zero points: the same weights, slower decoding.
#: Kept here, free of imports, so the starter's check costs no numpy or gguf import.
EXACT_OFFSETS_FORM = 2
