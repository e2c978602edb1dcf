"""The Hugging Face Hub's public site, for links the window shows (a model's page, its
licence) before any Hub code is loaded: this module imports nothing, unlike app/models/hub.py
(httpx2, huggingface_hub), which the window must not pull in before its first paint."""

HUB_SITE = "https://huggingface.co"
