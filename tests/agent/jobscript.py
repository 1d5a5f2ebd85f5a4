"""A stand-in for a user's job, run by the agent in tests. Standard library only (it starts fast).

    python jobscript.py [--pidfile F] [--child-pidfile F] [--append F TEXT] [--print TEXT]
                        [--err TEXT] [--count N [--every S]] [--partial TEXT]
                        [--print-ppid] [--print-env NAME]... [--bytes N] [--fill N] [--ignore-term] [--sleep S]
                        [--first-attempt-sleep S] [--exit N]

``--count`` prints ``out N`` on stdout and ``err N`` on stderr for N = 1..count, alternating, ``--every``
seconds apart (each flushed); ``--partial`` writes TEXT with no newline and waits ``--sleep``.
``--fill`` writes N bytes to ``$ZEN_OUTPUT_DIR/fill.bin``, 64 KiB at a time, each synced (its blocks on disk).

Actions happen in the order above; ``--append`` writes ``TEXT start`` before the sleep and
``TEXT end`` after it, so overlapping runs are visible in the file.
"""

import argparse
import os
import signal
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pidfile")
    parser.add_argument("--child-pidfile", help="fork a sleeping child in the same process group")
    parser.add_argument("--append", nargs=2, metavar=("FILE", "TEXT"))
    parser.add_argument("--print", dest="text")
    parser.add_argument("--err", help="print this on stderr")
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--every", type=float, default=0.0)
    parser.add_argument("--partial")
    parser.add_argument("--print-ppid", action="store_true")
    parser.add_argument("--bytes", type=int, default=0, help="write this many bytes of 'x' lines first")
    parser.add_argument("--fill", type=int, default=0, help="write this many bytes to $ZEN_OUTPUT_DIR/fill.bin")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--first-attempt-sleep", type=float, default=None,
                        help="sleep this long instead of --sleep when ZEN_JOB_ATTEMPT is 1")
    parser.add_argument("--exit", type=int, default=0)
    parser.add_argument("--print-env", action="append", default=[], metavar="NAME", help="print NAME=its value")
    args = parser.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.pidfile:
        write(args.pidfile, str(os.getpid()))
    if args.child_pidfile:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        write(args.child_pidfile, str(child.pid))
    if args.append:
        with open(args.append[0], "a") as out:
            out.write(f"{args.append[1]} start {time.time():.3f}\n")
    if args.bytes:
        line = "x" * 99 + "\n"
        sys.stdout.write(line * (args.bytes // 100))
    if args.fill:
        fill(os.path.join(os.environ["ZEN_OUTPUT_DIR"], "fill.bin"), args.fill)
    if args.text is not None:
        print(args.text)
    if args.err is not None:
        print(args.err, file=sys.stderr, flush=True)
    for number in range(1, args.count + 1):
        print(f"out {number}", flush=True)
        print(f"err {number}", file=sys.stderr, flush=True)
        time.sleep(args.every)
    if args.partial is not None:
        sys.stdout.write(args.partial)
    if args.print_ppid:
        # The job's parent is its supervisor (zen.agent.launch); the agent is the supervisor's parent.
        with open(f"/proc/{os.getppid()}/stat") as stat:
            print(f"ppid={stat.read().rsplit(')', 1)[1].split()[1]}")
    for name in args.print_env:
        print(f"{name}={os.environ.get(name, '')}")
    if args.partial is None:
        print(f"attempt={os.environ.get('ZEN_JOB_ATTEMPT')}")
    if args.first_attempt_sleep is not None and os.environ.get("ZEN_JOB_ATTEMPT") == "1":
        args.sleep = args.first_attempt_sleep
    sys.stdout.flush()
    if args.ignore_term:  # keep sleeping through SIGTERM
        deadline = time.time() + args.sleep
        while time.time() < deadline:
            time.sleep(0.05)
    else:
        time.sleep(args.sleep)
    if args.append:
        with open(args.append[0], "a") as out:
            out.write(f"{args.append[1]} end {time.time():.3f}\n")
    print(f"exiting with {args.exit}", flush=True)
    return args.exit


def fill(path: str, size: int) -> None:
    chunk = b"x" * 65536
    with open(path, "wb") as out:
        while size > 0:
            out.write(chunk[:size])
            out.flush()
            os.fsync(out.fileno())
            size -= len(chunk)
    print(f"filled {path}", flush=True)


def write(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as out:
        out.write(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
