"""Toy code problems for the whole project: SFT data, code RL (stages code1/code2) and evaluation.

Paper section 2.3.2 builds RL samples from "a problem statement, test cases, a time-complexity-optimal
solution, and the corresponding optimal complexity label". This module generates such samples at a
size a few-million-parameter model can learn: 19 families of stdin/stdout Python tasks with terse
statements, instance parameters (a constant K, a modulus M, a base B) written into the statement so
the model must copy them into its code, and tests produced by running the reference solution.
Many families carry TWO correct solutions of different complexity (pair counting O(n^2) vs hashing
O(n), range sums O(n*q) vs prefix sums, max subarray O(n^2) vs Kadane, inversions O(n^2) vs a Fenwick
tree as in the paper's Appendix C.3, binary search on the answer vs two pointers as in C.1): the
material for the gated time reward of stage code2. Solutions are short and uniform in style.

Records follow LiveCodeBench (`question_id`, `question_content`, `public_test_cases`,
`private_test_cases`, ...) plus the RL fields `reference_solution`, `optimal_complexity`,
`input_generator` (source of `gen(n, seed) -> str`, leaning to the slow solutions' worst case),
`solutions` (list of {"code", "complexity", "approach"}, optimal first), `family` and `split`
("train" / "test": held-out instances of every family, with their own parameters).

Prompt/response format used by SFT and RL (see code_prompt / code_response / response_text):
    user:      the statement + "Write a Python program that reads standard input and prints the answer."
    assistant: "<think>\n{reasoning}\n</think>\n\n```python\n{code}\n```"
The GRPO trainer scores the text after the generation prompt "<|im_start|>assistant\n" (the model
opens <think> itself) with code_judge.code_reward(problem, text, truncated=..., stage=...).

Run:
    python -m nanbeige41.toy_code --out data/toy/code_problems.jsonl   # writes the shipped set
Not covered: functional (LeetCode-style) problems and C++; the statements are terse templates,
not natural contest text.
"""
import argparse
import io
import json
import os
import random
import sys
from string import Template

# --------------------------------------------------------------------------- input generators
# Sources of gen(n, seed); $LO/$HI/$K are filled per family/instance. "n" as HI means values grow
# with n (so, e.g., a list-membership distinct count really is quadratic).
ARRAY = """import random
def gen(n, seed):
    r = random.Random(seed)
    n = max(n, $MIN_N)
    a = [r.randint($LO, $HI) for _ in range(n)]
    return str(n) + "\\n" + " ".join(map(str, a)) + "\\n"
"""
SORTED = ARRAY.replace("for _ in range(n)]", "for _ in range(n)]\n    a.sort()")
INCREASING = ARRAY.replace("for _ in range(n)]", "for _ in range(n)]\n    a = sorted(set(a)); n = len(a)")
DECREASING = ARRAY.replace("for _ in range(n)]", "for _ in range(n)]\n    a = sorted(set(a), reverse=True); n = len(a)")
PERMUTATION = """import random
def gen(n, seed):
    r = random.Random(seed)
    a = list(range(1, n + 1))
    r.shuffle(a)
    return str(n) + "\\n" + " ".join(map(str, a)) + "\\n"
"""
QUERIES = """import random
def gen(n, seed):
    r = random.Random(seed)
    a = [r.randint($LO, $HI) for _ in range(n)]
    lines = [str(n) + " " + str(n), " ".join(map(str, a))]
    for _ in range(n):
        l = r.randint(1, n // 4 + 1)
        lines.append(str(l) + " " + str(r.randint(max(l, n - n // 4), n)))
    return "\\n".join(lines) + "\\n"
"""
WINDOW = """import random
def gen(n, seed):
    r = random.Random(seed)
    a = [r.randint($LO, $HI) for _ in range(n)]
    return str(n) + " " + str(max(1, n // 2)) + "\\n" + " ".join(map(str, a)) + "\\n"
"""
SINGLE = """def gen(n, seed):
    return str(n) + "\\n"
"""

