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
        grid: list[list[tuple[str, str]]] = [[(" ", "")] * cols for _ in range(plot_h)]

        def y(v: float) -> int:
            return plot_h - 1 - min(plot_h - 1, max(0, round(v * (plot_h - 1))))

        champ_col = None
        for j in range(cols):
            lo, hi = j * n // cols, max(j * n // cols + 1, (j + 1) * n // cols)
            best = _bucket(s.best, hi - 1, hi)
            if best is not None:
                grid[y(best)][j] = (BEST, "yellow")
            train = _bucket(s.train, lo, hi)
            if train is not None:
                grid[y(train)][j] = (TRAIN, "bold cyan")
            gate = _bucket(s.gate, lo, hi)
            if gate is not None:
                grid[y(gate)][j] = (GATE, "green")
            if s.champion is not None and lo <= s.champion < hi:
                champ_col = j
        champ_gate = s.gate[s.champion] if s.champion is not None else None
        if champ_col is not None and champ_gate is not None:
            grid[y(champ_gate)][champ_col] = (CHAMP, "bold yellow")
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
