#!/usr/bin/env python3
"""Whether a SystemCallFilter allows every system call a traced gateway made.

    syscall-filter-allows.py TRACE FILTER

TRACE is `strace -f` output of a run that exec'd /usr/bin/sluice; only the
calls of that process (from its execve on) and of its threads count, not
those of the tools that started it. FILTER is the unit's SystemCallFilter=
lines, in order (a line starting with ~ takes its sets away); sets (@name)
are expanded by `systemd-analyze syscall-filter`. It also fails on a
mapping made writable and executable, or made executable later, which the
unit's MemoryDenyWriteExecute=yes refuses. Used by scripts/test-image.sh.
"""
import re
import subprocess
import sys


def expand(name):
    if not name.startswith("@"):
        return {name}
    out = subprocess.run(
        ["systemd-analyze", "syscall-filter", name],
        capture_output=True, text=True, check=True,
    ).stdout
    calls = set()
    for line in out.splitlines()[1:]:
        line = line.strip()
        if line and not line.startswith("#"):
            calls |= expand(line)
    return calls


def main(trace, rules):
    allowed = set()
    for rule in rules.splitlines():
        deny = rule.startswith("~")
        names = set().union(*(expand(n) for n in rule.lstrip("~").split()))
        allowed = allowed - names if deny else allowed | names
    line_re = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\()")
    sluice, used, wx = set(), {}, []
    for line in open(trace):
        line = line.rstrip()
        m = line_re.match(line)
        if not m:
            continue
        pid, call = m.group(1), m.group(2) or m.group(3)
        if re.search(r'\bexecve\("/usr/bin/sluice",', line) and line.endswith("= 0"):
            sluice.add(pid)
            continue
        if pid not in sluice:
            continue
        used.setdefault(call, line)
        if call in ("mmap", "mprotect", "pkey_mprotect") and "PROT_EXEC" in line and (
            "PROT_WRITE" in line or call != "mmap"
        ):
            wx.append(line)
        child = re.search(r"= (\d+)$", line)
        if call in ("clone", "clone3", "fork", "vfork") and child:
            sluice.add(child.group(1))
    if not sluice:
        sys.exit("no execve of /usr/bin/sluice in the trace")
    refused = sorted(set(used) - allowed)
    if refused:
        sys.exit("the unit's SystemCallFilter refuses what the gateway called:\n"
                 + "\n".join(used[c] for c in refused))
    if wx:
        sys.exit("MemoryDenyWriteExecute=yes refuses what the gateway did:\n" + "\n".join(wx))
    print(f"ok: the unit's SystemCallFilter allows all {len(used)} system calls the gateway made")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
