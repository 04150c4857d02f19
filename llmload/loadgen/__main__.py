"""``python -m llmload.loadgen``: list the options the locustfiles add to Locust's own.

Locust prints its ``--help`` before it imports a locustfile, so options added by
a locustfile are accepted on its command line but never listed there.
"""

from __future__ import annotations

from locust.argument_parser import LocustArgumentParser

from llmload.loadgen.options import add_arguments


def main() -> None:
    parser = LocustArgumentParser(
        prog="locust -f locustfiles/<task>.py",
        description="Options of the llmload locustfiles, given beside Locust's own (-H, -u, -r, -t, --csv, --html, "
                    "--headless, --master/--worker, ...). Each also reads the environment variable shown and the "
                    "same key in a Locust config file.")
    add_arguments(parser)
    parser.print_help()


if __name__ == "__main__":
    main()
