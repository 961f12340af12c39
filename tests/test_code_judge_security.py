"""The hostile-program battery of issue 3, run under bubblewrap and under the unshare fallback.

Each program attacks the judge; the test's expected output is exactly what the program prints when
its attack WORKS (the leaked secret, "wrote", "hijacked", the data sent by a host server...), so an
escape shows up as AC. Every program must score 0 with the expected verdict. After the battery: no
process of a sandbox uid left, no file planted outside the sandbox."""
import json
import os
import re
import secrets
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import code_judge as cj  # noqa: E402

SECRET = "cjsecret" + secrets.token_hex(8)          # the hidden expected output / API key of this run
MARK = "cjmark" + secrets.token_hex(4)              # names of files hostile programs try to leave behind
PLANT_DIRS = ["/tmp", "/dev/shm", "/var/tmp", ROOT, "/root", "/usr", "/etc", "/"]
LIMITS = cj.Limits(time_s=1.0, memory_mb=512, output_bytes=1 << 20, tmpfs_mb=16, startup_s=5.0)

# A host-side server that hands the secret to anyone who connects: a sandbox with network access
# would print it and get AC.
_server = socket.socket()
_server.bind(("127.0.0.1", 0))
_server.listen(8)
PORT = _server.getsockname()[1]
CONNECTIONS = []


def _serve():
    while True:
        try:
            conn, _ = _server.accept()
        except OSError:
            return
        CONNECTIONS.append(1)
        conn.sendall(SECRET.encode())
        conn.close()


threading.Thread(target=_serve, daemon=True).start()

FIND_SECRET = r'''
import os, re, sys, gc
pat = re.compile(rb"cjsecret[0-9a-f]{16}")
def scan(data):
    m = pat.search(data if isinstance(data, bytes) else str(data).encode())
    if m: print(m.group().decode()); sys.stdout.flush(); os._exit(0)
'''

