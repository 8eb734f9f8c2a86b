"""face: fine-grained, aspect-based, reference-free evaluation of conversational recommender systems."""

__version__ = "0.1.0"
