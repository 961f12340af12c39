"""code_judge.py: the sandboxed code judge of Nanbeige4.1-3B (paper section 2.3, Figure 3, Appendix C).

The paper's "unified judge system" is shared by SFT data filtering, RL data construction, code RL
(stages code1 and code2) and evaluation. This file implements it for this project:

  * problems in the LiveCodeBench layout (`load_problems`), including real LCB dumps as they are:
    test cases as JSON strings, private tests as base64(zlib(pickle(json))) read with a pickle loader
    that refuses every global, so a hostile dump cannot run code;
  * a sandbox (`run_tests`): bubblewrap when installed, else `unshare` + a chroot built on a tmpfs,
    both with PID/net/IPC/UTS/mount namespaces, a read-only system view, a private size-limited tmpfs
    work directory, an empty environment, a random unprivileged uid (so RLIMIT_NPROC works: it does
    nothing for root), no_new_privs and rlimits; the wall clock is enforced from here with SIGKILL;
  * per-test verdicts AC/WA/TLE/MLE/RE/OLE/CE for stdin programs (Python, C++ via g++) and
    LeetCode-style functional tests, many tests per process, candidates in parallel (`judge_many`);
  * the time-complexity judge (`measure_complexity`, `model_complexity`, `judge_complexity`):
    measured on generated inputs of growing size and fitted to O(1)..O(2^n), plus an "instruct judge
    model" over any OpenAI-compatible endpoint (or a callable), compared against `optimal_complexity`;
  * the gated reward of section 2.3.3 (`reward_components`):
        R = R_format + R_correctness            if PassRate < 1
        R = R_format + R_correctness + R_time   if PassRate = 1
    with weights as arguments and every component returned, so training can log them (Figure 4).

The design rule that defeats known reward hacks: the child never holds an expected output. It gets
test inputs only and prints results (functional tests: the returned value re-serialised through the
exact base types, so a lying __eq__/__repr__ or an int subclass cannot pass); this process compares.
Inside the sandbox a small harness (HARNESS) forks one process per test; the program's process has
no channel to the judge, only the harness writes the per-test records, and a per-run nonce after the
last test proves the run reached the end. A timeout or a killed harness costs that test only: a new
sandbox resumes at the next test. A verdict never depends on what the program says about itself.
Sandboxes are started ahead (POOL_SIZE, $NANBEIGE_JUDGE_POOL; 0 disables) and each serves one
candidate only. The complexity judge times tests in lockstep (the harness waits for a byte from here
before each test; the gap "byte sent -> record received" is measured here, never by the child).

What the reward pays for, and why it cannot be had for less (the README's security section lists
each attack class and its test):
  * a program cannot tell a timing run from a test run: one harness protocol for both, the same
    limits, and the forked child empties its copy of the harness state before the program runs;
  * R_time needs every size the reference finished, finished too, with the reference's outputs;
    the candidate runs on the reference's clock (killed at 2 * RATIO_LIMIT its time per size), so a
    program that crashes, stalls or sleeps on large inputs gets nothing and costs ~a second;
  * a reference in another language (Python for a C++ candidate) decides nothing about constants:
    the candidate's own growth (log-log slope at its largest sizes) is compared with the optimal class;
  * outputs compare as LiveCodeBench does (exact decimals: 1e+18 != 10^18 + 1), in linear time, a
    tolerance only for floats on both sides; any output the judge cannot parse is WA, never a crash;
  * input generators from a data file run in the sandbox; g++ runs under memory and time limits;
  * the model complexity judge sees the code without comments or strings, and its class comes from
    one JSON field of its answer.

Run:
    python code_judge.py --problem data/toy/code_problems.jsonl --id toy_pair_sum_000 --code sol.py --complexity --json
    echo "print(1)" | python code_judge.py --problem P.json --code - --json
    NANBEIGE_JUDGE_NO_BWRAP=1 python code_judge.py ...   # force the unshare fallback
    python -m pytest tests/test_code_judge*.py            # includes the hostile-program battery
    python bench/bench_code_judge.py                      # execs/s vs bare, complexity accuracy
Library (what training calls): code_reward / code_rewards (GRPO code1/code2), reward_components,
judge / judge_many, run_tests, judge_complexity / cached_complexity, load_problems.
Problem fields beyond LiveCodeBench's (all optional): input_generator (Python source of
gen(n, seed) -> str), reference_solution (Python) and reference_solutions ({"cpp": source, ...}),
optimal_complexity ("O(n log n)", ...).

Not covered: languages other than Python and C++; Python programs run with `-I -S` (no
site-packages, so no numpy inside solutions); measured complexity of stdin programs includes reading
the input, so nothing below O(n) is observable and O(1)/O(log n) cannot be separated; the measured
judge cannot reliably separate O(n) from O(n log n) and says so (`separable: false`), and in the
`fast` setting its class label is indicative only (meets_optimal there rests on the time ratio to the
reference, which separates O(n^2) from O(n) with a wide margin); a cgroup memory limit (RLIMIT_AS
counts virtual memory, an approximation of "memory"); seccomp filters. Without root the sandbox
degrades to rlimits only ("none"; refuse with require_full_isolation / --require-full-isolation).
"""
import argparse
import atexit
import contextlib
import base64
import hashlib
import io
import json
import marshal
import math
import os
import pickle
import re
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
import tokenize
import zlib
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation

import numpy as np

from nanbeige41.cli import finite_float, non_negative_float, positive_float, positive_int

VERDICTS = ("AC", "WA", "TLE", "MLE", "RE", "OLE", "CE")
FORCE_FALLBACK_ENV = "NANBEIGE_JUDGE_NO_BWRAP"  # "1": never use bubblewrap (tests run the battery both ways)
UID_BASE = 1 << 20  # sandbox uids are drawn from [UID_BASE, 2*UID_BASE): no real account lives there
ISSUED_UIDS = set()  # the sandbox uids this process has handed out


class ProblemError(ValueError):
    """A problem file or record is unreadable; the message names file, line and field."""


class SandboxError(RuntimeError):
    """The sandbox cannot run as requested (e.g. full isolation required but unavailable)."""


# ----------------------------------------------------------------------------- problems

class _NoGlobalsUnpickler(pickle.Unpickler):
    # LCB private tests are a pickled JSON *string*; refusing every global means a hostile dump can
    # at most build str/list/dict, never call a function.
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"global {module}.{name} refused")


def _decode_tests(value, where):
    if value is None or value == "":
        return []
    if isinstance(value, str):
        text = value.strip()
        try:
            if text.startswith("["):
                value = json.loads(text)
            else:  # LiveCodeBench private_test_cases: base64(zlib(pickle(json string)))
                obj = _NoGlobalsUnpickler(io.BytesIO(zlib.decompress(base64.b64decode(text)))).load()
                value = json.loads(obj) if isinstance(obj, (str, bytes)) else obj
        except Exception as e:
            raise ProblemError(f"{where}: cannot decode test cases ({type(e).__name__}: {e})") from None
    if not isinstance(value, list):
        raise ProblemError(f"{where}: test cases must be a list, got {type(value).__name__}")
    tests = []
    for k, t in enumerate(value):
        if not isinstance(t, dict) or not isinstance(t.get("input"), str) or not isinstance(t.get("output"), str):
            raise ProblemError(f"{where}[{k}]: each test needs string 'input' and 'output'")
        testtype = t.get("testtype", "stdin")
        if testtype not in ("stdin", "functional"):
            raise ProblemError(f"{where}[{k}]: testtype must be 'stdin' or 'functional', got {testtype!r}")
        tests.append({"input": t["input"], "output": t["output"], "testtype": testtype})
    return tests