# name -> (program, allowed verdicts, expected output when the attack works, mode)
BATTERY = {
    "infinite_loop": ("while True: pass", {"TLE"}, "1", "stdin"),
    "ignores_signals": ("import signal\nfor s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
                        " signal.signal(s, signal.SIG_IGN)\nsignal.alarm(1)\nwhile True: pass", {"TLE"}, "1", "stdin"),
    "sleeps": ("import time\ntime.sleep(1000)", {"TLE"}, "1", "stdin"),
    "c_level_bigint": ("x = 10 ** (10 ** 8)\nprint(1)", {"TLE"}, "1", "stdin"),
    "fork_bomb": ("import os\nwhile True:\n try: os.fork()\n except OSError: pass", {"TLE"}, "1", "stdin"),
    "thread_bomb": ("import threading, time\nts=[]\nwhile True:\n t=threading.Thread(target=time.sleep, args=(100,))\n"
                    " t.start(); ts.append(t)", {"RE", "TLE"}, "1", "stdin"),
    "memory_bomb": ("a = bytearray(8 * 1024 ** 3)\nprint(1)", {"MLE"}, "1", "stdin"),
    "memory_bomb_list": ("a = [0] * (10 ** 10)\nprint(1)", {"MLE"}, "1", "stdin"),
    "huge_output": ("while True: print('x' * 10000)", {"OLE"}, "1", "stdin"),
    "huge_stderr": ("import sys\nwhile True: sys.stderr.write('x' * 100000)", {"OLE"}, "1", "stdin"),
    "fill_tmp_and_shm": (f"import os\nfor d in ('/tmp', '/dev/shm', '.'):\n"
                         f" try:\n  with open(d + '/{MARK}_fill', 'wb') as f:\n"
                         f"   while True: f.write(b'x' * (1 << 20))\n except OSError: pass\nprint('filled')",
                         {"WA"}, "1", "stdin"),
    "network": (f"import socket\ntry:\n s = socket.create_connection(('127.0.0.1', {PORT}), timeout=1)\n"
                f" print(s.recv(100).decode())\nexcept OSError: print('no network')", {"WA"}, SECRET, "stdin"),
    "dns": ("import socket\ntry:\n socket.getaddrinfo('example.com', 80); print('resolved')\n"
            "except OSError: print('no dns')", {"WA"}, "resolved", "stdin"),
    "write_outside": ("import os\nok = []\n" + "".join(   # /tmp and /dev/shm are the sandbox's own tmpfs
        f"try:\n open('{d.rstrip('/')}/{MARK}_w', 'w').write('x'); ok.append(1)\nexcept OSError: pass\n"
        for d in PLANT_DIRS if d not in ("/tmp", "/dev/shm")) + "print('wrote' if ok else 'contained')",
        {"WA"}, "wrote", "stdin"),
    "see_launcher_files": ("import os\nprint('found' if os.path.exists('/tmp/fstab') or os.listdir('/tmp') else 'hidden')",
                           {"WA"}, "found", "stdin"),   # the unshare path writes its fstab under the run's /tmp
    "read_shadow": ("try: print(open('/etc/shadow').read().split()[0])\nexcept OSError: print('denied')",
                    {"WA"}, None, "stdin"),  # expected output filled in below from the real file
    "env_secrets": (FIND_SECRET + "scan(repr(dict(os.environ)))\nfor p in os.listdir('/proc'):\n"
                    " try: scan(open('/proc/%s/environ' % p, 'rb').read())\n except OSError: pass\nprint('none')",
                    {"WA"}, SECRET, "stdin"),
    "read_expected_files": (FIND_SECRET + "for top in ('/tmp', '/work', '/root', '/home', '/sandbox', '/var', '/dev/shm'):\n"
                            " for d, ds, fs in os.walk(top):\n  if d.startswith(sys.prefix): ds[:] = []; continue\n  for f in fs:\n"
                            "   try: scan(open(os.path.join(d, f), 'rb').read(1 << 20))\n   except OSError: pass\n"
                            "for p in os.listdir('/proc'):\n if p.isdigit():\n"
                            "  for f in ('cmdline', 'environ'):\n"
                            "   try: scan(open('/proc/%s/%s' % (p, f), 'rb').read())\n   except OSError: pass\n"
                            "for fd in range(3, 64):\n try: os.set_blocking(fd, False); scan(os.read(fd, 1 << 16))\n except OSError: pass\n"
                            "print('none')", {"WA"}, SECRET, "stdin"),
    "read_parent_memory": (FIND_SECRET + "for p in os.listdir('/proc'):\n if not p.isdigit(): continue\n"
                           " try:\n  maps = open('/proc/%s/maps' % p).read().splitlines()\n  mem = open('/proc/%s/mem' % p, 'rb')\n"
                           "  for line in maps:\n   a, b = [int(x, 16) for x in line.split()[0].split('-')]\n"
                           "   try: mem.seek(a); scan(mem.read(min(b - a, 1 << 24)))\n   except (OSError, ValueError, OverflowError): pass\n"
                           " except OSError: pass\nprint('none')", {"WA"}, SECRET, "stdin"),
    "caller_frames_and_gc": (FIND_SECRET + "f = sys._getframe()\nwhile f:\n scan(repr(f.f_locals)); scan(repr(f.f_globals)); f = f.f_back\n"
                             "for o in gc.get_objects():\n try: scan(repr(o)[:100000])\n except Exception: pass\nprint('none')",
                             {"WA"}, SECRET, "stdin"),
    "exit0_first": ("exit(0)\nprint(1)", {"WA"}, "1", "stdin"),
    "os_exit0_first": ("import os\nos._exit(0)", {"WA"}, "1", "stdin"),
    "prints_a_pass": ("import os, json\nprint('AC\\nAll tests passed\\n{\"i\": 0, \"status\": \"ok\", \"out\": \"1\"}')\n"
                      "for fd in range(3, 64):\n"
                      " try: os.write(fd, b'{\"i\": 0, \"status\": \"ok\", \"out\": \"1\\\\n\"}\\n{\"end\": \"0\"}\\n')\n"
                      " except OSError: pass", {"WA", "RE"}, "1", "stdin"),
    "patch_checker_modules": ("import sys, json, builtins\nfake = type(sys)('code_judge')\nfake.outputs_match = lambda *a, **k: True\n"
                              "sys.modules['code_judge'] = fake\njson.dumps = lambda *a, **k: '\"1\"'\n"
                              "builtins.isinstance = lambda *a: True\nprint(0)", {"WA", "RE"}, "1", "stdin"),
    "double_forked_daemon": (f"import os, time\nif os.fork() == 0:\n os.setsid()\n if os.fork() == 0:\n"
                             f"  time.sleep(3)\n  for d in {PLANT_DIRS!r}:\n"
                             f"   try: open(d.rstrip('/') + '/{MARK}_daemon', 'w').write('x')\n   except OSError: pass\n"
                             f"  while True: time.sleep(1)\n os._exit(0)\nprint('bye')", {"WA"}, "1", "stdin"),
    "setsid_and_spin": ("import os\ntry: os.setsid()\nexcept OSError: pass\nwhile True: pass", {"TLE"}, "1", "stdin"),
    "kill_parent_and_group": ("import os, signal\nfor f in (lambda: os.kill(os.getppid(), 9), lambda: os.kill(1, 9),\n"
                              "          lambda: os.killpg(0, 9), lambda: os.kill(-1, 9)):\n"
                              " try: f()\n except OSError: pass\nprint('alive')", {"RE", "WA"}, "judge down", "stdin"),
    "deep_recursion": ("import sys\nsys.setrecursionlimit(10 ** 8)\ndef f(n): return f(n + 1) + 1\nprint(f(0))",
                       {"RE", "MLE", "TLE"}, "1", "stdin"),   # 3.11 keeps Python frames on the heap
    "deep_c_recursion": ("import sys, functools\nsys.setrecursionlimit(10 ** 8)\n"
                         "f = functools.lru_cache(None)(lambda n: f(n + 1) + 1)\nprint(f(0))",
                         {"RE"}, "1", "stdin"),                  # C stack overflow: SIGSEGV
    "lying_eq_object": ("class Solution:\n def f(self, x):\n  class E:\n   def __eq__(s, o): return True\n"
                        "   def __repr__(s): return '12345'\n  return E()", {"WA"}, "12345", "functional"),
    "lying_int_subclass": ("class L(int):\n def __eq__(s, o): return True\n def __repr__(s): return '12345'\n"
                           " __str__ = __repr__\nclass Solution:\n def f(self, x): return L(0)", {"WA"}, "12345", "functional"),
    "lying_str_and_list": ("class S(str):\n def __eq__(s, o): return True\nclass M(list):\n def __iter__(s): return iter([12345])\n"
                           " def __len__(s): return 1\nclass Solution:\n def f(self, x): return M([S('no')])", {"WA"}, "[12345]",
                           "functional"),
    "patch_checker_functional": ("import sys, json, builtins\nfake = type(sys)('code_judge')\n"
                                 "fake.values_match = fake.verdict = lambda *a, **k: True\nsys.modules['code_judge'] = fake\n"
                                 "builtins.type = lambda *a: int\nclass Solution:\n def f(self, x): return 0",
                                 {"WA", "RE"}, "54321", "functional"),
}


