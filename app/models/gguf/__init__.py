"""GGUF files → Hearth model folders (ONNX graph, tokenizer, manifest)."""

#: The exact-offsets form the converter writes (``quant``), recorded in a conversion's
#: manifest: 3 = a zero point per block, ``round(−o/s)``, and the residual block offset
#: ``o + z·s`` (Q4_1 / Q4_K: a zero-point tensor; Q2_K on 4-bit and Q5_1 / Q5_K on 8-bit
#: blocks: codes shifted against the default zero point); 2 = the
#: default zero point 8 and offsets ``o + 8·s`` (Q5_1 / Q5_K then with rounded offsets): the
#: same Q4_1 weights, further from them with int8 activations; conversions without a record
#: (form 1) carried per-block zero points without the residual offset. The starter converts
#: again once when its record differs (``starter.is_current``); imported models are offered
#: an update from their file (``gguf.update``).
#: Kept here, free of imports, so the starter's check costs no numpy or gguf import.
EXACT_OFFSETS_FORM = 3

#: What a conversion suggests replies run with (genai_config.json's ``search``): a GGUF file
#: carries no sampling advice, so the defaults llama.cpp front ends (LM Studio) give GGUFs.
#: Greedy decoding, as conversions suggested before (form 0, no record), loops on small
#: models ("a simple yet delicious thing, a simple yet delicious thing, ...").
SAMPLING_DEFAULTS = {"do_sample": True, "temperature": 0.8, "top_k": 40, "top_p": 0.95,
                     "repetition_penalty": 1.1}
SAMPLING_FORM = 1

#: The grouped-attention graph the converter writes (``grouped_attention``), recorded as the
#: manifest's ``conversion.attention_form`` beside ``conversion.attention``: 3 = the KV
#: buffers of the type ``conversion.kv_cache`` records (float16 unless asked otherwise,
#: ``grouped_attention.KV_CACHES``), the default for every architecture the form supports;
#: 2 = float32 buffers, the causal mask added to the stripe of scores from the
#: step's first position only (TensorScatter in place), as 3 does; 1 (or no record) = the
#: whole capacity masked, an opt-in; conversions without ``attention`` are GQA graphs. The
#: starter converts again once when its record differs (``starter.is_current``); other
#: models are offered an update.
ATTENTION_FORM = 3