def normalize_problem(raw, where="<problem>"):
    """One LCB-style record -> dict with decoded test lists and metadata dict (other fields kept)."""
    if not isinstance(raw, dict):
        raise ProblemError(f"{where}: a problem must be a JSON object")
    if "question_id" not in raw:
        raise ProblemError(f"{where}: field 'question_id' missing")
    problem = dict(raw)
    problem["question_id"] = str(raw["question_id"])
    problem.setdefault("question_content", "")
    problem["starter_code"] = raw.get("starter_code") or ""
    metadata = raw.get("metadata") or {}
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata) if metadata.strip() else {}
        except json.JSONDecodeError as e:
            raise ProblemError(f"{where}: field 'metadata': {e}") from None
    problem["metadata"] = metadata
    for field in ("public_test_cases", "private_test_cases"):
        problem[field] = _decode_tests(raw.get(field), f"{where}: field '{field}'")
    if not isinstance(metadata, dict):
        raise ProblemError(f"{where}: field 'metadata' must be an object, got {type(metadata).__name__}")
    tests = problem["public_test_cases"] + problem["private_test_cases"]
    if not tests:
        raise ProblemError(f"{where}: no test cases")
    kinds = {t["testtype"] for t in tests}
    if len(kinds) > 1:  # one program cannot be both a stdin program and a class Solution
        raise ProblemError(f"{where}: tests mix 'stdin' and 'functional' testtype; a problem has one kind")
    func_name = metadata.get("func_name")
    if kinds == {"functional"} and not func_name:
        raise ProblemError(f"{where}: functional tests need field 'metadata.func_name'")
    if func_name is not None and not (isinstance(func_name, str) and func_name.isidentifier()):
        raise ProblemError(f"{where}: field 'metadata.func_name' must be a method name, got {func_name!r}")
    for field in ("input_generator", "reference_solution", "optimal_complexity"):
        if raw.get(field) is not None and not isinstance(raw[field], str):
            raise ProblemError(f"{where}: field '{field}' must be a string, got {type(raw[field]).__name__}")
    refs = raw.get("reference_solutions")
    if refs is not None and not (isinstance(refs, dict) and all(k in LANG_TAGS and isinstance(v, str)
                                                                for k, v in refs.items())):
        raise ProblemError(f"{where}: field 'reference_solutions' must map python/cpp to source strings")
    if raw.get("optimal_complexity") and parse_complexity(raw["optimal_complexity"]) is None:
        raise ProblemError(f"{where}: field 'optimal_complexity' {raw['optimal_complexity']!r} is not a known class")
    return problem