READ = "n=int(input())\na=list(map(int,input().split()))\n"

# --------------------------------------------------------------------------- families
# name, statement, params (name -> choices), gen source, extra gen fields, test generator kind,
# solutions [(approach, complexity, code)] with the time-optimal one first.
FAMILIES = [
    dict(name="sum_mod", statement="Print the sum of the n integers modulo $M.",
         params={"M": [7, 9, 10, 11, 13, 97, 100, 1000]}, gen=ARRAY, lo=0, hi=99,
         solutions=[("running sum", "O(n)", READ + "print(sum(a)%$M)")]),
    dict(name="pair_sum", statement="Count pairs i<j with a_i+a_j=$K.",
         params={"K": [4, 5, 6, 7, 8, 9, 10, 12]}, gen=ARRAY, lo=0, hi="$K",
         solutions=[("hash map of counts", "O(n)",
                     READ + "c={}\nr=0\nfor x in a:\n r+=c.get($K-x,0)\n c[x]=c.get(x,0)+1\nprint(r)"),
                    ("check every pair", "O(n^2)",
                     READ + "r=0\nfor i in range(n):\n for j in range(i+1,n):\n  if a[i]+a[j]==$K:r+=1\nprint(r)")]),
    dict(name="range_sum", statement="Answer q queries l r: print (a_l+...+a_r) mod $M.",
         input_format="n q, then n integers, then q lines l r (1-indexed)",
         params={"M": [7, 10, 13, 50, 97, 100, 1000, 9973]}, gen=QUERIES, lo=0, hi=99,
         solutions=[("prefix sums", "O(n)",
                     "n,q=map(int,input().split())\na=list(map(int,input().split()))\np=[0]\nfor x in a:p.append(p[-1]+x)\n"
                     "for _ in range(q):\n l,r=map(int,input().split())\n print((p[r]-p[l-1])%$M)"),
                    ("sum each query", "O(n^2)",
                     "n,q=map(int,input().split())\na=list(map(int,input().split()))\n"
                     "for _ in range(q):\n l,r=map(int,input().split())\n s=0\n for i in range(l-1,r):s+=a[i]\n print(s%$M)")]),
    dict(name="max_subarray", statement="Print the largest sum of a non-empty contiguous subarray.",
         params={}, gen=ARRAY, lo=-9, hi=9,
         solutions=[("Kadane's scan", "O(n)",
                     READ + "b=r=a[0]\nfor x in a[1:]:\n b=max(x,b+x)\n r=max(r,b)\nprint(r)"),
                    ("try every start", "O(n^2)",
                     READ + "r=a[0]\nfor i in range(n):\n s=0\n for j in range(i,n):\n  s+=a[j]\n  r=max(r,s)\nprint(r)")]),
    dict(name="inversions", statement="a is a permutation of 1..n. Print the number of pairs i<j with a_i>a_j, modulo $M.",
         params={"M": [7, 10, 13, 97, 100, 1000, 10007, 1000000007]}, gen=PERMUTATION,
         solutions=[("Fenwick tree", "O(n log n)",
                     READ + "t=[0]*(n+1)\nr=0\nfor i,x in enumerate(a):\n r+=i\n j=x\n while j:r-=t[j];j-=j&-j\n"
                     " while x<=n:t[x]+=1;x+=x&-x\nprint(r%$M)"),
                    ("check every pair", "O(n^2)",
                     READ + "r=0\nfor i in range(n):\n for j in range(i+1,n):\n  if a[i]>a[j]:r+=1\nprint(r%$M)")]),
    dict(name="distinct", statement="Print the number of distinct values among the n integers.",
         params={}, gen=ARRAY, lo=0, hi="n", test_hi=20,
         solutions=[("a set", "O(n)", READ + "print(len(set(a)))"),
                    ("a list of seen values", "O(n^2)",
                     READ + "s=[]\nfor x in a:\n if x not in s:s.append(x)\nprint(len(s))")]),
    dict(name="stack_pairs", statement="a is sorted. Pair elements so that $K*x<=y for each pair (x,y); "
         "each element is used at most once. Print the largest number of pairs.",
         params={"K": [2, 3, 4]}, gen=SORTED, lo=1, hi=99,
         solutions=[("two pointers", "O(n)",
                     READ + "i,j,r=0,n//2,0\nwhile i<n//2 and j<n:\n if a[i]*$K<=a[j]:r+=1;i+=1\n j+=1\nprint(r)"),
                    ("binary search on the answer", "O(n log n)",
                     READ + "l,h=0,n//2\nwhile l<h:\n m=(l+h+1)//2\n if all(a[i]*$K<=a[n-m+i] for i in range(m)):l=m\n"
                     " else:h=m-1\nprint(l)")]),
    dict(name="leaders", statement="Count positions i where a_i is larger than every earlier element.",
         params={}, gen=INCREASING, lo=0, hi="n", test_gen=ARRAY, test_hi=30,
         solutions=[("running maximum", "O(n)",
                     READ + "m=-1\nr=0\nfor x in a:\n if x>m:r+=1;m=x\nprint(r)"),
                    ("compare with all earlier", "O(n^2)",
                     READ + "r=0\nfor i in range(n):\n if all(a[j]<a[i] for j in range(i)):r+=1\nprint(r)")]),
    dict(name="subarray_sum", statement="Count contiguous subarrays with sum $K.",
         params={"K": [0, 1, 2, 3, 4, 5, -1, -2]}, gen=ARRAY, lo=-3, hi=3,
         solutions=[("prefix sums in a hash map", "O(n)",
                     READ + "c={0:1}\ns=r=0\nfor x in a:\n s+=x\n r+=c.get(s-$K,0)\n c[s]=c.get(s,0)+1\nprint(r)"),
                    ("try every start", "O(n^2)",
                     READ + "r=0\nfor i in range(n):\n s=0\n for j in range(i,n):\n  s+=a[j]\n  if s==$K:r+=1\nprint(r)")]),
    dict(name="window_sum", statement="Print the largest sum of k consecutive elements, times $K.",
         input_format="n k, then n integers", params={"K": [1, 2, 3, 5, 10]}, gen=WINDOW, lo=0, hi=99,
         solutions=[("sliding window", "O(n)",
                     "n,k=map(int,input().split())\na=list(map(int,input().split()))\ns=r=sum(a[:k])\n"
                     "for i in range(k,n):\n s+=a[i]-a[i-k]\n r=max(r,s)\nprint(r*$K)"),
                    ("sum every window", "O(n^2)",
                     "n,k=map(int,input().split())\na=list(map(int,input().split()))\nr=0\n"
                     "for i in range(n-k+1):\n s=0\n for j in range(i,i+k):s+=a[j]\n r=max(r,s)\nprint(r*$K)")]),
    dict(name="gcd_shift", statement="Print the gcd of all a_i+$K.",
         params={"K": [0, 1, 2, 3, 5, 6, 10]}, gen=ARRAY, lo=1, hi=60,
         solutions=[("fold gcd", "O(n)", READ + "from math import gcd\ng=0\nfor x in a:g=gcd(g,x+$K)\nprint(g)")]),
    dict(name="multiples", statement="Count the a_i divisible by $K.",
         params={"K": [2, 3, 4, 5, 6, 7, 10]}, gen=ARRAY, lo=0, hi=99,
         solutions=[("one scan", "O(n)", READ + "print(sum(1 for x in a if x%$K==0))")]),
    dict(name="fib_mod", statement="F(0)=0, F(1)=1, F(i)=F(i-1)+F(i-2). Print F(n) mod $M.",
         input_format="n", params={"M": [7, 10, 13, 97, 100, 1000, 10007]}, gen=SINGLE,
         solutions=[("iterate", "O(n)", "n=int(input())\nx,y=0,1\nfor _ in range(n):x,y=y,(x+y)%$M\nprint(x)")]),
    dict(name="next_greater", statement="For each i print the first later element greater than a_i, or -1.",
         params={}, gen=DECREASING, lo=0, hi="n", test_gen=ARRAY, test_hi=30,
         solutions=[("monotonic stack", "O(n)",
                     READ + "r=[-1]*n\ns=[]\nfor i in range(n):\n while s and a[s[-1]]<a[i]:r[s.pop()]=a[i]\n s.append(i)\nprint(*r)"),
                    ("scan to the right", "O(n^2)",
                     READ + "r=[-1]*n\nfor i in range(n):\n for j in range(i+1,n):\n  if a[j]>a[i]:r[i]=a[j];break\nprint(*r)")]),
    dict(name="pair_div", statement="Count pairs i<j with a_i+a_j divisible by $K.",
         params={"K": [2, 3, 4, 5, 6, 7, 9, 10]}, gen=ARRAY, lo=0, hi=99,
         solutions=[("count remainders", "O(n)",
                     READ + "c=[0]*$K\nr=0\nfor x in a:\n r+=c[-x%$K]\n c[x%$K]+=1\nprint(r)"),
                    ("check every pair", "O(n^2)",
                     READ + "r=0\nfor i in range(n):\n for j in range(i+1,n):\n  if (a[i]+a[j])%$K==0:r+=1\nprint(r)")]),
    dict(name="mode_count", statement="Print how often the most frequent value occurs.",
         params={}, gen=ARRAY, lo=0, hi=9,
         solutions=[("hash map of counts", "O(n)",
                     READ + "c={}\nfor x in a:c[x]=c.get(x,0)+1\nprint(max(c.values()))"),
                    ("count each element", "O(n^2)",
                     READ + "r=0\nfor x in a:\n k=0\n for y in a:\n  if y==x:k+=1\n r=max(r,k)\nprint(r)")]),
    dict(name="longest_run", statement="Print the length of the longest block of equal adjacent values.",
         params={}, gen=ARRAY, lo=0, hi=2,
         solutions=[("one scan", "O(n)",
                     READ + "r=k=1\nfor i in range(1,n):\n k=k+1 if a[i]==a[i-1] else 1\n r=max(r,k)\nprint(r)")]),
    dict(name="poly_hash", statement="Print (a_1*$B^0+a_2*$B^1+...+a_n*$B^(n-1)) mod $M.",
         params={"B": [2, 3, 5, 7, 10, 31], "M": [97, 101, 1000, 10007, 1000003]}, gen=ARRAY, lo=0, hi=99,
         solutions=[("Horner's rule from the end", "O(n)",
                     READ + "h=0\nfor x in reversed(a):h=(h*$B+x)%$M\nprint(h)"),
                    ("a power per term", "O(n log n)",
                     READ + "print(sum(a[i]*pow($B,i,$M) for i in range(n))%$M)")]),
    dict(name="min_diff", statement="Print the smallest |a_i-a_j| over i<j, times $K.",
         params={"K": [1, 2, 3, 5]}, gen=ARRAY, lo=0, hi=10 ** 6, test_hi=999, min_n=2,
         solutions=[("sort and compare neighbours", "O(n log n)",
                     READ + "a.sort()\nprint(min(a[i+1]-a[i] for i in range(n-1))*$K)"),
                    ("check every pair", "O(n^2)",
                     READ + "r=10**9\nfor i in range(n):\n for j in range(i+1,n):\n  r=min(r,abs(a[i]-a[j]))\nprint(r*$K)")]),
]

