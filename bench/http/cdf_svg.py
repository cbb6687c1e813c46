"""bench/http/cdf_svg.py — latency-by-percentile plot as SVG, stdlib only.

The shape of HdrHistogram's and Workflow's plots: the x axis is the
percentile on a log scale of 1 / (1 - p) (0 %, 90 %, 99 %, 99.9 % ... equally
spaced), so the tail gets as much room as the body; y is latency on a log
scale too, because the tail is often a hundred times the median and a linear
axis would flatten every server's body into one line.

    write_svg(path, title, {"nginx": [(50.0, 81.2), (90.0, 95.0), ...], ...})
"""

import math
import os
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 760, 460
LEFT, RIGHT, TOP, BOTTOM = 70, 170, 40, 50  # margins: axes left, legend right
# Colour-blind-safe (Okabe-Ito), in PEERS order.
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7",
           "#56B4E9", "#F0E442", "#000000")
MAX_NINES = 5  # the x axis ends at 99.999 %


def nines(p):
    """x position of percentile p (0..100): log10(1 / (1 - p)), capped."""
    rest = 1.0 - p / 100.0
    return MAX_NINES if rest <= 10 ** -MAX_NINES else -math.log10(rest)


def _scale(lo, hi, out_lo, out_hi):
    return lambda v: out_lo + (v - lo) / (hi - lo) * (out_hi - out_lo)


def _y_decades(series):
    values = [us for pts in series.values() for _, us in pts if us > 0]
    lo = math.floor(math.log10(min(values)))
    hi = math.ceil(math.log10(max(values)))
    return lo, max(hi, lo + 1)


def _label_us(us):
    return f"{us / 1000:g} ms" if us >= 1000 else f"{us:g} µs"


def _axes(x, y, ylo, yhi):
    out = []
    for k in range(MAX_NINES + 1):  # 0 %, 90 %, 99 % ...
        label = "0%" if k == 0 else f"{100 - 10 ** (2 - k):.{max(k - 2, 0)}f}%"
        out.append(f'<line x1="{x(k):.1f}" y1="{TOP}" x2="{x(k):.1f}" '
                   f'y2="{HEIGHT - BOTTOM}" class="grid"/>'
                   f'<text x="{x(k):.1f}" y="{HEIGHT - BOTTOM + 18}" '
                   f'text-anchor="middle">{label}</text>')
    for d in range(ylo, yhi + 1):
        out.append(f'<line x1="{LEFT}" y1="{y(d):.1f}" x2="{WIDTH - RIGHT}" '
                   f'y2="{y(d):.1f}" class="grid"/>'
                   f'<text x="{LEFT - 6}" y="{y(d) + 4:.1f}" '
                   f'text-anchor="end">{_label_us(10 ** d)}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
               f'height="{HEIGHT - TOP - BOTTOM}" class="frame"/>')
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 12}" '
               f'text-anchor="middle">percentile</text>')
    out.append(f'<text transform="translate(16 {(TOP + HEIGHT - BOTTOM) / 2})'
               f' rotate(-90)" text-anchor="middle">latency</text>')
    return out


def _lines(series, x, y):
    out = []
    for i, (name, pts) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{x(nines(p)):.1f},{y(math.log10(us)):.1f}"
                        for p, us in sorted(pts) if us > 0)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                   f'stroke-width="2"/>')
        ly = TOP + 14 + 20 * i
        lx = WIDTH - RIGHT + 14
        out.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 22}" y2="{ly - 4}" '
                   f'stroke="{colour}" stroke-width="3"/>'
                   f'<text x="{lx + 28}" y="{ly}">{escape(name)}</text>')
    return out


def write_svg(path, title, series, note=""):
    """series: {name: [(percentile 0..100, latency µs), ...]}, in legend
    order. note: one line under the title (the conditions of the run)."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return
    ylo, yhi = _y_decades(series)
    x = _scale(0, MAX_NINES, LEFT, WIDTH - RIGHT)
    y = _scale(ylo, yhi, HEIGHT - BOTTOM, TOP)
    body = _axes(x, y, ylo, yhi) + _lines(series, x, y)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
           f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
           'font-family="sans-serif" font-size="12">',
           "<style>.grid{stroke:#ddd}.frame{fill:none;stroke:#444}</style>",
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">'
           f"{escape(title)}</text>",
           f'<text x="{LEFT}" y="33" fill="#555">{escape(note)}</text>',
           *body, "</svg>"]
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(svg) + "\n")
    os.replace(path + ".tmp", path)