def load_problems(path):
    """Read .json (one object or a list) or .jsonl; every error names path, line and field."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise ProblemError(f"{path}: cannot read ({e.strerror})") from None
    records = []
    if path.endswith(".jsonl"):
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append((f"{path}:{lineno}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise ProblemError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
    else:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ProblemError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
        items = obj if isinstance(obj, list) else [obj]
        records = [(f"{path}[{k}]" if isinstance(obj, list) else path, r) for k, r in enumerate(items)]
    return [normalize_problem(r, where) for where, r in records]


def all_tests(problem):
    return problem["public_test_cases"] + problem["private_test_cases"]


# ----------------------------------------------------------------------------- sandbox

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


# What the sandboxed Python is started with (`-c`): it reads the harness below, compiled and
# marshalled once in this process, from stdin and runs it. Compiling HARNESS from source in every
# sandbox cost ~2-3 ms of CPU per run, a fifth of the sandbox's whole overhead. Both messages on
# stdin are "LENGTH\n" + LENGTH bytes, written by the judge (trusted); the interpreter is the same
# binary on both sides, so the marshal format matches.
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

# The program that runs inside the sandbox. It reads one spec on stdin (code, test count, limits,
# uid, nonce), drops to the sandbox uid, then per test reads that test's input, says it is ready
# ("W"), waits for the judge's go byte, runs it and writes one record; never an expected output.
# Kept dependency-free and short on purpose. os, marshal and read_exact/read_message come from
# BOOTSTRAP.
HARNESS = r'''
import sys, resource, builtins, select
import _signal as signal  # the C module: `signal` pulls in enum/functools/collections (~10 ms)
spec = marshal.loads(read_message())  # from the judge (trusted); json costs ~8 ms to import
ctl = os.dup(0)   # one byte from the judge starts each test (in lockstep it times the gap)
chan = os.dup(1)
def send(kind, body=b"", *fields):
    # record: "KIND field... LENGTH\n" + LENGTH raw bytes (outputs need no escaping)
    data = " ".join([kind] + [str(f) for f in fields] + [str(len(body))]).encode() + b"\n" + body
    while data:
        data = data[os.write(chan, data):]
lim = spec["limits"]
def setlim(name, value):
    resource.setrlimit(getattr(resource, name), (value, value))
# What a program sees is the same in every run of the same Limits, test run or timing run alike:
# CPU and file-size caps that do not depend on the batch (its size, its inputs). The harness's own
# are set so that a forked program inherits them; only when an input is larger than the program's
# output cap does the harness need a larger file-size cap, and the program lowers it again.
def program_limits():
    setlim("RLIMIT_FSIZE", lim["fsize_test"])
LOWER_FSIZE = lim["fsize"] != lim["fsize_test"]
setlim("RLIMIT_CORE", 0); setlim("RLIMIT_NOFILE", lim["nofile"]); setlim("RLIMIT_FSIZE", lim["fsize"])
resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu_test"], lim["cpu_hard"]))  # a backstop: the wall clock kills first
if os.getuid() == 0 and spec["uid"] is not None:
    if spec["nnp"]:  # the unshare path: no setuid binary may give root back (bwrap sets this itself)
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0)
    os.setgroups([]); os.setresgid(spec["uid"], spec["uid"], spec["uid"]); os.setresuid(spec["uid"], spec["uid"], spec["uid"])
setlim("RLIMIT_NPROC", lim["nproc"])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over-long output: write() fails with EFBIG -> OLE
builtins.exit = builtins.quit = sys.exit  # normally added by `site`, which -S skips; programs use them
if spec["mode"] == "functional": import json
def fresh_files(text):
    # new memfds per test: a daemon left by test k cannot write into test k+1's output
    fd_in, fd_out, fd_ret = os.memfd_create("stdin"), os.memfd_create("stdout"), os.memfd_create("ret")
    os.write(fd_in, text.encode()); os.lseek(fd_in, 0, 0)
    return fd_in, fd_out, fd_ret
def take_output(fd_out):
    size = os.fstat(fd_out).st_size
    return os.pread(fd_out, min(size, lim["output"]), 0), size >= lim["output"]
def canon(v, depth=0):
    # exact base-type re-serialisation: subclasses lose their lying __eq__/__repr__/__iter__
    if depth > 100: raise ValueError("too deep")
    if v is None or type(v) is bool: return v
    if isinstance(v, bool): return bool.__bool__(v)
    if isinstance(v, int): return int(int.__repr__(v))
    if isinstance(v, float): return float(float.__repr__(v))
    if isinstance(v, str): return str.__str__(v)
    if isinstance(v, (list, tuple)):
        base = list if isinstance(v, list) else tuple
        return [canon(base.__getitem__(v, i), depth + 1) for i in range(base.__len__(v))]
    if isinstance(v, dict):
        return {str.__str__(k) if isinstance(k, str) else json.dumps(canon(k, depth + 1)): canon(v2, depth + 1) for k, v2 in dict.items(v)}
    raise TypeError("unsupported return type " + type(v).__name__)
EXIT = {0: "ok", 10: "RE", 11: "MLE", 12: "WA"}
# One protocol for every run, so the harness holds nothing a program could tell runs apart by.
# Per test: that test's input only ("LENGTH" in 10 digits + bytes; later ones are still in the
# pipe, so a program never sees another test's input), then, once its files are ready, one go
# byte from the judge. In a test run every go byte came with the spec; in a timing run the judge
# sends it when told the test is ready ("W") and times go -> record. No mode flag: it asks the pipe.
def next_input():
    return read_exact(int(read_exact(10))).decode()
go_ready = select.poll()
go_ready.register(ctl, select.POLLIN)
def wait_go():
    if not go_ready.poll(0):
        send("W")
    if not os.read(ctl, 1): os._exit(3)
def child(code, text, functional, fd_in, fd_out, fd_ret):
    # Runs in a forked process per test. It gets no channel to the judge: the records are written
    # by the harness (its parent) only, so a program cannot forge them or the end marker.
    os.close(chan); os.close(ctl)
    if LOWER_FSIZE: program_limits()
    os.dup2(fd_in, 0); os.dup2(fd_out, 1)
    sys.stdin = open(0, "r", encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    g = {"__name__": "__main__", "__builtins__": builtins}
    rc = 0
    try:
        if functional:
            exec("from typing import *\nfrom collections import *\nimport math, heapq, bisect, itertools, functools, string", g)
            exec(code, g)
            args = [json.loads(line) for line in text.split("\n") if line.strip()]
            value = canon(getattr(g["Solution"](), spec["func_name"])(*args))
            os.write(fd_ret, json.dumps(value).encode())
        else:
            exec(code, g)
    except SystemExit as e:
        rc = 0 if (e.code in (None, 0) and not functional) else 10
    except MemoryError:
        rc = 11
    except TypeError as e:
        rc = 12 if functional and "unsupported return type" in str(e) else 10
    except BaseException:
        rc = 10
    try: sys.stdout.flush()
    except BaseException: pass
    os._exit(rc)
def run_python(functional):
    try:
        code = compile(spec["code"], "<solution>", "exec")
    except (SyntaxError, ValueError) as e:
        send("C", ("%s: %s" % (type(e).__name__, e)).encode()); return
    for i in range(spec["count"]):
        text = next_input()
        fd_in, fd_out, fd_ret = fresh_files("" if functional else text)
        wait_go()
        pid = os.fork()
        if pid == 0:
            child(code, text, functional, fd_in, fd_out, fd_ret)
        while True:  # under bwrap the harness is PID 1: orphans of earlier tests are reaped here too
            done, st = os.waitpid(-1, 0)
            if done == pid: break
        if os.WIFEXITED(st):
            status = EXIT.get(os.WEXITSTATUS(st), "RE")
        else:
            status = "OLE" if os.WTERMSIG(st) == signal.SIGXFSZ else "RE"
        out, over = take_output(fd_out)
        if over: status = "OLE"
        value = os.pread(fd_ret, 1 << 20, 0) if functional else out
        for fd in (fd_in, fd_out, fd_ret): os.close(fd)
        send("R", value, i, status, st)
def compiler_limits():
    # the compiler is untrusted input's first victim: template bombs, `#include </dev/zero>`
    setlim("RLIMIT_AS", lim["compile_as"]); setlim("RLIMIT_CPU", lim["compile_cpu"])
def run_cpp():
    import subprocess
    with open("main.cpp", "w") as f: f.write(spec["code"])  # cwd: /sandbox, or a temp dir without namespaces
    err = os.memfd_create("cc")  # bounded by RLIMIT_FSIZE: a flood of diagnostics cannot fill memory
    rc = subprocess.run(["g++", "-O2", "-std=c++17", "-o", "main", "main.cpp"], stdin=subprocess.DEVNULL,
                        stdout=err, stderr=err, preexec_fn=compiler_limits).returncode
    if rc != 0:
        size = os.fstat(err).st_size
        send("C", os.pread(err, 2000, max(0, size - 2000)) or ("compiler exit status %d" % rc).encode()); return
    os.close(err)
    send("K")
    setlim("RLIMIT_AS", lim["as"])
    for i in range(spec["count"]):
        fd_in, fd_out, fd_err = fresh_files(next_input())
        wait_go()
        rc = subprocess.run(["./main"], stdin=fd_in, stdout=fd_out, stderr=fd_err, preexec_fn=program_limits if LOWER_FSIZE else None).returncode
        err = os.pread(fd_err, 4096, 0).decode("utf-8", "replace")
        out, over = take_output(fd_out)
        for fd in (fd_in, fd_out, fd_err): os.close(fd)
        status = "OLE" if over or rc == -signal.SIGXFSZ else "MLE" if "bad_alloc" in err else "ok" if rc == 0 else "RE"
        send("R", out, i, status, rc & 0xffff)
send("Y")  # set up: the judge's per-test clock starts now
if spec["lang"] == "cpp":
    run_cpp()
else:
    setlim("RLIMIT_AS", lim["as"])
    run_python(spec["mode"] == "functional")
send("E", spec["nonce"].encode())
os._exit(0)
'''
_HARNESS_CODE = marshal.dumps(compile(HARNESS, "<harness>", "exec"))
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
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    for fd in pidfds:  # readable once it has exited: its namespace is empty by then
        select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        os.close(fd)
    if namespaced and pidfds and proc.returncode is None:  # not reaped by us: its pid cannot be reused
        launcher = os.pidfd_open(proc.pid)
        select.select([launcher], [], [], 1.0)
        os.close(launcher)
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
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
            try:
                stream.close()
            except OSError:
                pass
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


# ----------------------------------------------------------------------------- verdicts

# A number token: no nested quantifiers, so a non-matching token of n digits costs O(n), not O(n^2)
# ("111...1x", 1 MB of it, took hours with the old pattern and held the GIL all the while).
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
TOKEN_SLACK = 1024  # a token this much longer than the expected one is wrong, whatever it spells


def _decimal(token):
    if not _NUMBER.fullmatch(token):
        return None
    try:
        return Decimal(token)   # exact, any length (int() refuses > 4300 digits)
    except InvalidOperation:    # an exponent beyond what Decimal represents
        return None


def _is_float(token):
    return "." in token or "e" in token or "E" in token


def _tokens_equal(got, want, float_tol):
    """Two tokens of lines that differ: both numbers with the same exact decimal value (so 007 = 7
    and 1.50 = 1.5, but 1e+18 != 1000000000000000001). `float_tol` (relative) applies only when
    BOTH are written as floats: an integer answer is always exact. A word is never equal here."""
    if len(got) > len(want) + TOKEN_SLACK:
        return False
    a, b = _decimal(got), _decimal(want)
    if a is None or b is None:
        return False
    if a == b:
        return True
    if float_tol > 0 and _is_float(got) and _is_float(want):
        fa, fb = float(a), float(b)
        return math.isfinite(fa) and math.isfinite(fb) and abs(fa - fb) <= float_tol * max(1.0, abs(fb))
    return False


def outputs_match(got, want, float_tol=0.0):
    """LiveCodeBench's stdin rule (its grade_stdio): strip the output, split it into lines and
    strip each; a line equal as a string passes; otherwise every token of it, on both sides, must
    be a number and the two lists of exact decimals equal ("YES  NO" != "YES NO", "1.50" == "1.5").
    `float_tol` adds a relative tolerance for float tokens (0 = exact, as in LCB). Linear time."""
    got_lines, want_lines = got.strip().split("\n"), want.strip().split("\n")
    if len(got_lines) != len(want_lines):
        return False
    for g, w in zip(got_lines, want_lines):
        g, w = g.strip(), w.strip()
        if g == w:
            continue
        gt, wt = g.split(), w.split()
        if len(gt) != len(wt) or not all(_tokens_equal(a, b, float_tol) for a, b in zip(gt, wt)):
            return False
    return True


def values_match(got, want, float_tol=0.0):
    """Functional tests: compare two plain JSON values with LiveCodeBench's `==` (so True == 1 and
    2 == 2.0; tuples were already lists in the child, at every depth, where LCB converts only the
    top level). Integers compare exactly; the tolerance applies only when both sides are floats."""
    if isinstance(got, (bool, int, float)) and isinstance(want, (bool, int, float)):
        if got == want:
            return True
        return (float_tol > 0 and isinstance(got, float) and isinstance(want, float)
                and abs(got - want) <= float_tol * max(1.0, abs(want)))
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(values_match(a, b, float_tol) for a, b in zip(got, want))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(values_match(got[k], want[k], float_tol) for k in got)
    return type(got) is type(want) and got == want


def verdict_and_reason(run, test, float_tol=0.0):
    """(verdict, reason). Whatever the program printed, this never raises: an output the judge
    cannot even parse (a number past int()'s digit limit, JSON nested 10^5 deep from a patched
    json.dumps, ...) is a wrong answer with the reason, and the run goes on."""
    if run.status != "ok":
        return run.status, run.detail
    try:
        if test["testtype"] == "functional":
            try:
                got, want = json.loads(run.output), json.loads(test["output"])
            except ValueError:
                return "WA", "returned value is not valid JSON"
            return ("AC", "") if values_match(got, want, float_tol) else ("WA", "")
        return ("AC", "") if outputs_match(run.output, test["output"], float_tol) else ("WA", "")
    except Exception as e:  # RecursionError, MemoryError, ...: the output is not an answer
        return "WA", f"output could not be compared ({type(e).__name__})"


def verdict(run, test, float_tol=0.0):
    return verdict_and_reason(run, test, float_tol)[0]


def judge(problem, code, *, lang="python", limits=None, isolation="auto", require_full_isolation=False,
          float_tol=0.0, tests=None):
    """Run `code` on all (or the given) tests of `problem`: dict(passed, total, pass_rate, verdicts, sandbox)."""
    tests = all_tests(problem) if tests is None else tests
    mode = "functional" if tests and tests[0]["testtype"] == "functional" else "stdin"
    runs, features = run_tests(code, [t["input"] for t in tests], lang=lang, mode=mode,
                               func_name=problem.get("metadata", {}).get("func_name"), limits=limits,
                               isolation=isolation, require_full_isolation=require_full_isolation)
    checked = [verdict_and_reason(r, t, float_tol) for r, t in zip(runs, tests)]
    verdicts = [v for v, _ in checked]
    passed = verdicts.count("AC")
    return {"passed": passed, "total": len(tests), "pass_rate": passed / max(1, len(tests)),
            "verdicts": verdicts, "sandbox": features, "details": [reason for _, reason in checked]}


def judge_many(problem_code_pairs, *, workers=None, **kw):
    """Judge many (problem, code) pairs, one sandbox per candidate, in parallel across cores."""
    workers = workers or os.cpu_count() or 1
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda pc: judge(pc[0], pc[1], **kw), problem_code_pairs))


# ----------------------------------------------------------------------------- time complexity

# Classes in increasing order, with log f(n) (log space keeps 2^n finite).
COMPLEXITY_CLASSES = [
    ("O(1)", lambda n: 0.0),
    ("O(log n)", lambda n: math.log(math.log(n + 1) + 1e-9)),
    ("O(n)", lambda n: math.log(n)),
    ("O(n log n)", lambda n: math.log(n) + math.log(math.log(n + 1))),
    ("O(n^2)", lambda n: 2 * math.log(n)),
    ("O(n^2 log n)", lambda n: 2 * math.log(n) + math.log(math.log(n + 1))),
    ("O(n^3)", lambda n: 3 * math.log(n)),
    ("O(2^n)", lambda n: n * math.log(2)),
]
# Every class a label or an answer can name, in order: the fitted ones plus O(sqrt n), which a
# measurement of a stdin program never shows (reading the input is O(n)) but a label can.
CLASS_ORDER = ["O(1)", "O(log n)", "O(sqrt n)", "O(n)", "O(n log n)", "O(n^2)", "O(n^2 log n)", "O(n^3)", "O(2^n)"]
CLASS_RANK = {name: k for k, name in enumerate(CLASS_ORDER)}
# the first class with a higher power of n (a candidate far slower than an optimal reference)
NEXT_POWER = {"O(1)": "O(n)", "O(log n)": "O(n)", "O(sqrt n)": "O(n)", "O(n)": "O(n^2)", "O(n log n)": "O(n^2)",
              "O(n^2)": "O(n^3)", "O(n^2 log n)": "O(n^3)", "O(n^3)": "O(2^n)", "O(2^n)": "O(2^n)"}
_BIG_O = re.compile(r"[OΘθΩ]\s*\(((?:[^()]|\((?:[^()]|\([^()]*\))*\))*)\)")


def _term_class(term):
    # One product term in which every variable is n, log is "L" and sqrt is "S": add up the powers
    # of n (sqrt = 1/2, n^(1/2) too), count log factors, spot exponentials.
    if re.search(r"\d\^\(?n|\^\(?n|n!|exp", term):
        return "O(2^n)"
    logs = len(re.findall(r"L", term))
    term = re.sub(r"L\(?n\)?", "", term)
    power = 0.0
    for m in re.finditer(r"S\(?n\)?", term):
        power += 0.5
    term = re.sub(r"S\(?n\)?", "", term)
    for m in re.finditer(r"n(?:\^\(?(\d+(?:\.\d+)?)(?:/(\d+))?\)?|\*\*(\d+)|([²³]))?", term):
        if m.group(1):
            power += float(m.group(1)) / float(m.group(2) or 1)
        else:
            power += int(m.group(3) or {"²": 2, "³": 3}.get(m.group(4), 1))
    if power == 0:
        return "O(log n)" if logs else "O(1)"
    if power < 1:
        return "O(sqrt n)"
    if power == 1:
        return "O(n log n)" if logs else "O(n)"
    if power <= 2:  # n^1.5 (n sqrt n) has no class of its own: the next one up
        return "O(n^2 log n)" if logs and power == 2 else "O(n^2)"
    return "O(n^3)"


def parse_complexity(text, strict=False):
    """'O(N + M log N)', 'o(n*n)', 'Θ(n²)', 'O(sqrt(n))' ... -> one of CLASS_ORDER, or None.
    Every variable (a word of one or two letters) counts as n; a sum takes its dominant term; a word
    that is no variable and no known function (sqrt, log, lg, ln, exp) makes it unparseable. The last
    O(...) in the text wins; `strict`: the text must be exactly one O(...) and nothing else."""
    if not isinstance(text, str):
        return None
    if strict:
        m = _BIG_O.fullmatch(text.strip())
        found = [m.group(1)] if m else []
    else:
        found = _BIG_O.findall(text)
    if not found:
        return None
    expr = found[-1].lower().replace("·", "*").replace("×", "*").replace("\\", "").replace("√", " sqrt ")
    expr = re.sub(r"sqrt", " S ", expr)
    expr = re.sub(r"log_?\d*|lg|ln(?![a-z])", " L ", expr)
    words = re.findall(r"[a-z]+", expr)
    if any(len(w) > 2 and w != "exp" for w in words):
        return None
    expr = re.sub(r"[a-z]+", lambda m: m.group() if m.group() == "exp" else "n" * len(m.group()), expr)
    expr = expr.replace(" ", "")
    if not expr or not re.fullmatch(r"[nLS0-9()^*+/.²³!exp]*", expr):
        return None
    best = None
    for term in expr.split("+"):
        cls = _term_class(term)
        if best is None or CLASS_RANK[cls] > CLASS_RANK[best]:
            best = cls
    return best


CLASS_POWER = {"O(1)": 0.0, "O(log n)": 0.0, "O(sqrt n)": 0.5, "O(n)": 1.0, "O(n log n)": 1.0, "O(n^2)": 2.0,
               "O(n^2 log n)": 2.0, "O(n^3)": 3.0, "O(2^n)": math.inf}


def growth_power(sizes, seconds):
    """How t grows with n at the largest sizes: the log-log slope between the largest measured size
    and the largest one at most a quarter of it, both >= 1 ms and >= 1/100 of the slowest time
    (below that, scheduling noise dominates). None when there is no such pair: the program is fast
    at every size."""
    measured = [t for t in seconds if t is not None]
    if not measured:
        return None
    floor = max(1e-3, max(measured) / 100)
    pts = [(n, t) for n, t in zip(sizes, seconds) if t is not None and t >= floor]
    if not pts:
        return None
    n1, t1 = pts[-1]
    below = [(n, t) for n, t in pts if 4 * n <= n1]
    if not below:
        return None
    n0, t0 = below[-1]
    return round(math.log(t1 / t0) / math.log(n1 / n0), 3)


def fit_complexity(sizes, seconds, floor_s=5e-5):
    """Choose a class from (n, time) points by least squares in log space.

    For each class c: log t = log a + log f_c(n); the residual is the variance of log t - log f_c(n).
    Only points above `floor_s` (timer and pipe noise) count; with fewer than two, everything is
    O(1)-like. Returns dict(complexity, confidence, residuals, separable, candidates)."""
    pts = [(n, t) for n, t in zip(sizes, seconds) if t is not None and t > floor_s and n >= 2]
    if len(pts) < 2 or pts[-1][0] / pts[0][0] < 3:
        return {"complexity": "O(1)", "confidence": 0.0, "residuals": {}, "separable": False,
                "candidates": ["O(1)", "O(log n)"], "points": len(pts)}
    ns = np.array([p[0] for p in pts], dtype=float)
    times = np.array([p[1] for p in pts])
    log_t = np.log(times)
    # small times carry more relative noise (wake-up jitter is ~0.1 ms here): weight t / (t + 1 ms)
    w = times / (times + 1e-3)
    w = w / w.sum()
    residuals = {}
    for name, log_f in COMPLEXITY_CLASSES:
        d = log_t - np.array([log_f(n) for n in ns])
        residuals[name] = float(np.sum(w * (d - np.sum(w * d)) ** 2))
    ordered = sorted(residuals, key=residuals.get)
    best, second = ordered[0], ordered[1]
    # classes whose fit is within noise of the best (0.02 ~ 15% relative error per point, measured
    # on this machine as the spread of repeated runs) cannot be told apart from it
    candidates = [c for c in ordered if residuals[c] <= residuals[best] + 0.02]
    confidence = (residuals[second] - residuals[best]) / (residuals[second] + 0.02)
    return {"complexity": best, "confidence": round(float(confidence), 3),
            "residuals": {k: round(v, 5) for k, v in residuals.items()}, "separable": len(candidates) == 1,
            "candidates": sorted(candidates, key=CLASS_RANK.get), "points": len(pts)}


@dataclass
class MeasureConfig:
    n0: int = 16
    step: int = 2
    n_max: int = 1 << 17
    reps: int = 3
    budget_s: float = 0.5   # stop growing n after a size that took longer than this
    time_s: float = 10.0    # kill limit per size


FULL = MeasureConfig(n_max=1 << 16, budget_s=0.3)
FAST = MeasureConfig(n0=64, step=4, n_max=1 << 14, reps=2, budget_s=0.12, time_s=1.0)


def _sizes(config):
    sizes, n = [], config.n0
    while n <= config.n_max:
        sizes.append(n)
        n *= config.step
    return sizes


# Runs inside the sandbox after the problem's generator source: the generator comes from a data
# file, and a data file is as untrusted as a model's code (it used to be exec-ed here, as root).
GENERATOR_DRIVER = """
import sys as _sys
_n, _seed = map(int, _sys.stdin.read().split())
_text = gen(_n, _seed)
if type(_text) is not str:
    raise TypeError("gen(n, seed) must return a str")
