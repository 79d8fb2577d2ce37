"""Asking for approval (agent/loop/approval.py) alone, against a real Policy: the answers a face may
give, headless (nobody says yes), Ctrl-C and a cancelled turn, and "always", which stores only a
rule the Policy can keep (a destructive command is asked every time)."""
import threading

from agent.loop.approval import ask
from tools.permissions import Policy


def test_ask_reads_answers_and_stores_only_real_rules(repo):
    policy = Policy.load(repo, mode="ask")
    bash = {"command": "pytest -q"}
    d = policy.check("Bash", bash)
    assert d.action == "ask"
    idle = threading.Event()
    assert ask(policy, d, "Bash", bash, lambda *a: "Y", idle) == ("yes", "")
    assert ask(policy, d, "Bash", bash, None, idle) == ("no", "")  # headless: nobody says yes
    assert ask(policy, d, "Bash", bash, lambda *a: "maybe", idle) == ("no", "")

    def ctrl_c(*a):
        raise KeyboardInterrupt
    assert ask(policy, d, "Bash", bash, ctrl_c, idle)[0] == "cancelled"
    stopped = threading.Event()
    stopped.set()  # the turn was cancelled while the question was up
    assert ask(policy, d, "Bash", bash, lambda *a: "yes", stopped)[0] == "cancelled"
    shown = []
    answer, rule = ask(policy, d, "Bash", bash, lambda n, a, dec: shown.append(dec.always) or "a", idle)
    assert answer == "always" and rule and shown == [rule]  # the face saw what "always" stores
    assert policy.check("Bash", bash).action == "allow"
    rm = {"command": "rm -rf build"}  # destructive: asks every time, "always" is once
    assert ask(policy, policy.check("Bash", rm), "Bash", rm, lambda *a: "always", idle) == ("yes", "")
    assert policy.check("Bash", rm).action == "ask"
