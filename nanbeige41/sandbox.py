"""The sandbox that runs untrusted code for code_judge.py (paper section 2.3): `run_tests(code, inputs)`.

- bubblewrap when installed, else `unshare` + a chroot built on a tmpfs, both with PID/net/IPC/UTS/mount
  namespaces, a read-only system view, a private size-limited tmpfs work directory, an empty environment, a
  random unprivileged uid (so RLIMIT_NPROC works: it does nothing for root), no_new_privs and rlimits; the
  wall clock is enforced from here with SIGKILL. Without root it degrades to rlimits only ("none"; refuse
  with require_full_isolation).
- Inside, a small harness (nanbeige41/sandbox_harness.py) forks one process per test; the program's process
  has no channel to the judge, only the harness writes the per-test records, and a per-run nonce after the
  last test proves the run reached the end. The child never holds an expected output, and it reads each
  test's input over the pipe just before that test runs. A timeout or a killed harness costs that test
  only: a new sandbox resumes at the next test.
- Lockstep (timing) runs: the harness waits for a go byte from here before each test, and the gap
  "byte sent -> record received" is measured here, never by the child. Test runs and timing runs use the
  same protocol and the same limits, so a program cannot tell them apart.
- Sandboxes are started ahead (POOL_SIZE, $NANBEIGE_JUDGE_POOL; 0 disables) and each serves one candidate.
"""
import atexit
import contextlib
import marshal
import math
import os
import secrets
import select
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

FORCE_FALLBACK_ENV = "NANBEIGE_JUDGE_NO_BWRAP"  # "1": never use bubblewrap (tests run the battery both ways)
UID_BASE = 1 << 20  # sandbox uids are drawn from [UID_BASE, 2*UID_BASE): no real account lives there
ISSUED_UIDS = set()  # the sandbox uids this process has handed out


class SandboxError(RuntimeError):
    """The sandbox cannot run as requested (e.g. full isolation required but unavailable)."""


@dataclass
class Limits:
    time_s: float = 4.0            # wall clock per test, enforced from the parent with SIGKILL
    memory_mb: int = 1024          # RLIMIT_AS of the program
    output_bytes: int = 8 << 20    # stdout cap per test (beyond it: OLE)
    tmpfs_mb: int = 64             # size of the private /sandbox, /tmp and /dev/shm
    nofile: int = 64
    nproc: int = 32                # per sandbox: every run gets its own uid, so the count is per run
    startup_s: float = 5.0         # extra allowance for the first test of a process (start, imports)
    compile_s: float = 30.0        # wall clock (and CPU) for g++
    compile_memory_mb: int = 1024  # RLIMIT_AS of g++ (an ordinary program with bits/stdc++.h needs ~0.2 GB)
    stop_after_tle: bool = False   # RL: after a timed-out test, the rest count as TLE unrun (an endless
                                   # loop would otherwise cost time_s on every test of every rollout)

    def __post_init__(self):
        # A negative, zero or NaN limit would silently score every program as a failure.
        for name in ("time_s", "memory_mb", "output_bytes", "tmpfs_mb", "nofile", "nproc", "startup_s",
                     "compile_s", "compile_memory_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive finite number, got {value!r}")
        for name in ("memory_mb", "output_bytes", "tmpfs_mb", "nofile", "nproc", "compile_memory_mb"):
            if not isinstance(getattr(self, name), int):
                raise ValueError(f"Limits.{name} must be an integer, got {getattr(self, name)!r}")


_ISOLATION = {}  # backend choice, probed once per process


def _python():
    return os.path.realpath(sys.executable)


def _system_binds():
    """Paths the child needs read-only: /usr (+ merged-/usr symlinks), the Python install."""
    binds, links = ["/usr"], []
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            links.append((os.readlink(top), top))
        elif os.path.isdir(top):
            binds.append(top)
    for extra in ("/etc/ld.so.cache", "/etc/alternatives"):
        if os.path.exists(extra):
            binds.append(extra)
    for p in sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix), os.path.dirname(_python())}):
        if not any(p == b or p.startswith(b + "/") for b in binds):
            binds.append(p)
    return binds, links