_sys.stdout.write(_text)
"""
GENERATOR_LIMITS = Limits(time_s=20.0, output_bytes=64 << 20)
_INPUT_CACHE = OrderedDict()
_INPUT_LOCK = threading.Lock()


def generated_inputs(problem, sizes, seed, isolation="auto"):
    """gen(n, seed + k) for the k-th size, from the problem's `input_generator`, run in the sandbox.
    Cached by (generator, sizes, seed): the reference and every candidate see the same inputs.
    A generator that fails is the data's fault: ProblemError naming the problem and the size."""
    source = problem["input_generator"]
    key = (hashlib.sha256(source.encode()).hexdigest(), tuple(sizes), seed)
    with _INPUT_LOCK:  # held while generating: the G rollouts of one problem generate once
        if key in _INPUT_CACHE:
            _INPUT_CACHE.move_to_end(key)
            return _INPUT_CACHE[key]
        runs, _ = run_tests(source + GENERATOR_DRIVER, [f"{n} {seed + k}" for k, n in enumerate(sizes)],
                            limits=GENERATOR_LIMITS, isolation=isolation)
        for n, r in zip(sizes, runs):
            if r.status != "ok":
                raise ProblemError(f"problem {problem['question_id']}: field 'input_generator' failed for n={n} "
                                   f"({r.status} {r.detail})".rstrip())
        inputs = [r.output for r in runs]
        _INPUT_CACHE[key] = inputs
        while len(_INPUT_CACHE) > 64:
            _INPUT_CACHE.popitem(last=False)
        return inputs


