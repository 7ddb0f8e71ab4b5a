"""The drawing kit of the book's diagrams: SVG written by hand, one palette and one type style.

A `Canvas` collects shapes and text in pixel coordinates and keeps track of how far they reach,
so the picture's size follows what was drawn. `Canvas.diagram(name, alt)` returns a `Diagram`:
the SVG text, its alt text, and an HTML form (an <img> with the SVG inline as a data: URI and
its alt attribute) that Jupyter, Colab and the built book all show, offline.

Colours are Okabe and Ito's palette, which stays distinguishable with the common forms of
colour blindness, as light tints under dark text; a colour always comes with a label, and the
masked or empty parts of a drawing are hatched or dashed as well, so nothing is told by colour
alone. The background is white, so a diagram reads the same in the book's dark mode and in print.
"""
from __future__ import annotations

import base64
import functools
import html
import math
from dataclasses import dataclass

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
MONO = "DejaVu Sans Mono, Menlo, Consolas, monospace"
SIZE = 14        # px: labels
SMALL = 12       # px: shapes, counts, notes
INK = "#1a1a1a"
MUTED = "#4d4d4d"
MARGIN = 12      # px of white around the drawing

# Okabe & Ito (2008), "Color Universal Design", and a neutral grey.
OKABE_ITO = {"orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73", "yellow": "#F0E442",
             "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7", "grey": "#999999"}
# What each colour stands for, the same in every diagram.
ROLES = {"data": "blue", "table": "sky", "attn": "orange", "mlp": "green", "norm": "purple",
         "head": "vermillion", "optim": "yellow", "plain": "grey"}


def tint(colour: str, strength: float = 0.3) -> str:
    """The colour mixed with white: `strength` 1 is the colour itself, 0 is white."""
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(255 - strength * (255 - c)):02x}" for c in rgb)


