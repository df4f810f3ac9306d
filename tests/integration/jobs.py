"""Jobs the integration tests put: each does one thing a real job might do,
and records what it saw in files named by its data (absolute paths)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from runtime import Retry


def _append(path: str, line: str) -> None:
    with open(path, "a") as fh:
        fh.write(line + "\n")
        fh.flush()


def noop(job: Any) -> None:
    pass


def record(job: Any) -> None:
    """Appends 'jid attempt start end pid' to data["path"]; sleeps data["seconds"]."""
    start = time.time()
    time.sleep(job.data.get("seconds", 0))
    _append(job.data["path"], f"{job.jid} {job.attempt} {start} {time.time()} {os.getpid()}")


def alive(job: Any) -> None:
    """Writes 'jid attempt time' to data["path"] every 10 ms for data["seconds"],
    never calling job.heartbeat(): overlapping attempts would interleave."""
    end = time.time() + job.data["seconds"]
    while time.time() < end:
        _append(job.data["path"], f"{job.jid} {job.attempt} {time.time()}")
        time.sleep(0.01)


def spin(job: Any) -> None:
    """CPU-bound for data["seconds"], no heartbeats, then records completion."""
    end = time.monotonic() + job.data["seconds"]
    n = 0
    while time.monotonic() < end:
        n += 1
    _append(job.data["path"], f"{job.jid} {job.attempt} done")


def beat(job: Any) -> None:
    """Runs data["seconds"], calling job.heartbeat() every 0.2 s."""
    end = time.monotonic() + job.data["seconds"]
    while time.monotonic() < end:
        job.heartbeat()
        time.sleep(0.2)


def sleep(job: Any) -> None:
    time.sleep(job.data["seconds"])
    if "path" in job.data:
        _append(job.data["path"], f"{job.jid} {job.attempt} done")


def nap(job: Any) -> None:
    """Writes 'jid attempt start' to data["path"], sleeps data["seconds"], then
    'jid attempt done': tests wait for a job that really started in a child."""
    _append(job.data["path"], f"{job.jid} {job.attempt} start")
    time.sleep(job.data["seconds"])
    _append(job.data["path"], f"{job.jid} {job.attempt} done")


def crash(job: Any) -> None:
    os.kill(os.getpid(), job.data.get("signal", signal.SIGSEGV))
    time.sleep(5)


def exit_early(job: Any) -> None:
    sys.exit(0)


def os_exit(job: Any) -> None:
    os._exit(job.data.get("code", 3))


def litter_and_exit(job: Any) -> None:
    """Leaves files and a directory in its sandbox, records where, dies without reporting."""
    (job.sandbox / "secret.txt").write_text("left behind")
    (job.sandbox / "cache").mkdir()
    (job.sandbox / "cache" / "blob").write_bytes(b"x" * 1024)
    Path(job.data["path"]).write_text(str(job.sandbox))
    os._exit(3)


def hog_memory(job: Any) -> None:
    block = bytearray(job.data["mib"] * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(job.data.get("hold", 5))


def burn_cpu(job: Any) -> None:
    while True:
        pass


def ignore_term(job: Any) -> None:
    """Ignores SIGTERM for real (no Python handler runs), then never returns."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(0.01)


def garbage(job: Any) -> None:
    """Writes junk to the child's message socket (whatever fd it is)."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            sock = socket.socket(fileno=int(fd))
        except OSError:
            continue
        try:
            if sock.type == socket.SOCK_STREAM:
                sock.sendall(b"\x00\x00\x00\x05nope!")
        finally:
            sock.detach()
    time.sleep(2)


def try_fork(job: Any) -> None:
    """Records whether the child may start one more process: 'forked' or the error."""
    try:
        pid = os.fork()
    except OSError as err:
        _append(job.data["path"], type(err).__name__)
        return
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    _append(job.data["path"], "forked")


def last_words(job: Any) -> None:
    """Prints a lot, then its last words, then dies without reporting."""
    for i in range(job.data.get("lines", 1000)):
        print(f"line {i} " + "x" * 100)
    print("LAST WORDS before the crash")
    os._exit(3)


def spawn_daemon(job: Any) -> None:
    """Double-forks a daemon (setsid) that would sleep for a minute; records its pid."""
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(w, str(os.getpid()).encode())
            time.sleep(60)
            os._exit(0)
        os._exit(0)
    os.close(w)
    pid = os.read(r, 32).decode()
    _append(job.data["path"], pid)


def spawn_daemon_behind_a_slow_death(job: Any) -> None:
    """A daemon whose parent takes a while to die when killed (it frees 512 MiB it
    touched): the daemon becomes the child's only once that parent is dead."""
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        daemon = os.fork()
        if daemon == 0:
            time.sleep(60)
            os._exit(0)
        ballast = bytearray(512 << 20)
        for offset in range(0, len(ballast), 4096):
            ballast[offset] = 1
        os.write(w, str(daemon).encode())
        time.sleep(60)
        os._exit(0)
    os.close(w)
    _append(job.data["path"], os.read(r, 32).decode())