_TIMING_LOCK = threading.Lock()  # timing runs of this process never overlap: they would skew each other


def _timed_runs(code, lang, inputs, config, limits, isolation, time_limits=None):
    """`config.reps` lockstep runs of `code` on `inputs` (a warm-up input, then growing sizes), each
    in a fresh process. Without `time_limits` (the reference) a run stops after the first size over
    config.budget_s and later repetitions run only the sizes the first one finished; with them (a
    candidate, on the reference's clock) every input runs under its own kill limit and no budget.
    Returns (fastest seconds per input or None, output per input, first failure per input or None)."""
    with _TIMING_LOCK:
        best, outputs, failed = [None] * len(inputs), [None] * len(inputs), [None] * len(inputs)
        todo = list(inputs)
        for _ in range(config.reps):
            runs, _ = run_tests(code, todo, lang=lang, limits=limits, isolation=isolation, lockstep=True,
                                stop_after_s=config.budget_s if time_limits is None else None,
                                time_limits=None if time_limits is None else time_limits[:len(todo)])
            for k, r in enumerate(runs):
                if r.status == "ok":
                    best[k] = r.seconds if best[k] is None else min(best[k], r.seconds)
                    outputs[k] = r.output
                elif r.status != "SKIP" and failed[k] is None:
                    failed[k] = f"{r.status} {r.detail}".strip()
            if any(failed):
                break  # a failure decides; more repetitions would only hold the timing lock longer
            last_ok = max([k for k, b in enumerate(best) if b is not None], default=0)
            todo = todo[: last_ok + 1]
        return best, outputs, failed


def _fit_times(best):
    """Raw per-size times -> the times the fit uses. Run time cannot shrink as n grows: a running
    minimum from the right removes the upward outliers that a loaded machine puts on small sizes
    (they would dominate a log-space fit); the fastest size is the fixed per-test cost (harness,
    pipe, wake-up) and is subtracted."""
    best = list(best)
    for k in range(len(best) - 2, -1, -1):
        if best[k] is not None and best[k + 1] is not None:
            best[k] = min(best[k], best[k + 1])
    offset = min([b for b in best if b is not None], default=0.0)
    return [None if b is None else max(b - offset, 1e-7) for b in best]


# Measured on the toy set (fast setting, loaded 2-core machine, several runs): identical code runs
# up to 3.6x the cached reference (noise), O(n log n)-vs-O(n) pairs 1.5-8.3x, O(n^2) ones >= 14x.
RATIO_LIMIT = 8.0
# A candidate runs each size under 2 * RATIO_LIMIT times the reference's time there, plus this slack
# for scheduling noise: slower than that it has failed the ratio rule anyway, so it is stopped (a
# program that sleeps in every timed size costs about a second, not minutes of the timing lock).
CLOCK_SLACK_S = 0.25
WARMUP_FLOOR_S = 0.5

_REFERENCE_CACHE = OrderedDict()
_REFERENCE_LOCK = threading.Lock()


def reference_for(problem, lang):
    """(source, language) of the reference to time a `lang` candidate against: the one in the
    candidate's language when the problem has it (`reference_solutions: {"cpp": ...}`), else the
    Python `reference_solution`; (None, None) without any."""
    refs = problem.get("reference_solutions") or {}
    if refs.get(lang):
        return refs[lang], lang
    if refs.get("python") or problem.get("reference_solution"):
        return refs.get("python") or problem["reference_solution"], "python"
    return None, None


