"""Where the toy configuration keeps its files, named once, and the one way a missing toy prerequisite is built.

The shipped data lives in the repository (`data/toy`, found from this file, whatever the working directory);
toy runs live under `runs/toy` in the working directory, like every `--out` default. A script whose toy default
is missing (the SFT checkpoint a GRPO stage starts from, a reward model, the corpus) builds it first by running
the script that makes it, as one plain process, and says so: `build_missing`.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY_DATA = os.path.join(ROOT, "data", "toy")
TOY_SFT_DATA = os.path.join(TOY_DATA, "sft")                        # one JSONL per domain + eval.jsonl
TOY_TOKENIZER = os.path.join(TOY_DATA, "tokenizer")
TOY_WORLD = os.path.join(TOY_DATA, "world.json")                    # the offline wiki of the search agent
TOY_QUESTIONS = os.path.join(TOY_DATA, "search_questions.jsonl")    # multi-hop QA over that world
TOY_CODE = os.path.join(TOY_DATA, "code_problems.jsonl")            # LiveCodeBench layout
TOY_RL_PROMPTS = os.path.join(TOY_DATA, "rl_prompts.jsonl")         # point / pair GRPO prompts
TOY_PREFS = {"point": os.path.join(TOY_DATA, "prefs.jsonl"), "pair": os.path.join(TOY_DATA, "pairs.jsonl")}
TOY_RUNS = os.path.join("runs", "toy")


def toy_run(name):
    """runs/toy/<name>: sft, point, pair, code1, code2, agent, rm_point, rm_pair."""
    return os.path.join(TOY_RUNS, name)


def plain_env():
    """The environment without torchrun's variables, so a child script runs as one plain process."""
    drop = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "GROUP_WORLD_SIZE"}
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("TORCHELASTIC")}


def build_missing(path, marker, argv, log):
    """If `path/marker` does not exist, run `python ROOT/argv[0] argv[1:]` (which writes it) and wait.
    Returns path. Call on one rank; the others wait at a barrier."""
    if not os.path.exists(os.path.join(path, marker)):
        log(f"toy prerequisite {path} is missing: running `python {' '.join(argv)}` first")
        subprocess.run([sys.executable, os.path.join(ROOT, argv[0])] + list(argv[1:]), check=True, env=plain_env())
    return path
