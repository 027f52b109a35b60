#!/usr/bin/env python3
"""deploy/failure_summary.py <lane> <log> — the last lines of a failed test run.

CI keeps only the output's tail, so deploy/test.sh ends a failed run with
this summary (at most ~45 lines): the lane, each failing test (libtest's
`---- name stdout ----` sections) with its assertion (the `panicked at`
line and the message under it) and the tail of its walrelay log (the block
tests/support prints when a test fails); for a failure that is not a Rust
test's (a script, the soak) the lane log's last lines.
"""
import re
import sys

PANIC_LINES = 10      # of an assertion's message
WALRELAY_LINES = 12   # of a failing test's walrelay log
FALLBACK_LINES = 30   # of the lane log, when no test failed by name
MAX_TESTS = 2         # failing tests shown in full


def sections(lines):
    """(name, lines) of every libtest failure section."""
    out, name, body = [], None, []
    for line in lines:
        m = re.match(r"^---- (\S+) std(out|err) ----$", line)
        if m:
            if name:
                out.append((name, body))
            name, body = m.group(1), []
        elif name is not None:
            if line in ("failures:", "successes:") or line.startswith("test result:"):
                out.append((name, body))
                name, body = None, []
            else:
                body.append(line)
    if name:
        out.append((name, body))
    return out


def assertion(body):
    for i, line in enumerate(body):
        if " panicked at " in line:
            msg = [line]
            for nxt in body[i + 1:]:
                if nxt.startswith(("stack backtrace:", "note: ", "--- last ")):
                    break
                msg.append(nxt)
            return msg[:PANIC_LINES]
    return ["(no panic message in its output)"]


def walrelay_tail(body):
    start = None
    for i, line in enumerate(body):
        if re.match(r"^--- last \d+ lines of .* ---$", line):
            start = i
    if start is None:
        return []
    block = []
    for line in body[start + 1:]:
        if line == "---":
            break
        block.append(line)
    return [body[start]] + block[-WALRELAY_LINES:]


def main():
    lane, path = sys.argv[1], sys.argv[2]
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    print()
    print(f"==================== CI FAILED in the {lane} lane ({path}) ====================")
    failed = sections(lines)
    if failed:
        names = [n for n, _ in failed]
        print("failing tests: " + ", ".join(names))
        for name, body in failed[:MAX_TESTS]:
            print(f"---- {name}")
            for line in assertion(body):
                print("  " + line)
            for line in walrelay_tail(body):
                print("  " + line[:300])
        if len(failed) > MAX_TESTS:
            print(f"(and {len(failed) - MAX_TESTS} more: see the lane's output above)")
    else:
        stage = [line for line in lines if line.startswith("==> ")]
        if stage:
            print("last stage: " + stage[-1])
        print(f"no Rust test failed by name; the lane's last {FALLBACK_LINES} lines:")
        for line in lines[-FALLBACK_LINES:]:
            print("  " + line[:300])
    result = [line for line in lines if line.startswith("test result: FAILED")]
    if result:
        print(result[-1])
    print(f"==================== CI FAILED in the {lane} lane ====================")


if __name__ == "__main__":
    main()
