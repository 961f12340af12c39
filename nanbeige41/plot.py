"""Training curves of a run directory, from its metrics.jsonl.

    python -m nanbeige41.plot runs/toy/code2            # -> runs/toy/code2/curves.png (or .svg)
    python -m nanbeige41.plot runs/toy/code1 runs/toy/code2 --out fig4.png   # stages side by side

`bar_chart` draws evaluate.py's comparison of checkpoints (grouped bars, one group per benchmark).

For the code stages this is the paper's Figure 4: R_correctness, R_time and the held-out pass rate
against the step, with a dashed line where one stage ends and the next begins. matplotlib is used
when installed (it is optional); without it a plain SVG is written by hand, so the command works
on a bare machine too.
"""

import argparse
import json
import os

SERIES = [  # (metrics key, label) in drawing order; missing keys are skipped
    ("r_correctness", "R_correctness"), ("r_time", "R_time"), ("eval_pass_rate", "eval pass rate"),
    ("reward_mean", "reward"), ("rm_score", "RM score"), ("repetitive", "repetitive"),
    ("answer_score", "answer score"), ("eval_total", "eval reward"), ("loss", "loss"),
]
COLORS = ["#1f77b4", "#2ca02c", "#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf"]


def read_curves(run_dirs):
    """{label: [(x, y)]} over the runs laid end to end, and the x of each stage boundary."""
    curves, bounds, offset = {}, [], 0
    for d in run_dirs:
        rows = [json.loads(line) for line in open(os.path.join(d, "metrics.jsonl")) if line.strip()]
        for key, label in SERIES:
            pts = [(offset + r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
            if pts:
                curves.setdefault(label, []).extend(pts)
        offset += max((r["step"] for r in rows), default=0)
        bounds.append(offset)
    return curves, bounds[:-1]


def write_svg(curves, bounds, path, title, width=720, height=420, pad=50):
    xs = [x for pts in curves.values() for x, _ in pts] or [0, 1]
    ys = [y for pts in curves.values() for _, y in pts] or [0, 1]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = min(min(ys), 0.0), max(max(ys), 1e-9)
    sx = lambda x: pad + (x - x0) / (x1 - x0) * (width - 2 * pad)  # noqa: E731
    sy = lambda y: height - pad - (y - y0) / (y1 - y0) * (height - 2 * pad)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
           f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">step</text>']
    for v in (y0, (y0 + y1) / 2, y1):
        out.append(f'<text x="{pad - 6}" y="{sy(v) + 4}" text-anchor="end">{v:.2f}</text>')
    for b in bounds:
        out.append(f'<line x1="{sx(b)}" y1="{pad}" x2="{sx(b)}" y2="{height - pad}" stroke="gray" stroke-dasharray="5,4"/>')
    for i, (label, pts) in enumerate(curves.items()):
        color = COLORS[i % len(COLORS)]
        path_d = " ".join(f"{'M' if k == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for k, (x, y) in enumerate(sorted(pts)))
        out.append(f'<path d="{path_d}" fill="none" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{width - pad - 150}" y="{pad + 16 * i}" fill="{color}">{label}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def write_bars_svg(groups, path, title, width=760, height=400, pad=50):
    series = list(dict.fromkeys(m for g in groups.values() for m in g))
    slot = (width - 2 * pad) / max(len(groups), 1)
    bar = slot * 0.8 / max(len(series), 1)
    y_max = max([1.0] + [v for g in groups.values() for v in g.values() if v is not None])
    sy = lambda v: height - pad - v / y_max * (height - 2 * pad - 20)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 16 * len(series)}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height + 16 * len(series)}" fill="white"/>',
           f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>']
    for v in (0.0, y_max / 2, y_max):
        out.append(f'<text x="{pad - 6}" y="{sy(v) + 4}" text-anchor="end">{v:.2f}</text>')
    for gi, (label, values) in enumerate(groups.items()):
        x0 = pad + gi * slot + slot * 0.1
        for si, name in enumerate(series):
            v = values.get(name)
            if v is None:
                continue
            out.append(f'<rect x="{x0 + si * bar:.1f}" y="{sy(v):.1f}" width="{bar * 0.9:.1f}" '
                       f'height="{sy(0) - sy(v):.1f}" fill="{COLORS[si % len(COLORS)]}"/>')
        for k, part in enumerate(label.split("\n")):
            out.append(f'<text x="{pad + (gi + 0.5) * slot:.1f}" y="{height - pad + 16 + 13 * k}" '
                       f'text-anchor="middle">{part}</text>')
    for si, name in enumerate(series):
        out.append(f'<text x="{pad}" y="{height + 16 * si + 4}" fill="{COLORS[si % len(COLORS)]}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def bar_chart(groups, path, title):
    """groups: {group label: {series name: value or None}} -> grouped bars in `path` (PNG through matplotlib;
    without it an SVG next to it). Returns the path written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        path = os.path.splitext(path)[0] + ".svg"
        write_bars_svg(groups, path, title)
        return path
    series = list(dict.fromkeys(m for g in groups.values() for m in g))
    width = 0.8 / max(len(series), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups)), 4))
    for si, name in enumerate(series):
        xs = [gi + (si - (len(series) - 1) / 2) * width for gi in range(len(groups))]
        ys = [g.get(name) if g.get(name) is not None else 0.0 for g in groups.values()]
        ax.bar(xs, ys, width * 0.95, label=name, color=COLORS[si % len(COLORS)])
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylim(0, max([1.0] + [v for g in groups.values() for v in g.values() if v is not None]) * 1.05)
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=min(len(series), 6))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description="Plot metrics.jsonl curves of one or more consecutive runs.")
    p.add_argument("runs", nargs="+", help="run directories (consecutive stages are laid end to end)")
    p.add_argument("--out", default=None, help="output image (default RUN/curves.png, or .svg without matplotlib)")
    args = p.parse_args(argv)
    curves, bounds = read_curves(args.runs)
    title = " -> ".join(os.path.basename(os.path.normpath(r)) for r in args.runs)
    out = args.out or os.path.join(args.runs[-1], "curves.png")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        out = os.path.splitext(out)[0] + ".svg"
        write_svg(curves, bounds, out, title)
        print(f"matplotlib not installed: wrote {out}")
        return out
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, pts in curves.items():
        pts = sorted(pts)
        ax.plot([x for x, _ in pts], [y for _, y in pts], label=label, marker="." if len(pts) < 30 else None)
    for b in bounds:
        ax.axvline(b, color="gray", linestyle="--")
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()
