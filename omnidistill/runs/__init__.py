"""What a run directory holds and how to read it back: metadata, orbax checkpoints, the trained model."""
