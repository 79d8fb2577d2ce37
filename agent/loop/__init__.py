"""The turn loop and its rules: the driver (one Agent for every face), the conversation and its
context budget, call rules, approvals, hooks, per-turn undo, @-mentions and best-of-N rollouts."""
