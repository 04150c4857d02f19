"""The basic OpenAI-compatible LLM server (FastAPI + uvicorn + transformers) and the vLLM launcher."""
