"""agent/loop/call_rules.py alone: when a call is taken back and resampled, when it stands, when three
in a row end the turn. The driver's use of these rules runs in test_agent_driver.py."""
from agent.loop.call_rules import CallRules, call_key

READ = call_key("Read", {"file_path": "a.py"})
EDIT = call_key("Edit", {"file_path": "a.py", "old_string": "x", "new_string": "y"})


def test_a_malformed_call_is_taken_back_until_the_retries_are_spent():
    rules = CallRules(retries=2)
    assert rules.take_back("?", malformed=True, cancelled=False) == "a malformed call"
    assert rules.resampled() == 1
    assert rules.take_back("?", malformed=True, cancelled=False) == "a malformed call"
    assert rules.resampled() == 2
    assert rules.take_back("?", malformed=True, cancelled=False) is None  # spent: it stands
    rules.kept("?", "?", "error: malformed")
    assert rules.attempt == 0  # the next step starts afresh
    assert rules.take_back("?", malformed=True, cancelled=False) == "a malformed call"


def test_no_take_back_with_no_retries_or_a_cancelled_reply():
    assert CallRules(retries=0).take_back("?", malformed=True, cancelled=False) is None
    assert CallRules(retries=2).take_back("?", malformed=True, cancelled=True) is None


def test_a_repeat_is_taken_back_until_a_change_makes_it_right_again():
    rules = CallRules(retries=2)
    rules.kept("Read", READ, "    1→x = 1")
    assert rules.take_back(READ, malformed=False, cancelled=False) == "a repeat of an earlier call"
    rules.kept("Edit", EDIT, "Edited a.py")  # a change: reading again is right
    assert rules.take_back(READ, malformed=False, cancelled=False) is None
    assert rules.take_back(EDIT, malformed=False, cancelled=False) == "a repeat of an earlier call"


def test_a_failed_edit_is_no_change():
    rules = CallRules(retries=2)
    rules.kept("Read", READ, "    1→x = 1")
    rules.kept("Edit", EDIT, "error: old_string not found")
    assert rules.take_back(READ, malformed=False, cancelled=False) == "a repeat of an earlier call"


def test_three_in_a_row_and_a_taken_back_failure_is_not_one_of_them():
    rules = CallRules(retries=1)
    assert not rules.made(READ) and not rules.made(READ)
    assert rules.take_back_failure("Read", "error: no such file", cancelled=False) == "a failed call"
    assert rules.recent == [READ]  # the failed one was taken back
    assert not rules.made(READ)
    assert rules.made(READ)  # the third that stands
    assert not CallRules(retries=1).made(EDIT)


def test_only_failures_that_changed_nothing_are_taken_back():
    rules = CallRules(retries=1)
    rules.made(call_key("Bash", {"command": "make"}))
    assert rules.take_back_failure("Bash", "error: exit 2", cancelled=False) is None  # it may have changed files
    rules.made(EDIT)
    assert rules.take_back_failure("Edit", "Edited a.py", cancelled=False) is None  # not a failure
    assert rules.take_back_failure("Edit", "error: x", cancelled=True) is None
    assert rules.take_back_failure("Nope", "error: unknown tool", cancelled=False) is None
    assert rules.take_back_failure("Edit", "error: old_string not found", cancelled=False) == "a failed call"
    rules.resampled()
    rules.made(EDIT)
    assert rules.take_back_failure("Edit", "error: old_string not found", cancelled=False) is None  # spent
