"""What is alive under /proc: the process tests' view of a command's leftovers (Linux)."""
import os
import time


def alive(pid: int) -> bool:
    """True when pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:].split()[0] not in (b"Z", b"X")


def group_members(pgid: int) -> list[int]:
    """The live processes of process group `pgid`."""
    out = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            out.append(int(name))
    return out


def wait_dead(pids, within=1.0):
    """The pids still alive after up to `within` seconds."""
    end = time.monotonic() + within
    while time.monotonic() < end and any(alive(p) for p in pids):
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


def with_cmdline(*argv: str) -> list[int]:
    """The live processes whose command line is exactly `argv` (a leftover found by what it ran)."""
    want = "".join(a + "\0" for a in argv).encode()
    out = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if f.read() != want:
                    continue
        except OSError:
            continue
        if alive(int(name)):
            out.append(int(name))
    return out