def _bwrap_argv(limits):
    binds, links = _system_binds()
    size = str(limits.tmpfs_mb << 20)
    # --as-pid-1: the harness is the namespace's init (bwrap's own reaper process cost ~0.8 ms of CPU
    # per run); when it dies the kernel kills everything left in the namespace, as before.
    argv = ["bwrap", "--unshare-pid", "--as-pid-1", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8", "--setenv", "TMPDIR", "/tmp"]
    made = set()
    for b in binds:
        # parents must be traversable by the sandbox uid (bwrap would copy /root's 0700 otherwise)
        parts = b.strip("/").split("/")[:-1]
        for k in range(1, len(parts) + 1):
            d = "/" + "/".join(parts[:k])
            if d not in made and d not in binds:
                made.add(d)
                argv += ["--perms", "0755", "--dir", d]
        argv += ["--ro-bind", b, b]
    for target, name in links:
        argv += ["--symlink", target, name]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for d in ("/tmp", "/dev/shm", "/sandbox"):
        argv += ["--perms", "1777", "--size", size, "--tmpfs", d]
    return argv + ["--chdir", "/sandbox", "--remount-ro", "/", "--"]


def _unshare_argv(limits):
    # No bubblewrap: build the same view by hand inside fresh namespaces. The tmpfs is mounted over
    # /tmp of the *private* mount namespace (nothing changes on the host) and becomes the new root.
    # All other mounts are lines of one fstab read by a single `mount --all`: one `mount`/`mkdir`
    # exec per step was ~30 execs at ~1 ms each, most of the fallback's cost.
    binds, links = _system_binds()
    size, root = f"{limits.tmpfs_mb}m", "/tmp"
    devices = ("null", "zero", "random", "urandom")
    dirs = {root + d for d in ("/proc", "/dev/shm", "/tmp", "/sandbox")}
    files = [f"{root}/dev/{dev}" for dev in devices]
    fstab = []
    for b in binds:
        if os.path.isdir(b):
            dirs.add(root + b)
        else:
            dirs.add(root + os.path.dirname(b))
            files.append(root + b)
        fstab.append(f"{b} {root}{b} none bind,ro 0 0")  # libmount does the read-only remount itself
    fstab.append(f"proc {root}/proc proc defaults 0 0")
    fstab += [f"/dev/{dev} {root}/dev/{dev} none bind 0 0" for dev in devices]
    fstab += [f"none {root}{d} tmpfs size={size},mode=1777 0 0" for d in ("/tmp", "/dev/shm", "/sandbox")]
    lines = ["set -e", f"mount -t tmpfs -o size={size},mode=755 none {root}", "mkdir -p " + " ".join(sorted(dirs))]
    lines += [f": > {f}" for f in files]  # bind targets for files (a shell builtin, no exec)
    # merged /usr: /bin -> usr/bin, ... are made by one `ln` (it names each link after its target)
    same = [target for target, name in links if name == "/" + os.path.basename(target)]
    lines += [f"ln -s {' '.join(same)} {root}/"] if same else []
    lines += [f"ln -s {target} {root}{name}" for target, name in links if target not in same]
    # libmount cannot parse a pipe, so the fstab is a file, in the directory that the /tmp tmpfs of
    # its last lines then covers: never visible to the program.
    lines += [f"printf '%s\\n' {' '.join(shlex.quote(line) for line in fstab)} > {root}/tmp/fstab",
              f"mount --all --fstab {root}/tmp/fstab", f"mount -o remount,ro {root}"]
    # sh stays PID 1 (the harness is PID 2); when it exits the namespace dies.
    lines.append(f'chroot {root} /usr/bin/env -i -C /sandbox PATH=/usr/bin:/bin LANG=C.UTF-8 TMPDIR=/tmp "$@"')
    return ["unshare", "--pid", "--fork", "--kill-child", "--net", "--mount", "--ipc", "--uts",
            "--", "/bin/sh", "-c", "\n".join(lines), "sh"]


def _probe(argv):
    try:
        r = subprocess.run(argv + [_python(), "-I", "-S", "-c", "print(6*7)"], capture_output=True,
                           timeout=20, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        return r.returncode == 0 and r.stdout.strip() == b"42"
    except (OSError, subprocess.TimeoutExpired):
        return False


def isolation_backend(prefer="auto"):
    """'bwrap', 'unshare' or 'none'. prefer='auto' takes bwrap unless $NANBEIGE_JUDGE_NO_BWRAP=1."""
    if prefer == "auto":
        prefer = "unshare" if os.environ.get(FORCE_FALLBACK_ENV) == "1" else "bwrap"
    order = {"bwrap": ["bwrap", "unshare", "none"], "unshare": ["unshare", "none"], "none": ["none"]}[prefer]
    for backend in order:
        if backend not in _ISOLATION:
            if backend == "none":
                _ISOLATION[backend] = True
            elif shutil.which(backend) is None or os.geteuid() != 0:
                # unprivileged: bwrap/unshare would need user namespaces and could not switch uid
                _ISOLATION[backend] = False
            else:
                argv = _bwrap_argv(Limits()) if backend == "bwrap" else _unshare_argv(Limits())
                _ISOLATION[backend] = _probe(argv)
        if _ISOLATION[backend]:
            return backend
    return "none"


def sandbox_features(backend):
    full = backend in ("bwrap", "unshare")
    return {"backend": backend, "pid_namespace": full, "net_namespace": full, "ipc_namespace": full,
            "mount_namespace": full, "readonly_root": full, "private_tmp": full, "unprivileged_uid": full,
            "no_new_privs": full, "scrubbed_env": True, "python_isolated": True,
            "rlimits": ["cpu", "as", "fsize", "nofile", "nproc", "core"], "wall_clock_kill": True,
            "full": full}


# What the sandboxed Python is started with (`-c`): it reads the harness (sandbox_harness.py), compiled
# and marshalled once in this process, from stdin and runs it. Compiling the harness from source in every
# sandbox cost ~2-3 ms of CPU per run, a fifth of the sandbox's whole overhead. Both messages on stdin are
# "LENGTH\n" + LENGTH bytes, written by the judge (trusted); the interpreter is the same binary on both
# sides, so the marshal format matches.
BOOTSTRAP = r'''
import os, marshal
def read_exact(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk: raise SystemExit(3)
        data += chunk
    return data
def read_message():
    header = b""
    while not header.endswith(b"\n"): header += read_exact(1)
    return read_exact(int(header))
exec(marshal.loads(read_message()))
'''
HARNESS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_harness.py")
with open(HARNESS_PATH, encoding="utf-8") as _f:
    _HARNESS_CODE = marshal.dumps(compile(_f.read(), "<harness>", "exec"))
HARNESS_MESSAGE = str(len(_HARNESS_CODE)).encode() + b"\n" + _HARNESS_CODE


@dataclass
class TestRun:
    status: str          # harness status: ok / RE / MLE / OLE / WA (unserialisable return) / TLE / CE
    output: object       # captured stdout (stdin tests) or the JSON text of the return value
    seconds: float       # wall time measured here, between consecutive records of the child
    detail: str = ""


def _start(backend, limits, workdir=None):
    prefix = {"bwrap": _bwrap_argv, "unshare": _unshare_argv}.get(backend, lambda _l: [])(limits)
    argv = prefix + [_python(), "-I", "-S", "-B", "-X", "utf8", "-c", BOOTSTRAP]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}, start_new_session=True,
                            cwd=workdir or "/")
    # ~14 KB: fits the pipe buffer, so this never blocks; the spec follows in _spawn. A sandbox that
    # died at start raises here: _take sees that, or the run reports the broken sandbox.
    with contextlib.suppress(BrokenPipeError, OSError):
        proc.stdin.write(HARNESS_MESSAGE)
        proc.stdin.flush()
    return proc