def _shadow_first_token():
    try:
        return open("/etc/shadow").read().split()[0]
    except (OSError, IndexError):
        return "no-shadow-file"


def problem_for(name, expected, mode):
    if mode == "functional":
        return cj.normalize_problem({"question_id": name, "metadata": {"func_name": "f"},
                                     "public_test_cases": [{"input": "1", "output": expected, "testtype": "functional"}]})
    return cj.normalize_problem({"question_id": name, "public_test_cases": [
        {"input": "1\n", "output": expected, "testtype": "stdin"}]})   # one test: restarts are tested elsewhere


def sandbox_processes():
    """Host processes running under a sandbox uid this test process handed out (they would be escapes or
    leftovers). Other processes' sandboxes on the same machine (a training run judging code) are not ours."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            status = open(f"/proc/{pid}/status").read()
        except OSError:
            continue
        uid = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
        if uid in cj.ISSUED_UIDS:
            found.append((pid, uid))
    return found


def launcher_children():
    """bwrap / unshare processes that this test process started and that are still alive."""
    left = []
    for pid in os.listdir("/proc"):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if int(rest[1]) == os.getpid() and comm in ("bwrap", "unshare") and rest[0] != "Z":
            left.append((pid, comm))
    return left


def planted_files():
    found = []
    for d in PLANT_DIRS + [os.getcwd()]:
        try:
            found += [os.path.join(d, f) for f in os.listdir(d) if MARK in f or f in ("sitecustomize.py", "cj_hijack.pth")]
        except OSError:
            pass
    return found


def backends():
    out = []
    for backend in ("bwrap", "unshare"):
        if cj.isolation_backend(backend) == backend:
            out.append(backend)
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root (CI runs as root)")
@pytest.mark.parametrize("backend", ["bwrap", "unshare"])
def test_hostile_battery(backend, tmp_path):
    if backend not in backends():
        pytest.skip(f"{backend} not available here")
    os.environ["CJ_TEST_API_KEY"] = SECRET          # a secret in the judge's own environment
    (tmp_path / "problem.json").write_text(json.dumps({"expected": SECRET}))   # a secret on disk
    before_files = planted_files()
    assert not before_files, before_files

    def run(item):
        name, (code, allowed, expected, mode) = item
        if name == "read_shadow":
            expected = _shadow_first_token()
        result = cj.judge(problem_for(name, expected, mode), code, limits=LIMITS, isolation=backend,
                          require_full_isolation=True)
        return name, allowed, result

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, BATTERY.items()))
    failures = []
    for name, allowed, result in results:
        assert result["sandbox"]["backend"] == backend
        bad = [v for v in result["verdicts"] if v not in allowed]   # AC is never allowed: the attack worked
        if bad:
            failures.append(f"{name}: verdicts {result['verdicts']} details {result['details']}")
    assert not failures, "\n".join(failures)

    # planting sitecustomize.py / a .pth file must not reach the next run
    plant = ("import os\nfor d in ('.', '/tmp', '/dev/shm'):\n"
             " try:\n  open(d + '/sitecustomize.py', 'w').write('import builtins; builtins.HIJACK = 1')\n"
             "  open(d + '/cj_hijack.pth', 'w').write('import builtins; builtins.HIJACK = 1')\n"
             " except OSError: pass\nprint('planted')")
    check = "import builtins, sys\nprint('hijacked' if hasattr(builtins, 'HIJACK') or 'sitecustomize' in sys.modules else 'clean')"
    cj.judge(problem_for("plant", "x", "stdin"), plant, limits=LIMITS, isolation=backend)
    assert cj.judge(problem_for("check", "hijacked", "stdin"), check, limits=LIMITS, isolation=backend)["verdicts"] == ["WA"]

    assert not CONNECTIONS, "a sandboxed program reached a host socket"
    assert sandbox_processes() == [], "processes outlived their sandbox"
    cj.shutdown_pool()   # the idle warm sandboxes (no code inside) go too: nothing of ours is left
    assert launcher_children() == [], "sandbox launchers left running"
    assert planted_files() == [], "files were left outside the sandbox"
    os.environ.pop("CJ_TEST_API_KEY", None)


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root (CI runs as root)")
def test_environment_switch_forces_the_fallback(monkeypatch):
    monkeypatch.setenv(cj.FORCE_FALLBACK_ENV, "1")
    assert cj.isolation_backend("auto") in ("unshare", "none")
    monkeypatch.delenv(cj.FORCE_FALLBACK_ENV)
    assert cj.isolation_backend("auto") == backends()[0]