def describe_process(job: Any) -> None:
    """Records the child's environment, open fds, ids, cwd and parent."""
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the fd of the listing itself, closed by now
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    with open("/proc/self/status") as fh:
        status = dict(line.split(":", 1) for line in fh if ":" in line)
    Path("made-by-the-job.txt").write_text("x")
    info = {
        "env": dict(os.environ),
        "fds": fds,
        "uid": os.getuid(),
        "gid": os.getgid(),
        "cwd": os.getcwd(),
        "sandbox": str(job.sandbox),
        "ppid": os.getppid(),
        "no_new_privs": status.get("NoNewPrivs", "").strip(),
        "parent_threads": len(os.listdir(f"/proc/{os.getppid()}/task")),
        "sandbox_files": sorted(os.listdir(job.sandbox)),
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "nproc": resource.getrlimit(resource.RLIMIT_NPROC)[0],
        "groups": os.getgroups(),
    }
    Path(job.data["path"]).write_text(json.dumps(info))


def retry_once(job: Any) -> None:
    if job.attempt == 1:
        raise Retry(delay=0.1, reason="once more")
    _append(job.data["path"], f"{job.jid} {job.attempt} done")


def fail(job: Any) -> None:
    settings = dict(job.data)  # a local holding secrets: Sentry must not see them
    api_key = job.data.get("api_key")
    raise ValueError(f"failing on purpose ({len(settings)} fields, key set: {bool(api_key)})")


async def async_job(job: Any) -> None:
    await asyncio.sleep(0.01)
    loop = type(asyncio.get_running_loop()).__module__
    _append(job.data["path"], f"{job.jid} {loop}")


def chatty(job: Any) -> None:
    for i in range(job.data.get("lines", 100_000)):
        print(f"line {i} " + "x" * 100)
    print("THE END")
    raise RuntimeError("chatty job failed after printing a lot")


_kept: list[bytearray] = []


def grow_and_record(job: Any) -> None:
    """Keeps data["mib"] MiB alive in the child after it returns, then records."""
    block = bytearray(job.data["mib"] * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    _kept.append(block)
    record(job)


def ledger(job: Any) -> None:
    """One attempt in the ledger data["path"] (tests/support/fault_run.py reads it):
    'jid attempt pid start|alive|end time' lines, alive every 20 ms for
    data["seconds"] (or until the file data["until"] exists), never calling
    job.heartbeat(): a killed attempt's last line says when it last ran, and
    overlapping attempts show."""
    path, pid = job.data["path"], os.getpid()
    _append(path, f"{job.jid} {job.attempt} {pid} start {time.time()}")
    end = time.monotonic() + job.data.get("seconds", 0)
    until = job.data.get("until")
    while time.monotonic() < end or (until is not None and not os.path.exists(until)):
        time.sleep(max(0.0, min(0.02, end - time.monotonic())))
        _append(path, f"{job.jid} {job.attempt} {pid} alive {time.time()}")
    _append(path, f"{job.jid} {job.attempt} {pid} end {time.time()}")


def half_frame(job: Any) -> None:
    """Writes a frame header promising 1000 bytes on the child's socket to the master,
    then only one byte, then returns normally (its real report follows, shorter than
    the rest of the promise: the frame never completes)."""
    import stat  # noqa: PLC0415 - only this job needs it
    import struct  # noqa: PLC0415

    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            is_socket = fd > 2 and stat.S_ISSOCK(os.fstat(fd).st_mode)
        except OSError:  # the directory listing's own descriptor, gone by now
            continue
        if is_socket:
            os.write(fd, struct.pack("!I", 1000) + b"{")
            return


def talk(job: Any) -> dict[str, Any]:
    """Prints, writes to stderr and logs; returns a result."""
    import logging  # noqa: PLC0415

    print("to stdout", job.data.get("word", ""))
    print("to stderr", file=sys.stderr)
    logging.getLogger("jobs.talk").warning("a warning from the job")
    logging.getLogger("jobs.talk").info("an info from the job")
    return {"said": job.data.get("word", "")}


def flood(job: Any) -> None:
    """Prints data["mib"] MiB of short lines as fast as it can."""
    line = "y" * 63 + "\n"
    block = line * 1024  # 64 KiB
    for _ in range(job.data["mib"] * 16):
        sys.stdout.write(block)
    sys.stdout.flush()


def returns_object(job: Any) -> object:
    return object()


def put_follow_ups(job: Any) -> None:
    """Puts data["count"] jobs on data["queue"] (with the completion, or at once), then
    fails if data["fail"], else waits for data["path"] to exist if given."""
    for i in range(job.data["count"]):
        job.put(job.data["queue"], f"{__name__}:noop", {"i": i}, now=job.data.get("now", False))
    if job.data.get("path"):
        deadline = time.monotonic() + 10
        while not os.path.exists(job.data["path"]) and time.monotonic() < deadline:
            time.sleep(0.01)
    if job.data.get("fail"):
        raise RuntimeError("this attempt fails")


def fail_fast(job: Any) -> None:
    from runtime import Fail  # noqa: PLC0415

    raise Fail("address does not exist")


def lookup(job: Any) -> None:
    raise KeyError("permanent")


lookup.never_retry = (KeyError,)  # type: ignore[attr-defined]


def report_progress(job: Any) -> None:
    for i in range(1, 11):
        job.progress(i, 10, f"step {i}")


def sees_redis(job: Any) -> None:
    """Records whether this child could reach anything like Redis: its open sockets
    and the environment."""
    sockets = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            sockets += os.path.realpath(f"/proc/self/fd/{name}").startswith("socket:") or (
                os.readlink(f"/proc/self/fd/{name}").startswith("socket:")
            )
        except OSError:
            continue
    env = sorted(k for k in os.environ if "REDIS" in k or "SENTRY" in k)
    _append(job.data["path"], json.dumps({"sockets": sockets, "env": env}))


def echo(job: Any) -> Any:
    """Returns its data as its result."""
    return job.data