# Warm sandboxes. Starting bwrap + Python costs about twice a bare `python -I -S` run, so a few
# sandboxes are started ahead and wait, blocked on reading their spec, with no code inside. Each is
# used for exactly one candidate (a fresh process and namespace per candidate, as before). They are
# started by one long-lived thread because --die-with-parent follows the *thread* that forked.
POOL_SIZE = int(os.environ.get("NANBEIGE_JUDGE_POOL", "2"))
_POOL = {}                          # (backend, tmpfs_mb) -> idle started sandboxes
_POOL_WANT = threading.Condition()  # guards _POOL; notified when one was taken
_POOL_FILLER = []                   # the filler thread, started on first use
_POOL_EPOCH = [0]                   # bumped by shutdown_pool: sandboxes started before it are not pooled
_POOL_BUSY = [False]                # the filler is starting sandboxes (shutdown_pool waits for it)


def _pool_filler():
    while True:
        with _POOL_WANT:
            todo = [(key, POOL_SIZE - len(procs)) for key, procs in _POOL.items() if len(procs) < POOL_SIZE]
            if not todo:
                _POOL_WANT.wait()
                continue
            epoch = _POOL_EPOCH[0]
            _POOL_BUSY[0] = True
        for key, missing in todo:
            started = [_start(key[0], Limits(tmpfs_mb=key[1])) for _ in range(missing)]
            with _POOL_WANT:
                if _POOL_EPOCH[0] == epoch and key in _POOL:
                    _POOL[key].extend(started)
                    started = []
            for proc in started:  # a shutdown happened while these were starting: they go too
                _discard(proc)
        with _POOL_WANT:
            _POOL_BUSY[0] = False
            _POOL_WANT.notify_all()


