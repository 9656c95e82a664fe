"""Training: the tiny language model, its look-back practice, the DSpark drafter, the vision tower.

Sits above checkpoint/ (it writes and resumes checkpoints) and below cli/ (the command lines).
"""
