"""The project's import graph: the package never imports a top-level script (the scripts are leaves), and no
module imports itself back through others (no loops), function-local imports included."""
import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "*.py")) if not p.endswith("conftest.py")}
PACKAGE = {"nanbeige41." + os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "nanbeige41", "*.py"))}


def project_imports(path):
    """Every project module `path` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n in SCRIPTS or n in PACKAGE}
    return found


def graph():
    nodes = {m: os.path.join(ROOT, m.replace(".", os.sep) + ".py") for m in SCRIPTS | PACKAGE}
    return {m: project_imports(p) - {m} for m, p in nodes.items()}


def test_the_package_imports_no_script():
    upward = {m: sorted(deps & SCRIPTS) for m, deps in graph().items() if m in PACKAGE and deps & SCRIPTS}
    assert upward == {}, f"package modules importing top-level scripts: {upward}"


def test_no_import_loops():
    g = graph()
    state, loops = {}, []

    def visit(m, stack):
        state[m] = "open"
        for d in sorted(g.get(m, ())):
            if state.get(d) == "open":
                loops.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = "done"
    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    assert loops == [], f"import loops: {loops}"


def test_the_graph_is_read_from_the_real_files():
    g = graph()  # a check that cannot see the imports would pass vacuously
    assert "code_judge" in g["train_grpo"] and "nanbeige41.sandbox" in g["code_judge"]
    assert "nanbeige41.model" in g["nanbeige41.checkpoint"]
