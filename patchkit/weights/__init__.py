"""Real model weights, found without a model hub (weights.store)."""
