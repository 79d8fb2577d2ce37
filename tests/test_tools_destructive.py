"""The destructive-command classifier (tools/destructive.py) alone: commands that can lose work or
harm the machine get a reason, everyday ones None, and a write to a dot-file is judged against the
home folder it is given. How the Policy asks about them is tests/test_tools_permissions.py's."""
import pytest

from shell_samples import DESTRUCTIVE, EVERYDAY
from tools.destructive import destructive


@pytest.mark.parametrize("command", DESTRUCTIVE)
def test_destructive_positive(command, tmp_path):
    assert destructive(command, home=tmp_path)


@pytest.mark.parametrize("command", EVERYDAY)
def test_destructive_negative(command, tmp_path):
    assert destructive(command, home=tmp_path) is None


def test_destructive_reasons_and_real_home_path(tmp_path):
    assert destructive("rm -rf build") == "recursive delete (rm -rf)"
    assert destructive(f"echo x > {tmp_path}/.bashrc", home=tmp_path).startswith("writes to a dot-file in $HOME")
    assert destructive(f"echo x > {tmp_path}/notes.txt", home=tmp_path) is None
    assert destructive(None) is None