INSTANCES_PER_FAMILY = 12  # the last 2 of each family are held out (split "test")
TEST_SIZES = [3, 5, 1, 2, 4, 6, 8, 10, 13, 16]  # first 2 public, rest private
PROMPT_SUFFIX = "Write a Python program that reads standard input and prints the answer."


def _fill(text, params):
    return Template(text).substitute({k: str(v) for k, v in params.items()})


def _generator_source(family, params, for_tests):
    source = family.get("test_gen", family["gen"]) if for_tests else family["gen"]
    hi = family.get("test_hi", family.get("hi", 9)) if for_tests else family.get("hi", 9)
    fields = dict(LO=family.get("lo", 0), HI=_fill(str(hi), params), MIN_N=family.get("min_n", 1))
    return _fill(source, fields)


def run_program(code, stdin_text):
    """Run a *trusted* program (our reference solutions) in-process: used to make expected outputs."""
    old_in, old_out = sys.stdin, sys.stdout
    sys.stdin, sys.stdout = io.StringIO(stdin_text), io.StringIO()
    try:
        exec(compile(code, "<reference>", "exec"), {"__name__": "__main__"})
        return sys.stdout.getvalue()
    finally:
        sys.stdin, sys.stdout = old_in, old_out


def make_problem(family, index, rng):
    params = {k: rng.choice(v) for k, v in family["params"].items()}
    statement = _fill(family["statement"], params)
    input_format = family.get("input_format", "n, then n integers")
    content = f"{statement}\nInput: {input_format}.\nOutput: the answer."
    solutions = [{"code": _fill(code, params), "complexity": complexity, "approach": approach}
                 for approach, complexity, code in family["solutions"]]
    test_gen = {}
    exec(_generator_source(family, params, for_tests=True), test_gen)
    tests = []
    for k, n in enumerate(TEST_SIZES):
        text = test_gen["gen"](n, rng.randrange(1 << 30))
        tests.append({"input": text, "output": run_program(solutions[0]["code"], text), "testtype": "stdin"})
    return {
        "question_id": f"toy_{family['name']}_{index:03d}",
        "question_title": family["name"],
        "question_content": content,
        "platform": "toy",
        "starter_code": "",
        "difficulty": "easy",
        "public_test_cases": tests[:2],
        "private_test_cases": tests[2:],
        "metadata": {},
        "reference_solution": solutions[0]["code"],
        "optimal_complexity": solutions[0]["complexity"],
        "input_generator": _generator_source(family, params, for_tests=False),
        "solutions": solutions,
        "family": family["name"],
        "params": params,
        "split": "test" if index >= INSTANCES_PER_FAMILY - 2 else "train",
    }