def _discard(proc):
    _kill(proc)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        stream.close()


def _take(backend, limits, workdir=None):
    if POOL_SIZE <= 0 or backend == "none":  # "none" runs in a per-run temp dir: nothing to prepare
        return _start(backend, limits, workdir)
    key = (backend, limits.tmpfs_mb)
    with _POOL_WANT:
        if not _POOL_FILLER:
            _POOL_FILLER.append(threading.Thread(target=_pool_filler, daemon=True, name="code_judge_pool"))
            _POOL_FILLER[0].start()
        procs = _POOL.setdefault(key, [])
        proc = None
        while procs and proc is None:
            candidate = procs.pop(0)
            if candidate.poll() is None:
                proc = candidate
            else:
                _kill(candidate)
        _POOL_WANT.notify()
    return proc or _start(backend, limits)


def shutdown_pool():
    """Kill the idle warm sandboxes (they also die with this process)."""
    with _POOL_WANT:
        _POOL_EPOCH[0] += 1
        procs = [p for ps in _POOL.values() for p in ps]
        _POOL.clear()  # no keys left: the filler has nothing to refill until the next _take
        deadline = time.monotonic() + 30
        while _POOL_BUSY[0] and time.monotonic() < deadline:  # let a start in flight finish and discard itself
            _POOL_WANT.wait(0.1)
    for proc in procs:
        _discard(proc)


atexit.register(shutdown_pool)


def _input_message(text):
    data = text.encode()
    return b"%010d" % len(data) + data


def _spawn(backend, limits, spec, inputs, lockstep=False, workdir=None):
    # Per test the harness reads that test's input, answers "W" and waits for one go byte. In a
    # test run all inputs and go bytes follow the spec at once; in lockstep the judge sends input
    # k+1 after record k and the go byte on "W" (it times go -> record). Same protocol either way.
    proc = _take(backend, limits, workdir)
    # "none" keeps the caller's uid: a random uid could not even read a Python under /root
    uid = None if backend == "none" else UID_BASE + secrets.randbelow(UID_BASE)
    if uid is not None:
        ISSUED_UIDS.add(uid)  # lets a caller (the security tests) find leftovers of its own runs only
    spec = dict(spec, uid=uid, nnp=(backend == "unshare"))
    body = marshal.dumps(spec)
    payload = str(len(body)).encode() + b"\n" + body
    if lockstep:
        payload += _input_message(inputs[0])
    else:
        payload += b"".join(_input_message(text) + b"g" for text in inputs)

    def feed():
        _write(proc, payload)
        if not lockstep:  # lockstep: the judge keeps stdin open for the next inputs and go bytes
            with contextlib.suppress(BrokenPipeError, OSError):
                proc.stdin.close()
    if len(payload) < 60000:  # fits the pipe buffer: no thread needed
        feed()
    else:  # in a thread: a payload larger than the pipe buffer must not block the reader
        threading.Thread(target=feed, daemon=True).start()
    return proc


def _write(proc, data):
    with contextlib.suppress(BrokenPipeError, OSError, ValueError):  # the sandbox is gone (its record says why)
        proc.stdin.write(data)
        proc.stdin.flush()


