"""p99 event -> slice latency and RSS against pods, laneway and the built-in controller.

Reads the results.json that benches/cluster.rs writes; run through tests/bench/plot.sh, which
provides matplotlib. Only the one-controller-at-a-time runs are plotted (the headline figures).
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display: write the file only
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"Laneway": "tab:blue", "Builtin": "tab:orange"}
NAMES = {"Laneway": "laneway", "Builtin": "built-in"}
KINDS = {"Flip": "readiness flip", "Relabel": "relabel", "ScaleUp": "scale up", "ScaleDown": "scale down"}
MARKERS = {"Flip": "o", "Relabel": "^", "ScaleUp": "s", "ScaleDown": "v"}


def main(results_path: str, out_path: str) -> None:
    with open(results_path) as f:
        results = json.load(f)
    scales = sorted(results["scales"], key=lambda s: s["shape"]["pods"])
    if not scales:
        sys.exit("no results to plot")
    rates = sorted({p["rate"] for s in scales for c in s["alone"] for p in c["phases"]})

    # One latency panel per rate (the low rate shows each controller's own cost per event, the
    # high one what happens under load), then RSS.
    fig, axes = plt.subplots(1, len(rates) + 1, figsize=(5 * (len(rates) + 1), 4.2))
    rss = axes[-1]
    for lat, rate in zip(axes, rates):
        for who in ("Laneway", "Builtin"):
            for kind in KINDS:
                xs, ys = [], []
                for s in scales:
                    for c in s["alone"]:
                        if c["who"] != who:
                            continue
                        for p in c["phases"]:
                            if p["kind"] != kind or p["rate"] != rate:
                                continue
                            per = next(x for x in p["per"] if x["who"] == who)
                            if per["latency"]["n"]:
                                xs.append(s["shape"]["pods"])
                                ys.append(per["latency"]["p99_ms"])
                if xs:
                    lat.plot(xs, ys, marker=MARKERS[kind], color=COLOURS[who],
                             linestyle="-" if who == "Laneway" else "--",
                             label=f"{NAMES[who]}: {KINDS[kind]}")
        lat.set_title(f"event \u2192 slice latency, p99, {rate:.0f} events/s")
        lat.set_ylabel("ms (log)")
        lat.set_yscale("log")
    for who in ("Laneway", "Builtin"):
        xs, ys = [], []
        for s in scales:
            for c in s["alone"]:
                if c["who"] == who:
                    xs.append(s["shape"]["pods"])
                    ys.append(c["rss_peak_mb"])
        rss.plot(xs, ys, marker="o", color=COLOURS[who], label=NAMES[who])

    rss.set_title("controller RSS, peak")
    rss.set_ylabel("MB")
    rss.set_ylim(bottom=0)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("pods (log)")
        ax.set_xticks([s["shape"]["pods"] for s in scales])
        ax.set_xticklabels([f'{s["shape"]["pods"] // 1000}k' for s in scales])
        ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"laneway ({results['laneway_commit']}) and the built-in EndpointSlice controller, "
                 f"one at a time, {results['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py RESULTS.json OUT.png")
    main(sys.argv[1], sys.argv[2])
