"""Render the timeline of an ftrt run as a Gantt chart (PNG or SVG, by the output's suffix).

Usage: python3 -m ftrt.analysis.plot REPORT.json [-o OUT.png] [--title TEXT]
       (the output defaults to REPORT's path with .png for .json; `ftrt-plot` once the package
       is pip-installed; from a source tree:
       PYTHONPATH=bindings/python python3 -m ftrt.analysis.plot)

One row per world rank whose timeline the report holds (trainers and hot spares, all of them in
a job of at most FTRT_TIMELINE_RANKS ranks; a larger job's others are in "left_out" with their
totals only, and the count is said on stderr; the coordinator holds no slot), coloured by
ledger interval kind (start-up, compute, exposed communication, checkpoint stall, detection
wait, recovery, rework, idle spare, down, teardown), with each failure (the injected or best
known failure time), its detection and the return of every member to training marked, and a
last row with each recovery's MTTR phases laid end to end from its detection (the failures'
"phases_ms": reach, plan, rebuild, transfer, resume). Reads the JSON report's "timeline"
(schema 1 or 2). Needs matplotlib (Debian: python3-matplotlib); does
not load libftrt.
"""
import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

COLOURS = {
    "startup": "#bdbdbd", "compute": "#2ca02c", "exposed_comm": "#1f77b4",
    "checkpoint_stall": "#9467bd", "detection_wait": "#d62728", "recovery": "#ff7f0e",
    "rework": "#8c564b", "spare_idle": "#f2e394", "down": "#000000", "teardown": "#e0e0e0",
}
EVENTS = {"failure": ("#d62728", "-"), "detected": ("#d62728", ":"),
          "resumed": ("#ff7f0e", "--")}
PHASES = {"reach": "#e377c2", "plan": "#7f7f7f", "rebuild": "#17becf", "transfer": "#ff7f0e",
          "resume": "#bcbd22"}


def recovery_phases(rep: dict, t0: float) -> List[Tuple[str, float, float]]:
    """(phase, start, length) in seconds since t0 (unix s) for the MTTR phases of every
    recovered failure of report rep, laid end to end from its detection ("detected_at"), in
    the order of PHASES; failures without "phases_ms" (not recovered, older reports) add
    nothing."""
    out = []
    for f in rep.get("failures", []):
        ph, det = f.get("phases_ms"), f.get("detected_at")
        if not ph or det is None:
            continue
        t = det - t0
        for name in PHASES:
            d = max(0.0, ph.get(name, 0.0)) / 1e3
            out.append((name, t, d))
            t += d
    return out


def draw_phases(ax: Any, spans: List[Tuple[str, float, float]], row: int) -> list:
    """Draws spans (recovery_phases) on row `row` of ax; returns their legend handles."""
    from matplotlib.patches import Patch
    for name, colour in PHASES.items():
        mine = [(t, d) for n, t, d in spans if n == name]
        if mine:
            ax.broken_barh(mine, (row - 0.3, 0.6), facecolors=colour, linewidth=0)
    return [Patch(color=c, label=f"MTTR: {n}") for n, c in PHASES.items()
            if any(x == n for x, _, _ in spans)]


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m ftrt.analysis.plot",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("report", help="the job's JSON report (FTRT_REPORT, --report)")
    ap.add_argument("out", nargs="?", help=argparse.SUPPRESS)  # the old positional form
    ap.add_argument("-o", "--out", dest="out_opt", metavar="OUT",
                    help="the chart: .png, .svg, .pdf (default: REPORT with .png)")
    ap.add_argument("--title", help="the chart's title (default: steps, failures, goodput)")
    a = ap.parse_args(argv)
    if a.out and a.out_opt:
        ap.error("give the output once (-o OUT)")
    a.out = a.out_opt or a.out or os.path.splitext(a.report)[0] + ".png"
    try:
        import matplotlib
    except ImportError as err:
        print(f"ftrt-plot: needs matplotlib ({err}); Debian: apt-get install python3-matplotlib",
              file=sys.stderr)
        return 1
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    with open(a.report) as f:
        rep = json.load(f)
    tl = rep.get("timeline")
    if rep.get("schema") not in (1, 2) or not tl:
        print(f"ftrt-plot: {a.report} has no schema-1 or schema-2 timeline", file=sys.stderr)
        return 1
    kinds = tl["kinds"]
    ranks = tl["ranks"]
    if tl.get("left_out_ranks"):
        print(f"ftrt-plot: {tl['left_out_ranks']} rank(s) left out of the report's timelines "
              f"(totals only: timeline.left_out); plotting the {len(ranks)} held", file=sys.stderr)
    phase_spans = recovery_phases(rep, tl["t0"])
    fig, ax = plt.subplots(figsize=(11, 0.6 * (len(ranks) + bool(phase_spans)) + 1.8))
    for row, r in enumerate(ranks):
        bars: Dict[str, List[Tuple[float, float]]] = {}
        for k, t0, t1 in r["intervals"]:
            bars.setdefault(kinds[k], []).append((t0, t1 - t0))
        for kind, spans in bars.items():
            ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=COLOURS.get(kind, "#cccccc"),
                           linewidth=0)
    labels = []
    for r in ranks:
        lr = r.get("logical_rank")
        labels.append(f"w{r['world_rank']} {r['role']}" + (f" (l{lr})" if lr is not None else ""))
    phase_handles = draw_phases(ax, phase_spans, len(ranks)) if phase_spans else []
    if phase_spans:
        labels.append("MTTR phases")
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    seen = set()
    for e in tl.get("events", []):
        colour, style = EVENTS.get(e["event"], (None, None))
        if colour is None:
            continue
        erow: Optional[int] = next((i for i, r in enumerate(ranks)
                                    if r["world_rank"] == e["world_rank"]), None)
        lbl = e["event"] if e["event"] not in seen else None
        seen.add(e["event"])
        ax.axvline(e["t"], color=colour, linestyle=style, linewidth=1.2, label=lbl)
        if erow is not None and e["event"] == "failure":
            ax.annotate(f"{e['kind']}", (e["t"], erow - 0.45), fontsize=7, color=colour,
                        ha="left", va="bottom")
    present = sorted({kinds[k] for r in ranks for k, _, _ in r["intervals"]},
                     key=lambda k: list(COLOURS).index(k) if k in COLOURS else 99)
    handles = [Patch(color=COLOURS.get(k, "#cccccc"), label=k.replace("_", " ")) for k in present]
    handles += phase_handles
    ev_handles, ev_labels = ax.get_legend_handles_labels()
    ax.legend(handles + ev_handles, [h.get_label() for h in handles] + ev_labels,
              loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=6, fontsize=8, frameon=False)
    led = rep.get("ledger", {})
    title = a.title or (f"ftrt run: {rep.get('steps')} steps, {len(rep.get('failures', []))} "
                        f"failure(s), goodput {led.get('goodput', rep.get('goodput', 0)):.3f}")
    ax.set_title(title)
    ax.set_xlabel("seconds since the job started")
    ax.set_xlim(0, tl["wall_s"])
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"ftrt-plot: wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