def _kill(proc, namespaced=True):
    """SIGKILL the sandbox and wait until its PID namespace is gone. The namespace's init is the
    launcher's child; a dying init first kills and reaps every process of its namespace, so once
    it has exited (its pidfd turns readable: no polling) no daemon, fork bomb or setsid child of the
    run can be left. The launcher (bwrap / unshare, root, outside the namespace) then reaps the init
    and exits by itself; it is killed only after that, so the init, which runs under the sandbox uid
    with bwrap --as-pid-1, is never left as a zombie for the host's init to collect. pidfds need
    Linux >= 5.3. namespaced=False ("none" backend): the launcher is the harness; kill it at once."""
    try:
        inits = [int(p) for p in open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()]
    except (OSError, ValueError):
        inits = []
    pidfds = []
    for pid in inits:  # one that already exited and was reaped has no namespace left: skipped
        with contextlib.suppress(ProcessLookupError):
            pidfds.append(os.pidfd_open(pid))  # from here on the fd names this process, never a reused pid
    for fd in pidfds:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    deadline = time.monotonic() + 10
    for fd in pidfds:  # readable once it has exited: its namespace is empty by then
        select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        os.close(fd)
    if namespaced and pidfds and proc.returncode is None:  # not reaped by us: its pid cannot be reused
        launcher = os.pidfd_open(proc.pid)
        select.select([launcher], [], [], 1.0)
        os.close(launcher)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, 9)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()


