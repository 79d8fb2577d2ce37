"""Evaluations: HumanEval & co, bits per byte, the agent suite, CORE."""
