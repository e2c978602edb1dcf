"""GGUF files → Hearth model folders (ONNX graph, tokenizer, manifest)."""

#: The exact-offsets form the converter writes (``quant``), recorded in a conversion's
#: manifest: 2 = MatMulNBits' default zero point 8 and block offsets ``o + 8·s`` (Q2_K's 2-bit
#: codes stored centred, ``o + 2·s``; Q2_K conversions before that, also form 2, err more with
#: int8 activations, and only the starter, Q4_1, is checked against this). Conversions
#: without a record (form 1) carry per-block zero points: the same weights, slower decoding.
#: Kept here, free of imports, so the starter's check costs no numpy or gguf import.
EXACT_OFFSETS_FORM = 2

#: What a conversion suggests replies run with (genai_config.json's ``search``): a GGUF file
#: carries no sampling advice, so the defaults llama.cpp front ends (LM Studio) give GGUFs.
#: Greedy decoding, as conversions suggested before (form 0, no record), loops on small
#: models ("a simple yet delicious thing, a simple yet delicious thing, ...").
SAMPLING_DEFAULTS = {"do_sample": True, "temperature": 0.8, "top_k": 40, "top_p": 0.95,
                     "repetition_penalty": 1.1}
SAMPLING_FORM = 1
