"""The data plane: the OpenAI-compatible gateway in front of the tenants' model servers."""
