"""Warm Locust for the tests: a fork server that has imported Locust once, and the client every ``python -m locust``
of a test run becomes (see docs/testing.md, "Warm Locust").

Importing Locust, gevent and the load generator's libraries costs about 1.2 s of CPU a process, and the tests
start hundreds. ``scripts/run_tests.sh`` starts :func:`serve` once (``python -c 'import llmload_warm;
llmload_warm.serve()' SOCKET``), puts this folder on ``PYTHONPATH`` and names the socket in ``LLMLOAD_WARM_LOCUST``.
Then the ``sitecustomize`` here turns each ``python -m locust ...`` (and the runner's spare Locust) into a client
(:func:`run_warm`): it hands its standard input, output and error, its arguments, folder, environment and CPU
priority to the server, which forks a child that runs the module as ``python -m`` would. The client stays the
process its caller started: it passes signals on, and exits as the child did (with its code, or by its signal);
killed, its child dies with it. Where anything differs (another interpreter or ``PYTHON*`` setting, no server, a
closed standard stream) the command starts cold, as without any of this.

Only third-party modules are imported ahead: the suite's own code is imported by each child, from its own folder.
"""

from __future__ import annotations

import json
import os
import signal
import sys

ENV = "LLMLOAD_WARM_LOCUST"
#: The ``-m`` modules the server runs: Locust, and the runner's spare Locust (which imports Locust first too).
MODULES = ("locust", "llmload.loadgen.spare")
#: What the server imports ahead (Locust first: its gevent patches come before anything else).
PRELOAD = ("locust", "locust.main", "locust.contrib.fasthttp", "numpy", "msgspec", "ddsketch", "prometheus_client",
           "tabulate", "ijson", "gzip", "timeit", "wsgiref.simple_server", "ctypes", "mmap")
#: Signals the client passes on to its child.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
#: ``PYTHON*`` variables a child applies itself; any other must be the server's for a warm start.
APPLIED = ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE")
#: Other variables read as the modules above are imported: they too must be the server's.
AT_IMPORT = ("GEVENT", "LOCUST_PLAYWRIGHT", "LOCUST_SKIP_MONKEY_PATCH", "LOCUST_SKIP_URLLIB3_PATCH")


def python_settings(env) -> dict:
    """What a child cannot change once started: the ``PYTHON*`` variables (but :data:`APPLIED`), :data:`AT_IMPORT`."""
    return {k: v for k, v in env.items()
            if (k.startswith("PYTHON") and k not in APPLIED) or k.startswith(AT_IMPORT)}


def _send(sock, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode() + b"\n"
    if fds:
        import socket
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


def _receive(sock, buffer: bytearray, maxfds: int = 0) -> tuple[dict | None, list[int]]:
    """One JSON line (None at end of stream), and the descriptors that came with it."""
    import socket
    fds: list[int] = []
    while b"\n" not in buffer:
        if maxfds:
            data, got, _flags, _addr = socket.recv_fds(sock, 1 << 16, maxfds)
            fds += got
        else:
            data = sock.recv(1 << 16)
        if not data:
            return None, fds
        buffer += data
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return json.loads(line), fds


# ---------------------------------------------------------------------------------------------------- the client

def wanted(argv: list[str]) -> str | None:
    """The module of ``python -m MODULE ...`` when it is one the server runs (``sitecustomize`` asks only where
    :data:`ENV` is set)."""
    if len(argv) >= 3 and argv[1] == "-m" and argv[2] in MODULES:
        return argv[2]
    return None


def run_warm(module: str) -> None:
    """Run ``python -m module`` in a child of the server and exit as it does; return (start cold) where it cannot."""
    import socket
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(os.environ[ENV])
    except OSError:
        return
    policy = os.sched_getscheduler(0)
    order = {"module": module, "args": sys.orig_argv[3:], "cwd": os.getcwd(), "env": dict(os.environ),
             "prefix": sys.prefix, "executable": sys.executable, "policy": policy,
             "nice": os.getpriority(os.PRIO_PROCESS, 0)}
    buffer = bytearray()
    try:
        _send(sock, order, [0, 1, 2])
        answer, _ = _receive(sock, buffer)
    except (OSError, ValueError):  # ValueError: an environment that is not text, an answer that is not JSON
        answer = None
    if not answer or "pid" not in answer:
        sock.close()
        return
    try:
        _follow(answer["pid"], sock, buffer)
    finally:
        os._exit(70)  # whatever went wrong: the child runs, so never go on to a cold start as well


def _follow(child: int, sock, buffer: bytearray) -> None:
    """Pass signals on to ``child`` until the server says how it ended, then end the same way."""

    def forward(signum, _frame):
        try:
            os.kill(child, signum)
        except OSError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)
    try:
        answer, _ = _receive(sock, buffer)  # a signal handled meanwhile does not end the wait (PEP 475)
    except OSError:
        answer = None
    status = answer.get("status") if answer else None
    if status is None:  # the server went away: the child's end is unknown
        forward(signal.SIGKILL, None)
        return
    if os.WIFSIGNALED(status):  # end by the same signal
        signum = os.WTERMSIG(status)
        if signum != signal.SIGKILL:  # it has no handler to reset (setting one raises)
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # one whose default action does not end a process
    os._exit(os.waitstatus_to_exitcode(status))