def make_problems(seed=0, instances=INSTANCES_PER_FAMILY):
    """Deterministic: the same seed gives byte-identical records (random.Random only, sorted params)."""
    problems = []
    for f, family in enumerate(FAMILIES):
        rng = random.Random(seed * 1000 + f)
        problems += [make_problem(family, i, rng) for i in range(instances)]
    return problems


def code_prompt(problem):
    """User-message content for SFT and RL."""
    return f"{problem['question_content']}\n{PROMPT_SUFFIX}"


def code_response(solution):
    """Assistant turn for SFT: a one-sentence reasoning naming approach and complexity, and exactly
    one ```python block."""
    return {"reasoning_content": f"Approach: {solution['approach']}, {solution['complexity']} time.",
            "content": f"```python\n{solution['code']}\n```"}


def response_text(solution):
    """What the model writes after the generation prompt '<|im_start|>assistant\\n' (the text code_reward
    scores)."""
    r = code_response(solution)
    return f"<think>\n{r['reasoning_content']}\n</think>\n\n{r['content']}"


def main(argv=None):
    p = argparse.ArgumentParser(description="Write the toy code problem set (LCB layout + RL fields).")
    p.add_argument("--out", default="data/toy/code_problems.jsonl")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    problems = make_problems(args.seed)
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        for problem in problems:
            f.write(json.dumps(problem, sort_keys=True) + "\n")
    print(f"wrote {len(problems)} problems ({sum(p['split'] == 'test' for p in problems)} held out) to {args.out}")


if __name__ == "__main__":
    main()