def measure_complexity(problem, code, *, lang="python", fast=False, isolation="auto", seed=1234, limits=None):
    """Measured time complexity of `code` on `problem["input_generator"]` inputs (see fit_complexity),
    against the reference solution run on the same inputs. The rules that make it hard to game:

      * every size the reference finished, the candidate must finish too, with the reference's
        outputs: a crash, timeout or kill there is listed in `unfinished` and fails R_time (a
        program that gives up on large inputs is not fast);
      * the candidate runs on the reference's clock (2 * RATIO_LIMIT times its time per size);
      * same language: the time ratio at the largest size decides (rule "ratio"); a reference in
        another language says nothing about constants (C++ vs Python), so the fit decides (rule "fit");
      * the program sees the same limits and the same harness as in its test runs.
    Raises ProblemError when the generator itself fails."""
    if not problem.get("input_generator"):
        return None
    config = FAST if fast else FULL
    limits = replace(limits or Limits(), stop_after_tle=True)
    sizes = _sizes(config)
    inputs = generated_inputs(problem, [1] + sizes, seed, isolation)   # a warm-up input, then the sizes
    ref_code, ref_lang = reference_for(problem, lang)
    ref_best = ref_outputs = None
    if ref_code:
        key = (problem["question_id"], hashlib.sha256(ref_code.encode()).hexdigest(), ref_lang, fast, seed,
               limits.memory_mb)
        with _REFERENCE_LOCK:  # parallel candidates of one problem measure its reference once
            if key not in _REFERENCE_CACHE:
                _REFERENCE_CACHE[key] = _timed_runs(ref_code, ref_lang, inputs, config, limits, isolation)[:2]
                while len(_REFERENCE_CACHE) > 256:
                    _REFERENCE_CACHE.popitem(last=False)
            ref_best, ref_outputs = _REFERENCE_CACHE[key]
    if ref_best is None:
        best, outputs, failed = _timed_runs(code, lang, inputs, config, limits, isolation)
    else:
        upto = 1 + max([k for k, b in enumerate(ref_best) if b is not None], default=0)
        clock = [min(config.time_s, max(WARMUP_FLOOR_S, 10 * (ref_best[0] or 0.0)))]
        clock += [min(config.time_s, 2 * RATIO_LIMIT * ref_best[k] + CLOCK_SLACK_S) for k in range(1, upto)]
        best, outputs, failed = _timed_runs(code, lang, inputs[:upto], config, limits, isolation, clock)
        pad = len(inputs) - upto
        best, outputs, failed = best + [None] * pad, outputs + [None] * pad, failed + [None] * pad
    times = _fit_times(best[1:])
    fit = fit_complexity(sizes, times)
    names = ["warm-up"] + [f"n={n}" for n in sizes]
    result = dict(fit, sizes=sizes, seconds=[None if t is None else round(t, 6) for t in times],
                  ratio_to_reference=None, outputs_match_reference=None, reference_language=ref_lang,
                  rule=None, fit_complexity=fit["complexity"], growth_power=growth_power(sizes, times),
                  unfinished=[f"{names[k]}: {failed[k] or 'not finished'}" for k in range(len(inputs))
                              if ref_best is not None and ref_best[k] is not None and best[k] is None])
    if ref_best is None:
        return _inseparable(result, fit)
    ref_times = _fit_times(ref_best[1:])
    ref_outputs = ref_outputs[1:]
    outputs = outputs[1:]
    common = [k for k in range(len(sizes)) if times[k] is not None and ref_times[k] is not None]
    if common:
        k = common[-1]
        result["ratio_to_reference"] = round(times[k] / max(ref_times[k], 5e-5), 3)
        result["ratio_size"] = sizes[k]
    # A ratio just above the limit is where load noise could flip the verdict: measure both once
    # more and keep the smaller ratio (a real O(n^2)-vs-O(n) gap stays far above).
    ratio = result["ratio_to_reference"]
    if ref_lang == lang and ratio is not None and RATIO_LIMIT < ratio < 4 * RATIO_LIMIT and not result["unfinished"]:
        upto = len(clock)
        again = _fit_times(_timed_runs(code, lang, inputs[:upto], config, limits, isolation, clock)[0][1:])
        ref_again = _fit_times(_timed_runs(ref_code, ref_lang, inputs[:upto], config, limits, isolation)[0][1:])
        k = common[-1]
        if again[k] is not None and ref_again[k] is not None:
            result["ratio_to_reference"] = round(min(ratio, again[k] / max(ref_again[k], 5e-5)), 3)
            result["remeasured"] = True
    # every size the candidate finished must agree with the reference
    checked = [k for k in range(len(sizes)) if outputs[k] is not None and ref_outputs[k] is not None]
    result["outputs_match_reference"] = bool(checked) and all(
        outputs_match(outputs[k], ref_outputs[k]) for k in checked)
    # growth of the candidate beyond the reference on the sizes both measured above the floor
    both = [k for k in common if times[k] > 5e-5 and ref_times[k] > 5e-5]
    if len(both) >= 2 and sizes[both[-1]] >= 4 * sizes[both[0]]:
        log_n = np.log([sizes[k] for k in both])
        log_ratio = np.log([times[k] / ref_times[k] for k in both])
        result["excess_slope"] = round(float(np.polyfit(log_n, log_ratio, 1)[0]), 3)
    optimal = parse_complexity(problem.get("optimal_complexity") or "")
    ratio = result["ratio_to_reference"]
    result["rule"] = "ratio" if ref_lang == lang else "fit"
    if result["rule"] == "ratio" and optimal is not None and ratio is not None:
        # Class relative to the reference. CPython's per-element cost grows with n (caches, big
        # lists), so on its own a linear program often fits O(n log n) and noise moves fits by a log
        # factor either way; the reference is optimal by construction and runs on the same inputs.
        # Within RATIO_LIMIT of it, the candidate is in the optimal class (as far as timing can
        # tell); far slower, it is in the fitted class but at least one power of n above optimal.
        if ratio <= RATIO_LIMIT and not result["unfinished"]:
            result["complexity"] = optimal
            result["candidates"] = [optimal]
            result["separable"] = True
            result["confidence"] = max(result["confidence"], 0.5)  # the reference comparison decided
        else:
            floor = NEXT_POWER[optimal]
            result["complexity"] = max(fit["complexity"], floor, key=CLASS_RANK.get)
            result["candidates"] = sorted({max(c, floor, key=CLASS_RANK.get) for c in fit["candidates"]},
                                          key=CLASS_RANK.get)
            result["separable"] = len(result["candidates"]) == 1
    return _inseparable(result, fit)


def _inseparable(result, fit):
    if result["complexity"] in ("O(n)", "O(n log n)") and (result["confidence"] < 0.5 or fit["points"] < 4):
        # the hard pair (BigO(Bench)): say so rather than pretend
        result["separable"] = False
        result["candidates"] = sorted(set(result["candidates"]) | {"O(n)", "O(n log n)"}, key=CLASS_RANK.get)
    return result


