"""Score over candidates, drawn in the terminal: train and gate per candidate, the best
admitted gate so far as a line, and the champion marked."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text
from textual.widget import Widget

from rsiframe.viewer.source import Row

GATE, TRAIN, BEST, CHAMP = "●", "·", "─", "★"


@dataclass
class Series:
    ids: list[str] = field(default_factory=list)
    train: list[float | None] = field(default_factory=list)
    gate: list[float | None] = field(default_factory=list)
    best: list[float | None] = field(default_factory=list)
    champion: int | None = None


def series_of(rows: list[Row], champion: str | None) -> Series:
    """Points of ``rows`` (given in proposal order)."""
    s = Series()
    top: float | None = None
    for r in rows:  # in proposal order
        if r.state == "admitted" and r.gate is not None:
            top = r.gate if top is None else max(top, r.gate)
        s.ids.append(r.id)
        s.train.append(r.train)
        s.gate.append(r.gate)
        s.best.append(top)
        if r.id == champion:
            s.champion = len(s.ids) - 1
    return s


def _bucket(values: list[float | None], lo: int, hi: int) -> float | None:
    got = [v for v in values[lo:hi] if v is not None]
    return max(got) if got else None


Grid = list[list[tuple[str, str]]]  # rows top to bottom of (character, style)


def _row(v: float, plot_h: int) -> int:
    """The grid row of score ``v`` (row 0 is the top, 1.0)."""
    return plot_h - 1 - min(plot_h - 1, max(0, round(v * (plot_h - 1))))


def _grid(s: Series, cols: int, plot_h: int) -> Grid:
    """The points of ``s`` bucketed into ``cols`` columns: best so far, train, gate, and the
    champion's gate on top."""
    n = len(s.ids)
    grid: Grid = [[(" ", "")] * cols for _ in range(plot_h)]
    champ_col = None
    for j in range(cols):
        lo, hi = j * n // cols, max(j * n // cols + 1, (j + 1) * n // cols)
        for values, lo_j, mark in (
            (s.best, hi - 1, (BEST, "yellow")),
            (s.train, lo, (TRAIN, "bold cyan")),
            (s.gate, lo, (GATE, "green")),
        ):
            v = _bucket(values, lo_j, hi)
            if v is not None:
                grid[_row(v, plot_h)][j] = mark
        if s.champion is not None and lo <= s.champion < hi:
            champ_col = j
    champ_gate = s.gate[s.champion] if s.champion is not None else None
    if champ_col is not None and champ_gate is not None:
        grid[_row(champ_gate, plot_h)][champ_col] = (CHAMP, "bold yellow")
    return grid


def _draw(out: Text, grid: Grid, spread: int) -> None:
    """The grid's rows behind a y axis labelled at 1.0, the middle and 0.0; each column
    ``spread`` characters wide (the best-so-far line drawn through the gaps)."""
    plot_h = len(grid)
    for i, line in enumerate(grid):
        frac = (plot_h - 1 - i) / (plot_h - 1)
        label = f"{frac:.1f}" if i in (0, plot_h - 1) or i == (plot_h - 1) // 2 else ""
        out.append(f"{label:>4}┤", style="dim")
        for ch, style in line:
            out.append(ch, style=style)
            if spread > 1:
                fill = BEST if ch == BEST else " "
                out.append(fill * (spread - 1), style="yellow")
        out.append("\n")


class ScorePlot(Widget):
    """A scatter of scores (y: 0..1) against candidate order (x), bucketed to the width."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.series = Series()

    def show(self, series: Series) -> None:
        self.series = series
        self.refresh()

    def render(self) -> Text:
        s = self.series
        width, height = self.size.width, self.size.height
        left = 5
        plot_w, plot_h = max(1, width - left - 1), max(2, height - 2)
        out = Text(no_wrap=True, overflow="crop")
        n = len(s.ids)
        if n == 0 or not any(v is not None for v in s.gate + s.train):
            out.append("no verified scores yet", style="dim")
            return out
        cols = min(plot_w, n)
        spread = max(1, min(4, plot_w // n))  # few candidates: spaced out
        _draw(out, _grid(s, cols, plot_h), spread)
        out.append(" " * (left - 1) + "└" + "─" * (cols * spread) + "\n", style="dim")
        out.append(" " * left + f"{s.ids[0]}..{s.ids[-1]}  ", style="dim")
        out.append_text(self.legend())
        return out

    def legend(self) -> Text:
        s = self.series
        t = Text(no_wrap=True)
        t.append(f"{GATE} gate ", style="green")
        t.append(f"{TRAIN} train ", style="bold cyan")
        t.append(f"{BEST} best ", style="yellow")
        if s.champion is not None:
            t.append(f"{CHAMP} {s.ids[s.champion]}", style="bold yellow")
        return t
