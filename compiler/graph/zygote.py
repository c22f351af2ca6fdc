"""The process that starts isolated actions (ActionKind.isolated): it imports what a kind needs once
(the kind's module and its `preload`: torch, transformers and ModelOpt take about 10 CPU-seconds to
import) and then forks a fresh process for each action (compiler/graph/child.py runs it). Each
action still runs in a process and a session of its own, which an interrupt kills with its process
group; only the imports are shared, and nothing an action does reaches the next one.

The zygote ends when the process that started it does (end of file on its control socket), and each
action's process when the zygote does (PR_SET_PDEATHSIG). A process that runs several builds (tests)
keeps one zygote per set of modules, started again when the working directory or environment it was
started in changed: modules read both when they are imported.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass

# Changes from test to test in a pytest process and is read by no import: not a reason for a new zygote.
VOLATILE_ENV = frozenset({"PYTEST_CURRENT_TEST"})
MAX_REQUEST = 1 << 20

# Kiln from the directory the build runs from, without putting the current directory first on the
# path (-P: a `compiler` package there must not shadow Kiln) nor moving an entry the path already
# has (site-packages stays behind the standard library).
_BOOT = ("import sys; d = sys.argv[1]; d in sys.path or sys.path.insert(0, d); "
         "from compiler.graph.zygote import serve; serve(sys.argv[1], int(sys.argv[2]), sys.argv[3:])")


class ZygoteGone(Exception):
    """The zygote ended (or never started): the action cannot be started or its exit status is unknown."""


# --- the zygote's side --------------------------------------------------------------------------
def serve(kiln_dir: str, control_fd: int, modules: list[str]) -> None:
    import importlib
    import select

    # OpenMP (torch's CPU kernels) reads this once, when torch loads here. By default its threads
    # spin at every barrier: on a builder whose cores are shared (a CI runner, a test suite), the
    # spinning thread takes the core from the one it waits for. The quickstart's quantization took
    # 222 s instead of 41 s beside one busy core (and 24 s instead of 27 s on an idle machine).
    # The builder's own setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # the action imports it again, and its log says why it failed
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    control = socket.socket(fileno=control_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the select below
    replies: dict[int, socket.socket] = {}  # action process id -> where its exit status goes
    while True:
        ready, _, _ = select.select([control, wake_r], [], [])
        if wake_r in ready:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
        _reap(replies)
        if control not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(control, MAX_REQUEST, 3)
        if not message:
            return  # the build is gone; the actions' processes die with this one
        try:
            request = json.loads(message)
        except ValueError:
            request = None
        if len(fds) != 3 or not isinstance(request, dict):
            for fd in fds:
                os.close(fd)  # the build sees end of file where it waits for a process id
            continue
        reply_fd, status_fd, log_fd = fds
        zygote = os.getpid()
        pid = os.fork()
        if pid == 0:
            _action(kiln_dir, request, status_fd, log_fd, zygote,
                    [control.fileno(), wake_r, wake_w, reply_fd, *(s.fileno() for s in replies.values())])
        os.close(status_fd)
        os.close(log_fd)
        reply = socket.socket(fileno=reply_fd)
        try:
            reply.sendall(f"{pid}\n".encode())
        except OSError:  # the build stopped waiting; the action still ends, and is reaped, as usual
            pass
        replies[pid] = reply


def _reap(replies: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        reply = replies.pop(pid, None)
        if reply is not None:
            try:
                reply.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass
            reply.close()


def _action(kiln_dir: str, request: dict, status_fd: int, log_fd: int, zygote: int, close: list[int]) -> None:
    """The forked process: a session of its own, the log as stdout and stderr, the build's
    environment; never returns into the zygote's loop."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in close:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        os.environ.clear()
        os.environ.update(request["env"])
        from compiler.graph import child

        if child.die_with_parent(zygote):
            code = child.run(request["job"], status_fd, kiln_dir)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


# --- the build's side ---------------------------------------------------------------------------
def _kiln_dir() -> str:
    from pathlib import Path

    import compiler

    return str(Path(compiler.__file__).resolve().parents[1])


@dataclass
class Forked:
    """One action's process, as the zygote reported it."""

    pid: int
    reply: socket.socket
    zygote: Zygote
    exitcode: int | None = None

    def kill(self) -> None:
        """SIGKILL to its process group (the tools the action started die with it); to the process
        alone if it has not made its group yet."""
        if self.exitcode is not None:
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        except PermissionError:
            pass

    def wait(self) -> int:
        """Its exit status as subprocess gives it (-N: killed by signal N)."""
        if self.exitcode is None:
            try:
                line = _read_line(self.reply)
                self.exitcode = int(line)
            except (ValueError, OSError) as e:
                raise ZygoteGone(f"the process that started it ended before it did ({e})") from None
            finally:
                self.reply.close()
                self.zygote.done()
        return self.exitcode


def _read_line(sock: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            raise OSError("end of file")
        data += chunk
    return data.decode()


class Zygote:
    def __init__(self, modules: tuple[str, ...]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # its own session: the terminal's Ctrl-C reaches only the build, which decides what to stop
            self.proc = subprocess.Popen([sys.executable, "-P", "-c", _BOOT, _kiln_dir(), str(theirs.fileno()),
                                          *modules], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, pass_fds=(theirs.fileno(),),
                                         start_new_session=True, close_fds=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.control = ours
        self._lock = threading.Lock()  # one request at a time on the control socket
        self.active = 0  # actions reserved (zygote_for) and not yet ended; under _LOCK

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, from an interrupt (a signal handler: no lock); the actions it forked die with it."""
        if self.proc.returncode is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def fork(self, job: dict, status_fd: int, log_fd: int) -> Forked:
        """Start `job` (compiler/graph/child.py) in a new process with `status_fd` for its reports
        and `log_fd` as its stdout and stderr. Once per `zygote_for` that returned this zygote."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        request = json.dumps({"job": job, "env": dict(os.environ)}).encode("utf-8")
        try:
            with self._lock:
                socket.send_fds(self.control, [request], [theirs.fileno(), status_fd, log_fd])
        except OSError as e:
            ours.close()
            self.done()
            raise ZygoteGone(f"the process that starts isolated actions is gone ({e})") from None
        finally:
            theirs.close()
        try:
            pid = int(_read_line(ours))
        except (ValueError, OSError) as e:
            ours.close()
            self.done()
            raise ZygoteGone(f"the process that starts isolated actions ended ({e})") from None
        return Forked(pid, ours, self)

    def done(self) -> None:
        with _LOCK:
            self.active -= 1

    def close(self) -> None:
        self.control.close()  # end of file: it exits
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_LOCK = threading.Lock()
_ZYGOTES: dict[tuple, Zygote] = {}


def zygote_for(modules: tuple[str, ...]) -> Zygote:
    """The zygote that has imported `modules` in this working directory and environment, started
    if there is none, reserved for one `fork`; an idle one for the same modules in another directory
    or environment ends."""
    try:
        cwd = os.getcwd()
    except OSError:  # removed: the actions use absolute paths; a zygote started here shares its fate
        cwd = None
    key = (modules, cwd, tuple(sorted((k, v) for k, v in os.environ.items() if k not in VOLATILE_ENV)))
    with _LOCK:
        found = _ZYGOTES.get(key)
        if found is not None and found.alive():
            found.active += 1
            return found
        for other_key, other in list(_ZYGOTES.items()):
            if other_key[0] == modules and (other.active == 0 or not other.alive()):
                del _ZYGOTES[other_key]
                other.close()
        _ZYGOTES[key] = made = Zygote(modules)
        made.active += 1
        return made
