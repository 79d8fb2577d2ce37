"""Asking the user about a call the permission policy (tools/permissions.Policy) wants approved.

`ask(policy, decision, name, args, approve, cancel)` -> (answer, rule): approve(name, args,
decision) is the face's question (the TUI's panel, the REPL's prompt; None headless: "no");
"y"/"n"/"a" and the words are accepted, anything else is a no. Ctrl-C or Ctrl-D at the prompt,
or the turn's cancel set meanwhile, is "cancelled": not the user's verdict on the call (nothing
ran, and `train export-sessions` does not read it as a rejection). "always" stores the rule the
policy makes for the call (the decision carries its preview, `always`, so the face can say what
it allows); where no rule can be made (a destructive command) it counts as "yes", once.
"""
from __future__ import annotations

import dataclasses

ANSWERS = ("yes", "no", "always", "cancelled")


def ask(policy, decision, name: str, args: dict, approve, cancel) -> tuple[str, str]:
    decision = dataclasses.replace(decision, always=policy.always(name, args, store=False))
    answer = "no"
    if approve is not None:
        try:
            answer = str(approve(name, args, decision)).strip().lower()
        except (KeyboardInterrupt, EOFError):  # Ctrl-C / Ctrl-D at the prompt
            answer = "cancelled"
        answer = {"y": "yes", "n": "no", "a": "always"}.get(answer, answer)
        if cancel.is_set():
            answer = "cancelled"
        elif answer not in ANSWERS:
            answer = "no"
    rule = policy.always(name, args) if answer == "always" else ""
    if answer == "always" and not rule:  # nothing to remember (e.g. destructive): once
        answer = "yes"
    return answer, rule
