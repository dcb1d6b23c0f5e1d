"""paraplan: project LLM training step time and memory."""
