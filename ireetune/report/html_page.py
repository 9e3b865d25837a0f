"""What every HTML page of ireetune shares: the Jinja2 templates, a plot, a status chip.

The markup lives in `ireetune/report/templates/`; Python only prepares a typed view of each page
(plain strings and numbers already formatted). The environment escapes every value it writes, so
a name or a compiler message from a run folder or an imported database row is always text. The
one exception is a plot: its SVG is drawn by our own code (`report/plots.py`) and marked safe
here, where it is produced.
"""

from __future__ import annotations

from dataclasses import dataclass

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup
from matplotlib.figure import Figure

from ireetune.report.plots import render_svg, status_colour

# Every template is escaped, whatever its name; a missing field of a view is an error, not "".
_ENVIRONMENT = Environment(
    loader=PackageLoader("ireetune.report", "templates"),
    autoescape=select_autoescape(enabled_extensions=("html",), default=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


@dataclass(frozen=True)
class Plot:
    """A plot, or the sentence that stands in its place when there is nothing to draw."""

    svg: Markup | None
    caption: str
    empty: str


@dataclass(frozen=True)
class Chip:
    """A status as a coloured label, in the same colour as the plots draw it."""

    label: str
    colour: str


def build_plot(figure: Figure | None, caption: str, empty: str) -> Plot:
    """Render a figure drawn by `report/plots.py` to inline SVG (None: nothing to draw)."""
    return Plot(None if figure is None else Markup(render_svg(figure)), caption, empty)


def build_chip(status: str) -> Chip:
    return Chip(status, status_colour(status))


def render_page(template_name: str, page: object) -> str:
    """Render one page template with its view as `page`."""
    return _ENVIRONMENT.get_template(template_name).render(page=page)
