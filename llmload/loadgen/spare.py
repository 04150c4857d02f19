"""``python -m llmload.loadgen.spare``: a Locust process started ahead of the cell it will run.

It imports Locust (which monkey-patches the process, as ``python -m locust``
does first) and the load generator's user classes, then waits for one line on
its standard input: a JSON object ``{"argv": [...], "log": PATH}``. It then
writes what it printed so far (its standard output, a file, read back from the
start) to the log, points its standard output and error at the log and its
standard input at ``/dev/null``, and runs Locust's ``main`` on ``argv``: from
there on it is ``python -m locust ARGV > LOG 2>&1 < /dev/null``. End of input
before a line: it exits 0, having run nothing. It takes no argument (``--help``: this
in short).
"""

import locust.main  # first: Locust's gevent patches, before anything else is imported

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import llmload.loadgen.user  # noqa: E402,F401 - what every locustfile imports: the other half of the start-up
from llmload.core.cliargs import OneLineParser  # noqa: E402


def _point_output_at(log: str) -> None:
    """Copy the output so far (standard output, a readable file) to ``log``; send fds 1 and 2 there."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        offset = 0
        while chunk := os.pread(1, 1 << 16, offset):
            os.write(fd, chunk)
            offset += len(chunk)
    except OSError:
        pass  # standard output not a readable file: nothing to carry over
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def main() -> None:
    OneLineParser(prog="python -m llmload.loadgen.spare",
                  description="A Locust process started ahead of the cell it will run: see docs/runner.md.").parse_args()
    line = sys.stdin.readline()
    if not line.strip():
        return
    order = json.loads(line)
    _point_output_at(order["log"])
    sys.argv = [os.path.join(os.path.dirname(locust.main.__file__), "__main__.py"), *order["argv"]]
    locust.main.main()


if __name__ == "__main__":
    main()
