"""batchfuzz: property-based verification of LLM-serving batch-layout logic."""

__version__ = "0.1.0"
