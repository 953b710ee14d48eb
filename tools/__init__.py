"""The Director's LLM tools: argument schemas from the capability manifest, validation, effects."""
