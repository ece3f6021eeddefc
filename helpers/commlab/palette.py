"""One colour per rank, shared by the run display and the pictures.

The Okabe-Ito palette, whose colours stay distinct under the common forms of colour blindness;
grey replaces its black so that dark text stays readable on every cell.
"""

RANK_COLORS = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#D55E00",  # vermillion
    "#F0E442",  # yellow
    "#999999",  # grey
)


def rank_color(rank: int) -> str:
    """The colour of ``rank`` (colours repeat past eight ranks)."""
    return RANK_COLORS[rank % len(RANK_COLORS)]
