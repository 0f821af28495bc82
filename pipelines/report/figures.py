"""Figures of the report, each saved as PNG and SVG and embedded in the HTML page as a PNG
data URI (so the page is one self-contained file). The stage modules' figure functions return
matplotlib figures, so the notebooks show the same figures; without a display matplotlib
draws with its headless backend."""

import base64
import html
import io
import pathlib

import matplotlib.pyplot as plt

# Line styles beyond colour, so that curves lying on top of each other (a max predictor and
# its larger component) stay visible.
LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*")
PNG_DPI = 110


def line_style(i: int) -> dict:
    """Matplotlib line keywords for the i-th series: colour, dash pattern and marker."""
    return {"color": f"C{i % 10}", "linestyle": LINE_STYLES[i % len(LINE_STYLES)],
            "marker": MARKERS[i % len(MARKERS)], "markevery": 0.1, "markersize": 4}


def legend_below(fig, axes, ncol: int = 4, **kwargs):
    """One legend for `axes` (labels in order, once each) below the figure, outside every
    axes, so that it never covers data."""
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="upper center", fontsize=8,
                   bbox_to_anchor=(0.5, 0.0), ncol=min(ncol, len(handles)), **kwargs)


def legend_right(ax, **kwargs):
    """`ax`'s legend beside it, outside its data area."""
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, **kwargs)


def say_none(ax, what: str):
    """An axes with nothing to draw (every value zero) says so instead of an empty plot."""
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, f"none\n({what})", transform=ax.transAxes, ha="center", va="center",
            fontsize=12, color="#555")


class FigureWriter:
    """Saves figures under `directory` as <name>.png and <name>.svg and returns the HTML that
    embeds each one (a <figure> with its caption)."""

    def __init__(self, directory: pathlib.Path):
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.names = []

    def html(self, fig, name: str, caption: str) -> str:
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=PNG_DPI, bbox_inches="tight")
        (self.directory / f"{name}.png").write_bytes(png.getvalue())
        fig.savefig(self.directory / f"{name}.svg", format="svg", bbox_inches="tight")
        plt.close(fig)
        self.names.append(name)
        data = base64.b64encode(png.getvalue()).decode("ascii")
        return (f'<figure id="{name}"><img alt="{html.escape(caption)}" '
                f'src="data:image/png;base64,{data}"><figcaption>{html.escape(caption)} '
                f'<span class="files">({name}.png, {name}.svg)</span></figcaption></figure>')