def run_tests(code, inputs, *, lang="python", mode="stdin", func_name=None, limits=None, isolation="auto",
              require_full_isolation=False, stop_after_s=None, lockstep=False, time_limits=None):
    """Run one program on many inputs, as few processes as safely possible.

    Returns (list of TestRun, one per input, sandbox feature dict). A crash, timeout or early exit at
    test k costs that test only: the next process resumes at k+1. `stop_after_s`: stop (without a
    verdict for the rest) once one test took longer than this. `lockstep`: the child waits for a
    byte from here before each test, so `seconds` is exactly "go sent -> result received", measured
    here (the complexity judge uses this; the child's own clock is never trusted). `time_limits`: a
    wall-clock kill limit per input instead of limits.time_s (the complexity judge runs a candidate
    on the reference's clock). Nothing of these options is visible to the program.
    """
    limits = limits or Limits()
    backend = isolation_backend(isolation)
    features = sandbox_features(backend)
    if require_full_isolation and not features["full"]:
        raise SandboxError(f"full isolation required but only '{backend}' is available "
                           "(install bubblewrap, or run as root with util-linux unshare)")
    if lang not in ("python", "cpp"):
        raise SandboxError(f"unknown language {lang!r} (python or cpp)")
    if lang == "cpp" and shutil.which("g++") is None:
        return [TestRun("CE", "", 0.0, "g++ not installed") for _ in inputs], features
    n = len(inputs)
    if time_limits is not None and (len(time_limits) != n or not all(t > 0 for t in time_limits)):
        raise ValueError(f"time_limits: need {n} positive values, got {time_limits!r}")
    results = [None] * n

    def time_limit(i):
        return limits.time_s if time_limits is None else time_limits[i]
    max_input = max((len(s.encode()) for s in inputs), default=0)
    start = 0
    while start < n:
        todo = list(range(start, n))
        test_cpu = int(math.ceil(limits.time_s + limits.startup_s)) + 1  # per process: harness, program
        spec = {"code": code, "count": len(todo), "lang": lang, "mode": mode,
                "func_name": func_name, "nonce": secrets.token_hex(16),
                "limits": {"nofile": limits.nofile, "nproc": limits.nproc, "output": limits.output_bytes,
                           "fsize": max(limits.output_bytes, max_input) + (1 << 20),
                           "fsize_test": limits.output_bytes + (1 << 20), "cpu_test": test_cpu,
                           "cpu_hard": max(test_cpu, int(math.ceil(limits.compile_s))),
                           "as": limits.memory_mb << 20, "compile_as": limits.compile_memory_mb << 20,
                           "compile_cpu": int(math.ceil(limits.compile_s))}}
        workdir = tempfile.mkdtemp(prefix="code_judge_") if backend == "none" else None
        proc = _spawn(backend, limits, spec, [inputs[i] for i in todo], lockstep, workdir)
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        buf, err_bytes, open_streams = b"", 0, 2
        channel_cap = len(todo) * (2 * limits.output_bytes + 4096) + (1 << 20)
        received, ended, failure = 0, False, None
        pos = 0  # index into todo of the test now running
        waiting_compile, ready = lang == "cpp", False
        last = time.monotonic()
        deadline = last + limits.startup_s
        while open_streams and not ended and failure is None:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                failure = "TLE"
                break
            for key, _ in sel.select(timeout):
                chunk = os.read(key.fileobj.fileno(), 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                if key.data == "err":
                    err_bytes += len(chunk)  # stderr is drained and dropped; only its size matters
                    if err_bytes > 4 * limits.output_bytes:
                        failure = "OLE"
                    continue
                buf += chunk
                received += len(chunk)
                if received > channel_cap:
                    failure = "OLE"
                    break
                while not ended and failure is None:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        break
                    fields = buf[:nl].split()
                    try:
                        length = int(fields[-1])
                    except (IndexError, ValueError):
                        failure = "RE"  # not the harness's framing: the run is broken
                        break
                    if len(buf) < nl + 1 + length:
                        break
                    body, buf = buf[nl + 1:nl + 1 + length], buf[nl + 1 + length:]
                    kind, now = fields[0], time.monotonic()
                    if kind == b"C":
                        for i in todo:
                            results[i] = TestRun("CE", "", 0.0, body.decode("utf-8", "replace")[:2000])
                        ended = True
                    elif kind == b"Y" and not ready:
                        ready = True
                        last, deadline = now, now + (limits.compile_s if waiting_compile else time_limit(todo[pos]))
                    elif kind == b"K" and waiting_compile:
                        waiting_compile = False
                        last, deadline = now, now + time_limit(todo[pos])
                    elif kind == b"W" and pos < len(todo):  # test `pos` is ready: its clock starts now
                        if lockstep:
                            _write(proc, b"g")
                        last = time.monotonic()
                        deadline = last + time_limit(todo[pos])
                    elif kind == b"E":
                        ended = body.decode("ascii", "replace") == spec["nonce"] and pos == len(todo)
                        if not ended:
                            failure = "RE"  # an end marker without the nonce or before the last test
                    elif kind == b"R" and len(fields) == 5 and fields[1] == str(pos).encode() and pos < len(todo):
                        status = fields[2].decode() if fields[2] in (b"ok", b"RE", b"MLE", b"OLE", b"WA") else "RE"
                        detail = "" if status == "ok" else f"exit status {fields[3].decode()}"
                        results[todo[pos]] = TestRun(status, body.decode("utf-8", "replace"), now - last, detail)
                        if stop_after_s is not None and pos > 0 and now - last > stop_after_s:
                            for i in todo[pos + 1:]:
                                results[i] = TestRun("SKIP", "", 0.0, "stopped: previous size over budget")
                            ended = True
                        pos += 1
                        last = time.monotonic()
                        deadline = last + (time_limit(todo[pos]) if pos < len(todo) else limits.time_s)
                        if lockstep and pos < len(todo):
                            _write(proc, _input_message(inputs[todo[pos]]))
                if failure:
                    break
        _kill(proc, namespaced=backend != "none")
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        sel.close()
        for stream in (proc.stdout, proc.stderr, proc.stdin):
            with contextlib.suppress(OSError):
                stream.close()
        if ended:
            break
        if pos < len(todo):
            if waiting_compile:
                for i in todo:
                    results[i] = TestRun("CE", "", 0.0, "compiler killed (time or output limit)")
                break
            seconds = time.monotonic() - last
            results[todo[pos]] = TestRun(failure or "RE", "", seconds, "process ended before reporting this test")
            pos += 1
            if failure == "TLE" and limits.stop_after_tle:
                for i in todo[pos:]:
                    results[i] = TestRun("TLE", "", 0.0, "not run: an earlier test timed out (stop_after_tle)")
                break
        elif failure:  # all tests reported but the run did not end properly: the last one is suspect
            results[todo[-1]] = TestRun("RE", "", results[todo[-1]].seconds, "run did not reach its end marker")
        start = todo[pos] if pos < len(todo) else n
    return results, features
