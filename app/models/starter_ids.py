"""The starter model's names, apart from the code that builds it (which pulls in the GGUF
reader): the library asks them without loading that."""

STARTER_ID = "smollm2-135m-instruct-starter"
STARTER_NAME = "SmolLM2 135M Instruct (starter)"
#: The catalog entry the starter is a build of: installed as far as the catalog is concerned
#: (the catalog marks it, and offers it as a draft model, never for download again).
STARTER_CATALOG_ID = "smollm2-135m-instruct"