def strip_comments_and_strings(code, lang="python"):
    """What the model complexity judge may read of a program: its tokens without comments, with
    every string literal emptied, so "# this is O(1)" or a docstring cannot talk to the judge.
    None when the code does not tokenize (it is then not shown to the model at all)."""
    if lang == "python":
        try:
            tokens = [(t.type, '""' if t.type == tokenize.STRING else t.string)
                      for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type != tokenize.COMMENT]
            return tokenize.untokenize(tokens)
        except (tokenize.TokenError, SyntaxError, ValueError):
            return None
    # C++: one left-to-right scan; literals and comments cannot nest, so a state machine suffices
    out, i, n = [], 0, len(code)
    while i < n:
        c, two = code[i], code[i:i + 2]
        if two == "//":
            j = code.find("\n", i)
            i = n if j < 0 else j
        elif two == "/*":
            j = code.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        elif c == "R" and code.startswith('R"', i) and (i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_")):
            paren = code.find("(", i + 2)
            if paren < 0 or paren - i - 2 > 16:
                return None
            end = code.find(")" + code[i + 2:paren] + '"', paren)
            if end < 0:
                return None
            i = end + paren - i
            out.append('""')
        elif c in "\"'":
            j = i + 1
            while j < n and code[j] != c and code[j] != "\n":
                j += 2 if code[j] == "\\" else 1
            if j >= n or code[j] != c:
                return None
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


COMPLEXITY_PROMPT = """What is the worst-case time complexity of this solution, in terms of the input size n?
Judge the code itself (comments and string contents were removed). Answer with one JSON object and
nothing else: {{"complexity": "O(...)"}}, one big-O expression such as O(n), O(n log n) or O(n^2).

Problem:
{problem}

Solution:
```{lang}
{code}
```"""


def model_complexity(problem, code, *, lang="python", endpoint=None, model="default", generate=None,
                     api_key=None, timeout=60):
    """The paper's instruct judge model: ask a language model for the complexity and parse the class.

    `generate`: a callable prompt -> text (e.g. this project's model through nanbeige41.generate), or
    `endpoint`: base URL of an OpenAI-compatible server (POST {endpoint}/chat/completions).
    The model sees the code without comments and string contents (strip_comments_and_strings) and
    must answer {"complexity": "O(...)"}; the class comes from that field only (parse_answer), so
    neither the program nor the free text around an answer can choose it.
    Returns (class or None, raw answer)."""
    visible = strip_comments_and_strings(code, lang)
    if visible is None:
        return None, "code does not tokenize: not shown to the model"
    prompt = COMPLEXITY_PROMPT.format(problem=problem.get("question_content", "")[:4000], lang=lang, code=visible)
    if generate is not None:
        answer = generate(prompt)
    else:
        import requests  # only needed for the endpoint judge
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        r = requests.post(endpoint.rstrip("/") + "/chat/completions", headers=headers, timeout=timeout,
                          json={"model": model, "temperature": 0.0, "max_tokens": 64,
                                "messages": [{"role": "user", "content": prompt}]})
        r.raise_for_status()
        answer = r.json()["choices"][0]["message"]["content"]
    return parse_answer(answer), answer


def parse_answer(answer):
    """The model judge's class: the answer must be one JSON object (a ```json fence allowed) whose
    "complexity" field is exactly one big-O expression. Anything else is no answer (None)."""
    if not isinstance(answer, str):
        return None
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", answer.strip())
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("complexity"), str):
        return None
    return parse_complexity(obj["complexity"], strict=True)




def judge_complexity(problem, code, *, lang="python", measured=True, fast=False, model_judge=None,
                     isolation="auto", limits=None):
    """Combine the measured and the model signals and compare with `optimal_complexity`.

    With a measured reference, the measurement decides meets_optimal: every size the reference
    finished done too, with its outputs, and (same language) no more than RATIO_LIMIT times slower
    at the largest size, or (other language) a fitted class no worse than optimal. Without one,
    the measured class stands when the fit separates it; when it cannot (e.g. O(n) vs O(n log n))
    and the model names one of the fitted candidates, the model decides; with no measurement at
    all (no input generator: every real LiveCodeBench row) the model's class is used, from code it
    saw without comments or strings. `model_judge`: None or a callable (problem, code) -> class."""
    result = {"complexity": None, "measured": None, "model": None, "meets_optimal": None, "error": None}
    if measured and problem.get("input_generator"):
        try:
            result["measured"] = measure_complexity(problem, code, lang=lang, fast=fast, isolation=isolation,
                                                    limits=limits)
        except ProblemError as e:  # the data's fault (its generator failed): no measured signal
            result["error"] = str(e)
    if model_judge is not None:
        result["model"] = model_judge(problem, code)
    m, model = result["measured"], result["model"]
    candidates = None
    if m is not None:
        result["complexity"] = m["complexity"]
        candidates = m["candidates"]
        if not m["separable"] and model in candidates:
            result["complexity"] = model
    elif model is not None:
        result["complexity"] = model
        candidates = [model]
    optimal = parse_complexity(problem.get("optimal_complexity") or "")
    if m is not None and m["unfinished"]:
        result["meets_optimal"] = False  # gave up (crashed, timed out) on a size the reference finished
    elif m is not None and m["rule"] == "ratio" and m["ratio_to_reference"] is not None:
        # Against the measured reference: same answers on the large inputs and no more than
        # RATIO_LIMIT times slower at the largest common size (the slope of that ratio, reported
        # as excess_slope, was too noisy here to decide on: 0.4 for identical code, 0.56 for O(n^2)).
        result["meets_optimal"] = m["outputs_match_reference"] is True and m["ratio_to_reference"] <= RATIO_LIMIT
    elif m is not None and m["rule"] == "fit" and optimal is not None:
        # A reference in another language says nothing about the candidate's constants (C++ vs
        # Python), so the candidate's own growth decides: its log-log slope over its slowest
        # sizes (growth_power), against the optimal class's power of n (a stdin program reads its input:
        # power 1 is its floor), with 0.4 of margin for noise (C++ O(n^2) on pair_sum measured
        # 1.9-2.2 on a loaded machine; O(n) never reaches 1 ms: no slope at all).
        bound = max(CLASS_POWER[optimal], 1.0) + 0.4
        result["meets_optimal"] = (m["outputs_match_reference"] is True
                                   and (m["growth_power"] is None or m["growth_power"] <= bound))
    elif result["complexity"] is not None and optimal is not None:
        meets = min(CLASS_RANK[c] for c in candidates) <= CLASS_RANK[optimal]
        if m is not None and m["outputs_match_reference"] is False:
            meets = False
        result["meets_optimal"] = bool(meets)
    return result


# ----------------------------------------------------------------------------- gated reward