def fill_of(role: str, strength: float = 0.3) -> str:
    """The fill of a role of ROLES (what a shape stands for) as a tint of its colour."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {sorted(ROLES)}")
    return tint(OKABE_ITO[ROLES[role]], strength)


@functools.lru_cache(maxsize=None)
def _font(mono: bool, bold: bool):
    from matplotlib.font_manager import FontProperties
    return FontProperties(family="DejaVu Sans Mono" if mono else "DejaVu Sans", weight="bold" if bold else "normal",
                          size=100)


def text_width(s: str, size: int = SIZE, mono: bool = False, bold: bool = False) -> float:
    """The width of `s` in pixels, set in DejaVu Sans (or Mono), measured with the copy of the font
    that matplotlib ships; the fonts after it in FONT and MONO are narrower."""
    from matplotlib.textpath import text_to_path
    return text_to_path.get_text_width_height_descent(s, _font(mono, bold), ismath=False)[0] * size / 100


DEFS = f"""<defs>
<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse">
<path d="M0,1 L10,5 L0,9 z" fill="{INK}"/></marker>
<pattern id="hatch" patternUnits="userSpaceOnUse" width="7" height="7" patternTransform="rotate(45)">
<rect width="7" height="7" fill="#f2f2f2"/><line x1="0" y1="0" x2="0" y2="7" stroke="#8c8c8c" stroke-width="2.5"/></pattern>
</defs>"""


@dataclass(frozen=True)
class Diagram:
    """A finished diagram: its name (what `lib.diagrams.draw` calls it), alt text and SVG."""
    name: str
    alt: str
    svg: str
    width: int
    height: int

    def data_uri(self) -> str:
        return "data:image/svg+xml;base64," + base64.b64encode(self.svg.encode("utf-8")).decode("ascii")

    def _repr_html_(self) -> str:
        return (f'<div style="margin: 1em 0; text-align: center"><img class="gpt-diagram" '
                f'data-diagram="{self.name}" src="{self.data_uri()}" width="{self.width}" '
                f'height="{self.height}" alt="{html.escape(self.alt)}" '
                f'style="max-width: 100%; height: auto"></div>')


class Canvas:
    """Shapes and text in pixels; `diagram()` frames the picture around what was drawn."""

    def __init__(self):
        self.elements = []
        self.left = self.top = math.inf
        self.right = self.bottom = -math.inf

    def _reach(self, x, y):
        self.left, self.top = min(self.left, x), min(self.top, y)
        self.right, self.bottom = max(self.right, x), max(self.bottom, y)

    # ---- shapes -------------------------------------------------------------------------------
    def rect(self, x, y, w, h, fill="white", stroke=INK, width=1.2, dash=False, hatch=False, rx=3):
        """A rectangle; `hatch` fills it with grey diagonal lines, `dash` dashes its outline."""
        style = ' stroke-dasharray="5 3"' if dash else ""
        paint = "url(#hatch)" if hatch else fill
        self.elements.append(f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" rx="{rx}" fill="{paint}" '
                             f'stroke="{stroke}" stroke-width="{width}"{style}/>')
        self._reach(x, y)
        self._reach(x + w, y + h)

    def box(self, x, y, w, h, *lines, role="plain", emphasis=False, dash=False, hatch=False, mono=False,
            strength=0.3):
        """A labelled rectangle: the first line at label size, the others smaller, all centred.
        `emphasis` draws a thick outline (what changed, what matters)."""
        self.rect(x, y, w, h, fill=fill_of(role, strength), width=2.8 if emphasis else 1.2, dash=dash, hatch=hatch)
        step = SIZE + 4
        top = y + h / 2 - step * (len(lines) - 1) / 2
        for i, line in enumerate(lines):
            self.text(x + w / 2, top + i * step, line, size=SIZE if i == 0 else SMALL,
                      color=INK if i == 0 else MUTED, mono=mono and i == 0)

    def line(self, *points, color=INK, width=1.4, dash=False, arrow=False):
        """A polyline through (x, y) points; `arrow` puts a head at its end."""
        coords = " ".join(f"{x:g},{y:g}" for x, y in points)
        extra = (' stroke-dasharray="6 4"' if dash else "") + (' marker-end="url(#arrow)"' if arrow else "")
        self.elements.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="{width}"'
                             f' stroke-linejoin="round"{extra}/>')
        for x, y in points:
            self._reach(x, y)

    def arrow(self, *points, dash=False, color=INK):
        self.line(*points, dash=dash, arrow=True, color=color)

    def circle(self, cx, cy, r, fill="white", stroke=INK, width=1.2, dash=False):
        style = ' stroke-dasharray="4 3"' if dash else ""
        self.elements.append(f'<circle cx="{cx:g}" cy="{cy:g}" r="{r:g}" fill="{fill}" stroke="{stroke}" '
                             f'stroke-width="{width}"{style}/>')
        self._reach(cx - r, cy - r)
        self._reach(cx + r, cy + r)

    def plus(self, cx, cy, r=11):
        """The ⊕ where a branch adds into a stream."""
        self.circle(cx, cy, r)
        self.line((cx - r + 4, cy), (cx + r - 4, cy), width=1.6)
        self.line((cx, cy - r + 4), (cx, cy + r - 4), width=1.6)

    # ---- text ---------------------------------------------------------------------------------
    def text(self, x, y, s, size=SIZE, anchor="middle", mono=False, bold=False, color=INK, italic=False):
        """Text whose vertical centre is y; anchor is "start", "middle" or "end" of the line at x."""
        weight = ' font-weight="bold"' if bold else ""
        slant = ' font-style="italic"' if italic else ""
        family = f' font-family="{MONO}"' if mono else ""
        self.elements.append(f'<text x="{x:g}" y="{y:g}" font-size="{size}" text-anchor="{anchor}"'
                             f' dominant-baseline="central"{family}'
                             f'{weight}{slant} fill="{color}">{html.escape(s)}</text>')
        w = text_width(s, size, mono, bold)
        left = {"start": x, "middle": x - w / 2, "end": x - w}[anchor]
        self._reach(left, y - size * 0.7)
        self._reach(left + w, y + size * 0.7)

    # ---- the result ---------------------------------------------------------------------------
    def diagram(self, name: str, alt: str) -> Diagram:
        """The finished SVG, framed around what was drawn plus a margin; `alt` is also its <title>."""
        x, y = math.floor(self.left - MARGIN), math.floor(self.top - MARGIN)
        width, height = math.ceil(self.right + MARGIN) - x, math.ceil(self.bottom + MARGIN) - y
        svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
               f'viewBox="{x} {y} {width} {height}" role="img" font-family="{FONT}">\n'
               f'<title>{html.escape(alt)}</title>\n{DEFS}\n'
               f'<rect x="{x}" y="{y}" width="{width}" height="{height}" fill="white"/>\n'
               + "\n".join(self.elements) + "\n</svg>\n")
        return Diagram(name, alt, svg, width, height)