# ---------------------------------------------------------------------------------------------------- the server

def _original(module: str, name: str):
    """``module.name`` as it was before gevent patched it (Locust patches the server's process)."""
    from gevent import monkey
    return monkey.get_original(module, name)


def serve() -> None:
    """Import :data:`PRELOAD`, listen on the socket ``sys.argv[1]``, fork a child for each client until killed."""
    import gc
    import importlib
    for name in PRELOAD:
        importlib.import_module(name)
    gc.freeze()  # the imported objects out of the collector's sight: a child's collections leave their pages shared
    import socket
    import gevent.os
    make_socket = _original("socket", "socket")
    select = _original("select", "select")
    set_handler = _original("signal", "signal")
    waitpid = _original("os", "waitpid")
    close = _original("os", "close")  # gevent's waits for its hub, which this process never runs
    path = sys.argv[1]
    if os.path.exists(path):
        os.unlink(path)
    listener = make_socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    set_handler(signal.SIGCHLD, lambda *_: None)
    clients: dict[int, object] = {}
    settings = python_settings(os.environ)
    log = open(f"{path}.log", "a", buffering=1)  # a line a request: "warm MODULE" or "cold REASON"
    while True:
        ready = select([listener, wake_r], [], [])[0]  # retried after SIGCHLD's handler (PEP 475)
        if wake_r in ready:
            os.read(wake_r, 4096)
            while True:
                try:
                    pid, status = waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                conn = clients.pop(pid, None)
                if conn is not None:
                    try:
                        _send(conn, {"status": status})
                    except OSError:
                        pass
                    conn.close()
        if listener not in ready:
            continue
        conn = make_socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, listener._accept()[0])  # not gevent's class
        try:
            order, fds = _receive(conn, bytearray(), maxfds=3)
        except (OSError, ValueError):
            conn.close()
            continue
        refusal = None
        if not order or len(fds) != 3:
            refusal = "no order"
        elif order["prefix"] != sys.prefix or order["executable"] != sys.executable:
            refusal = "another interpreter"
        elif python_settings(order["env"]) != settings:
            refusal = "other PYTHON* settings"
        log.write(f"cold {refusal}\n" if refusal else f"warm {order['module']}\n")
        if refusal:
            try:
                _send(conn, {"refused": refusal})
            except OSError:
                pass
            conn.close()
            for fd in fds:
                close(fd)
            continue
        pid = gevent.os.fork_gevent()
        if pid == 0:
            set_handler(signal.SIGCHLD, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            for fd in (wake_r, wake_w):
                close(fd)
            listener.close()
            log.close()
            for other in clients.values():
                other.close()
            _become(order, fds, conn)  # runs the module and exits: never returns
        for fd in fds:
            close(fd)
        clients[pid] = conn
        try:
            _send(conn, {"pid": pid})
        except OSError:
            pass


def _watch(conn) -> None:
    """In the child, on a thread of its own: the client is gone (killed) when its end closes: die with it."""
    try:
        while os.read(conn.fileno(), 4096):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def _become(order: dict, fds: list[int], conn) -> None:
    """The child: take the client's streams, folder, environment and priority, then run the module as ``-m``."""
    import runpy
    import time
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        _original("os", "close")(fd)
    os.setpgid(0, 0)  # a terminal's Ctrl-C reaches it once, through the client, as it would reach a cold start
    os.chdir(order["cwd"])
    os.environ.clear()
    os.environ.update(order["env"])
    time.tzset()
    if order["policy"] != os.sched_getscheduler(0):
        os.sched_setscheduler(0, order["policy"], os.sched_param(0))
    if order["nice"] > os.getpriority(os.PRIO_PROCESS, 0):
        os.setpriority(os.PRIO_PROCESS, 0, order["nice"])
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    sys.stdin = sys.__stdin__ = open(0, "r", encoding=encoding, errors=errors, closefd=False)
    sys.stdout = sys.__stdout__ = _stream(1, encoding, errors, unbuffered)
    sys.stderr = sys.__stderr__ = _stream(2, encoding, "backslashreplace", unbuffered)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()  # the server's legacy global state, else the same in every child
    import gevent
    gevent.get_hub().loop.update_now()  # the loop's clock stood still since the server imported Locust: a timer
    #                                     set from it (Locust's --run-time) would be due that much early
    start_thread = _original("_thread", "start_new_thread")
    start_thread(_watch, (conn,))
    sys.argv = ["-m", *order["args"]]
    sys.path[0] = os.getcwd()
    runpy._run_module_as_main(order["module"], alter_argv=True)
    sys.exit(0)


def _stream(fd: int, encoding: str, errors: str, unbuffered: bool):
    """A text stream on ``fd`` as the interpreter makes one at start-up: standard error line-buffered, standard
    output on a terminal too; both written through under ``PYTHONUNBUFFERED``."""
    import io
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors=errors,
                            line_buffering=fd == 2 or raw.isatty(), write_through=unbuffered)
