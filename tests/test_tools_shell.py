"""Splitting a command line into sub-commands (tools/shell.py): quoted text is data, substitutions
are sub-commands of their own, and an unterminated quote is unparsable."""
from tools.shell import split_command


def test_split_command_keeps_quotes_and_finds_substitutions():
    assert split_command('echo "a && b" \'c; d\'') == ([("", 'echo "a && b" \'c; d\'')], True)
    segs, ok = split_command("a && b || c; d | e\nf $(g) `h` <(i)")
    assert ok and [s for _, s in segs] == ["a", "b", "c", "d", "e", "g", "h", "i", "f $(g) `h` <(i)"]
    assert split_command("echo 'x")[1] is False
