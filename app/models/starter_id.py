"""The starter model's id and name: what the library (the default model) and the starter's
installer (:mod:`app.models.starter`) both name, in a module that imports neither."""

STARTER_ID = "smollm2-135m-instruct-starter"
STARTER_NAME = "SmolLM2 135M Instruct (starter)"
