"""`patchkit plan`: which arrangement of a rig runs a model fastest, and up to what context
(the model is explained in docs/plan.md)."""

__all__: list[str] = []
