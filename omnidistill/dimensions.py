"""The four quality dimensions scored by every omnidistill model, in output order."""

DIMENSIONS: tuple[str, ...] = ("informativeness", "clarity", "plausibility", "faithfulness")
NUM_DIMENSIONS = len(DIMENSIONS)
SCORE_MIN, SCORE_MAX = 1.0, 5.0
NUM_LEVELS = 5
"""Likert levels 1..5: the support of a label distribution (``label_dist``) and of the classification head."""
