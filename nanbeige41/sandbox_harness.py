"""The program that runs inside the sandbox (nanbeige41/sandbox.py); never imported.

The sandboxed Python starts with BOOTSTRAP (`python -I -S -c`), which reads this file's code, compiled and
marshalled once by the judge, from stdin and executes it. Both messages on stdin are "LENGTH\n" + LENGTH
bytes, written by the judge (trusted). This program then reads one spec (code, test count, limits, uid,
nonce), drops to the sandbox uid, and per test reads that test's input, says it is ready ("W"), waits for
the judge's go byte, forks the program and writes one record; it never holds an expected output. Kept
dependency-free and short on purpose: every import costs milliseconds in every sandbox.
"""
import marshal
import os


def read_exact(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            raise SystemExit(3)
        data += chunk
    return data


def read_message():
    header = b""
    while not header.endswith(b"\n"):
        header += read_exact(1)
    return read_exact(int(header))


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
    except BaseException: pass  # a failing flush (closed stdout, EFBIG) must not change rc
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