FENCE = re.compile(r"```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)
LANG_TAGS = {"python": ("python", "py", "python3"), "cpp": ("cpp", "c++", "cc", "cxx")}


def extract_code(text, lang="python"):
    """The last fenced block in the expected language (or an untagged one); plain code as is."""
    blocks = FENCE.findall(text)
    if not blocks:
        return None if "```" in text else text
    tagged = [body for tag, body in blocks if tag.lower() in LANG_TAGS[lang]]
    untagged = [body for tag, body in blocks if not tag]
    chosen = tagged or untagged
    return chosen[-1] if chosen else None


def format_ok(text, lang="python", *, truncated=False, require_think=True):
    """R_format: not truncated; if `require_think`, the text opens the think block itself ("<think>": the 4.1
    generation prompt ends at "<|im_start|>assistant\n") and closes it once, with reasoning inside;
    the answer holds exactly one fenced block, tagged with the expected language."""
    if truncated:
        return False
    answer = text
    if require_think:
        if not text.startswith("<think>") or text.count("<think>") != 1 or text.count("</think>") != 1:
            return False
        reasoning, answer = text.removeprefix("<think>").split("</think>")
        if not reasoning.strip():
            return False
    blocks = FENCE.findall(answer)
    if not require_think and "```" not in answer:
        return bool(answer.strip())  # plain source given to the CLI: nothing to check but non-empty
    return len(blocks) == 1 and blocks[0][0].lower() in LANG_TAGS[lang] and answer.count("```") == 2


_COMPLEXITY_CACHE = OrderedDict()
_CACHE_LOCK = threading.Lock()


def cached_complexity(problem, code, **kw):
    """judge_complexity memoised by (problem id, sha256 of code, options): the RL loop sees the same
    correct program many times, and measuring is the expensive part."""
    key = (problem["question_id"], hashlib.sha256(code.encode()).hexdigest(), kw.get("fast"), kw.get("lang"))
    with _CACHE_LOCK:
        if key in _COMPLEXITY_CACHE:
            _COMPLEXITY_CACHE.move_to_end(key)
            return _COMPLEXITY_CACHE[key]
    result = judge_complexity(problem, code, **kw)
    with _CACHE_LOCK:
        _COMPLEXITY_CACHE[key] = result
        while len(_COMPLEXITY_CACHE) > 4096:
            _COMPLEXITY_CACHE.popitem(last=False)
    return result


def reward_components(problem, text, *, lang="python", truncated=False, require_think=True,
                      with_time=True, w_format=0.1, w_correctness=1.0, w_time=0.5, fast=True,
                      measured=True, model_judge=None, limits=None, isolation="auto",
                      require_full_isolation=False, float_tol=0.0):
    """Section 2.3.3 gated reward for one response. R_time is computed (and the complexity judge
    run at all) only when every test passes and `with_time` (stage 2). Returns the judge result
    plus `complexity`, `meets_optimal` and `reward` = dict(format, correctness, time, total) where
    format/correctness/time are the raw components in [0, 1] and total the weighted gated sum."""
    r_format = float(format_ok(text, lang, truncated=truncated, require_think=require_think))
    answer = text.split("</think>")[-1] if require_think else text
    # a model response must put its program in a fenced block; plain text counts as code only on the CLI
    code = extract_code(answer, lang) if ("```" in answer or not require_think) else None
    if code is None or not code.strip():
        result = {"passed": 0, "total": len(all_tests(problem)), "pass_rate": 0.0,
                  "verdicts": ["CE"] * len(all_tests(problem)), "sandbox": sandbox_features(isolation_backend(isolation)),
                  "details": ["no code block found"]}
    else:
        result = judge(problem, code, lang=lang, limits=limits, isolation=isolation,
                       require_full_isolation=require_full_isolation, float_tol=float_tol)
    result["complexity"], result["meets_optimal"], result["complexity_detail"] = None, None, None
    r_time = 0.0
    if with_time and result["pass_rate"] == 1.0 and (measured or model_judge is not None):
        c = cached_complexity(problem, code, lang=lang, fast=fast, measured=measured, model_judge=model_judge,
                              isolation=isolation, limits=limits)
        result["complexity"], result["meets_optimal"], result["complexity_detail"] = c["complexity"], c["meets_optimal"], c
        r_time = float(bool(c["meets_optimal"]))
    total = w_format * r_format + w_correctness * result["pass_rate"]
    if result["pass_rate"] == 1.0:  # the gate of Figure 3
        total += w_time * r_time
    result["reward"] = {"format": r_format, "correctness": result["pass_rate"], "time": r_time, "total": total}
    return result


def code_reward(problem, response_text, *, truncated=False, stage="code2", w_format=0.1, w_correctness=1.0,
                w_time=0.5, complexity_judge="measured", model_judge=None, fast=True, lang="python",
                limits=None, isolation="auto"):
    """The reward the GRPO trainer calls for one generated assistant text (everything after the
    generation prompt "<|im_start|>assistant\n", i.e. "<think>\n{reasoning}\n</think>\n\n{content}").

    stage "code1": R = w_format*R_format + w_correctness*PassRate (section 2.3.3, Stage 1);
    stage "code2": + w_time*R_time when PassRate = 1 (the gate). complexity_judge: "measured" (the
    cheap `fast` setting by default, cached by (problem id, code hash)), "model" (use `model_judge`,
    a callable (problem, code) -> class string), "both", or None. Returns a flat dict for logging."""
    if stage not in ("code1", "code2"):
        raise ValueError(f"stage must be 'code1' or 'code2', got {stage!r}")
    if complexity_judge not in ("measured", "model", "both", None):
        raise ValueError(f"complexity_judge must be measured/model/both/None, got {complexity_judge!r}")
    use_model = complexity_judge in ("model", "both")
    if use_model and model_judge is None:
        raise ValueError("complexity_judge='model'/'both' needs model_judge=callable(problem, code)")
    r = reward_components(problem, response_text, lang=lang, truncated=truncated, require_think=True,
                          with_time=stage == "code2" and complexity_judge is not None,
                          w_format=w_format, w_correctness=w_correctness, w_time=w_time, fast=fast,
                          measured=complexity_judge in ("measured", "both"),
                          model_judge=model_judge if use_model else None, limits=limits, isolation=isolation)
    return {"format": r["reward"]["format"], "correctness": r["reward"]["correctness"], "time": r["reward"]["time"],
            "total": r["reward"]["total"], "pass_rate": r["pass_rate"], "passed": r["passed"],
            "total_tests": r["total"], "verdicts": r["verdicts"], "complexity": r["complexity"],
            "meets_optimal": r["meets_optimal"], "sandbox": r["sandbox"]["backend"]}


def code_rewards(problems, responses, *, truncated=None, workers=None, **kw):
    """code_reward for a batch (problems[i] pairs with responses[i]), candidates in parallel.
    Correctness first for all, then the gated complexity measurement for the all-passed ones;
    with ~cpu_count workers, timing runs share the machine, which the ratio rule tolerates."""
    truncated = truncated or [False] * len(responses)
    if not (len(problems) == len(responses) == len(truncated)):
        raise ValueError(f"batch sizes differ: {len(problems)} problems, {len(responses)} responses, "
                         f"{len(truncated)} truncated flags")
    workers = workers or os.cpu_count() or 1
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda i: code_reward(problems[i], responses[i], truncated=truncated[i], **kw),
                             range(len(responses))))


# ----------------------------------------------------------------------------- command line

def main(argv=None):
    p = argparse.ArgumentParser(description="Judge one solution against one problem (prints one JSON object).")
    p.add_argument("--problem", required=True, help="problem .json or .jsonl (LiveCodeBench layout)")
    p.add_argument("--id", default=None, help="question_id to pick when the file holds several problems")
    p.add_argument("--code", required=True, help="solution file, or - for stdin; markdown responses are accepted")
    p.add_argument("--lang", default="python", help="python or cpp")
    p.add_argument("--complexity", action="store_true", help="also judge time complexity (R_time)")
    p.add_argument("--fast", action="store_true", help="fast complexity setting (few sizes, 2 reps)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON line")
    # Sandbox
    p.add_argument("--time-limit", type=positive_float, default=Limits.time_s, help="seconds per test (wall clock)")
    p.add_argument("--memory-mb", type=positive_int, default=Limits.memory_mb)
    p.add_argument("--float-tol", type=non_negative_float, default=0.0, help="relative tolerance for float tokens")
    p.add_argument("--require-full-isolation", action="store_true", help="refuse to run without namespaces")
    p.add_argument("--no-bwrap", action="store_true", help="use the unshare fallback even if bwrap exists")
    # Reward
    p.add_argument("--w-format", type=finite_float, default=0.1)
    p.add_argument("--w-correctness", type=finite_float, default=1.0)
    p.add_argument("--w-time", type=finite_float, default=0.5)
    p.add_argument("--model-endpoint", default=None, help="OpenAI-compatible base URL for the model complexity judge")
    p.add_argument("--model-name", default="default")
    args = p.parse_args(argv)

    try:
        problems = load_problems(args.problem)
        if args.id is not None:
            problems = [q for q in problems if q["question_id"] == args.id]
            if not problems:
                raise ProblemError(f"{args.problem}: no problem with question_id {args.id!r}")
        elif len(problems) > 1:
            raise ProblemError(f"{args.problem}: holds {len(problems)} problems; pick one with --id")
        if args.lang not in LANG_TAGS:
            raise ProblemError(f"{args.problem}: unknown language {args.lang!r} (python or cpp)")
        text = sys.stdin.read() if args.code == "-" else open(args.code, encoding="utf-8").read()
    except (ProblemError, OSError) as e:
        print(f"code_judge: error: {e}", file=sys.stderr)
        return 2
    problem = problems[0]
    model_judge = None
    if args.model_endpoint:
        def model_judge(prob, code):
            return model_complexity(prob, code, lang=args.lang, endpoint=args.model_endpoint, model=args.model_name)[0]
    try:
        r = reward_components(problem, text, lang=args.lang, require_think="</think>" in text,
                              with_time=args.complexity, w_format=args.w_format, w_correctness=args.w_correctness,
                              w_time=args.w_time, fast=args.fast, model_judge=model_judge,
                              limits=Limits(time_s=args.time_limit, memory_mb=args.memory_mb),
                              isolation="unshare" if args.no_bwrap else "auto",
                              require_full_isolation=args.require_full_isolation, float_tol=args.float_tol)
    except SandboxError as e:
        print(f"code_judge: error: problem {problem['question_id']}: {e}", file=sys.stderr)
        return 3
    out = {k: r[k] for k in ("passed", "total", "pass_rate", "verdicts", "complexity", "meets_optimal",
                             "sandbox", "reward")}
    out["question_id"] = problem["question_id"]
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{problem['question_id']}: {r['passed']}/{r['total']} passed  verdicts={' '.join(r['verdicts'])}")
        print(f"complexity={r['complexity']} meets_optimal={r['meets_optimal']} sandbox={r['sandbox']['backend']}")
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
