"""Pictures of data movement: cells coloured by the rank their value came from, one arrow per
message, drawn from real runs of the course's examples, and compared with committed baselines.

Image regression: each case in ``support.drawing_cases.CASES`` is drawn and compared with
``tests/baseline_images/<case>.png`` by ``matplotlib.testing.compare.compare_images`` at an RMS
tolerance of ``TOLERANCE`` (on 0-255 pixel values). Regenerate the baselines after an intended
change with ``make baselines`` and look at every PNG before committing them.

(Over 400 lines: one structure test per collective's picture, beside the image regressions.)
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.testing.compare import compare_images  # noqa: E402

import commlab  # noqa: E402
from commlab.drawing import DrawError, draw  # noqa: E402
from commlab.figure_parts import COMBINED_COLOR, DPI, FIGSIZE, format_value  # noqa: E402
from commlab.palette import RANK_COLORS  # noqa: E402
from commlab.ring import draw_ring  # noqa: E402
from support.drawing_cases import (  # noqa: E402
    BASELINE_DPI,
    BASELINES,
    CASES,
    SHARED_RUNS,
    drawing,
    save_case,
)

# RMS difference allowed between a drawing and its baseline. Same matplotlib and FreeType give
# 0.0; the margin absorbs anti-aliasing noise, while a moved cell, a changed colour or a changed
# label gives several times more.
TOLERANCE = 2.0


@pytest.fixture(scope="module")
def runs():
    return SHARED_RUNS


# --- helpers to read a figure ------------------------------------------------------------------

def artists(fig, prefix: str) -> dict:
    """The figure's artists whose gid starts with ``prefix``, by gid."""
    return {a.get_gid(): a for a in fig.axes[0].get_children()
            if a.get_gid() and a.get_gid().startswith(prefix)}


def count(fig, prefix: str) -> int:
    return sum(1 for a in fig.axes[0].get_children()
               if a.get_gid() and a.get_gid().startswith(prefix))


def cells(fig, row: str, rank: int, name: str) -> list[tuple[str, tuple]]:
    """(value, colour) of a drawn tensor's cells, in row-major order."""
    found = {gid.split(":", 4)[4]: patch for gid, patch in
             artists(fig, f"cell:{row}:{rank}:{name}:").items()}
    texts = {gid.split(":", 4)[4]: t.get_text() for gid, t in
             artists(fig, f"value:{row}:{rank}:{name}:").items()}
    order = sorted(found, key=lambda k: tuple(map(int, k.split(":"))))
    return [(texts.get(k), found[k].get_facecolor()) for k in order]


def colour(rank: int) -> tuple:
    return to_rgba(RANK_COLORS[rank])


def arrows(fig) -> list[tuple[int, int]]:
    out = []
    for gid in artists(fig, "arrow:"):
        src, dst = gid.rsplit(":", 1)[1].split("->")
        out.append((int(src), int(dst)))
    return sorted(out)


# --- what the cells say ------------------------------------------------------------------------

def test_gathered_blocks_take_the_colour_of_the_rank_they_came_from():
    fig = drawing("gather_rows")
    for rank in range(4):
        assert cells(fig, "before", rank, "tensor") == [(str(rank), colour(rank))] * 5
        assert cells(fig, "after", 0, f"gather_list[{rank}]") == [(str(rank), colour(rank))] * 5
    assert count(fig, "cell:after:1:") == 0
    assert "only sends" in artists(fig, "note:after:1")["note:after:1"].get_text()


def test_one_arrow_per_message_of_the_direct_exchange(runs):
    """Solid arrows match the peers the trace says each rank sent to; dotted ones stay put."""
    for name in ("gather_rows", "all_gather_rows", "scatter", "reduce", "broadcast",
                 "reduce_scatter_rows", "all_to_all_uneven", "all_gather_into_tensor"):
        fig = drawing(name) if name in CASES else draw(runs[name])
        expected = sorted((call.rank, peer) for calls in runs[name].trace for call in calls
                          for peer in call.sent_to)
        assert arrows(fig) == expected, name
        assert count(fig, "copy:") == (1 if name in ("gather_rows", "scatter", "reduce",
                                                      "broadcast") else 4), name


def test_all_reduce_cells_are_combined_from_every_rank():
    fig = drawing("all_reduce")
    for rank in range(4):
        after = cells(fig, "after", rank, "tensor")
        assert after == [("6", to_rgba(COMBINED_COLOR))] * 10
        patch = artists(fig, f"cell:after:{rank}:tensor:0:0")[f"cell:after:{rank}:tensor:0:0"]
        assert patch.get_hatch() == "///"
        label = artists(fig, f"combined:after:{rank}")[f"combined:after:{rank}"]
        assert label.get_text() == "SUM of ranks 0-3"
    assert len(arrows(fig)) == 12
    assert artists(fig, "title")["title"].get_text() == (
        "dist.all_reduce(tensor, op=SUM)  (call #2)")


def test_reduce_marks_what_it_leaves_on_other_ranks_as_no_result():
    fig = drawing("reduce")
    assert cells(fig, "after", 0, "tensor") == [("6", to_rgba(COMBINED_COLOR))] * 5
    for rank in (1, 2, 3):
        colours = {c for _, c in cells(fig, "after", rank, "tensor")}
        # gloo leaves partial sums there; they must not pass for the rank's own data
        assert colour(rank) not in colours
        assert artists(fig, f"note:after:{rank}")[f"note:after:{rank}"].get_text().startswith(
            "left-over values")
    assert arrows(fig) == [(1, 0), (2, 0), (3, 0)]


def test_scatter_sends_block_i_to_rank_i():
    fig = drawing("scatter")
    for rank in range(4):
        assert cells(fig, "before", 0, f"scatter_list[{rank}]") == [(str(rank), colour(0))] * 5
        assert cells(fig, "after", rank, "tensor") == [(str(rank), colour(0))] * 5
    assert arrows(fig) == [(0, 1), (0, 2), (0, 3)]
    assert "(src)" in artists(fig, "rank:0")["rank:0"].get_text()


def test_reduce_scatter_gives_rank_i_the_sum_of_every_input_list_i():
    fig = drawing("reduce_scatter")
    for rank in range(4):
        # seed 002: rank r's input_list[i] holds 10 r + i, so rank i gets 60 + 4 i
        assert cells(fig, "after", rank, "output") == [(str(60 + 4 * rank),
                                                        to_rgba(COMBINED_COLOR))] * 5


def test_zero_dim_tensors_are_one_cell():
    fig = drawing("reduce_scatter_scalars")
    for rank in range(4):
        assert [v for v, _ in cells(fig, "after", rank, "output")] == [str(4 * rank)]
        assert [v for v, _ in cells(fig, "before", rank, "input_list[2]")] == ["2"]


def test_all_to_all_single_follows_uneven_split_sizes():
    fig = drawing("all_to_all_uneven")
    after = cells(fig, "after", 0, "output")
    assert [v for v, _ in after] == ["0", "1", "10", "11", "12", "20", "21", "30", "31"]
    assert [c for _, c in after] == [colour(r) for r in (0, 0, 1, 1, 1, 2, 2, 3, 3)]
    assert [c for _, c in cells(fig, "after", 3, "output")] == [colour(r) for r in (0, 1, 1, 2, 3)]
    # each split is outlined, so the blocks read as blocks
    assert count(fig, "split") == sum(4 - splits.count(0) for splits in (
        [2, 2, 1, 1], [3, 2, 2, 2], [2, 1, 1, 1], [2, 2, 2, 1],
        [2, 3, 2, 2], [2, 2, 1, 2], [1, 2, 1, 2], [1, 2, 1, 1]))


def test_all_gather_into_tensor_fills_block_r_from_rank_r():
    fig = drawing("all_gather_into_tensor")
    for rank in range(4):
        assert cells(fig, "after", rank, "output_tensor") == [
            (str(r), colour(r)) for r in range(4) for _ in range(2)]


def test_complex_values_print_as_a_plus_bj():
    fig = drawing("all_to_all_cfloat")
    assert cells(fig, "after", 1, "output_tensor_list[2]") == [("10+10j", colour(2))]
    assert cells(fig, "before", 3, "input_tensor_list[0]") == [("13+13j", colour(3))]


@pytest.mark.parametrize("value, text", [
    (3, "3"), (-7, "-7"), (6.0, "6"), (0.5, "0.5"), (1 / 3, "0.3333"), (123456.0, "1.235e+05"),
    (float("nan"), "nan"), (1 + 2j, "1+2j"), (1.5 - 0.25j, "1.5-0.25j"), (True, "T"),
])
def test_values_print_compactly(value, text):
    assert format_value(value) == text


def test_a_tensor_too_large_to_print_is_one_labelled_box():
    fig = drawing("too_large")
    assert count(fig, "cell:") == 0
    boxes = artists(fig, "placeholder-label:")
    assert boxes["placeholder-label:before:2:input_tensor"].get_text().startswith(
        "float32[1024, 1024]")
    assert boxes["placeholder-label:after:0:output_tensor"].get_text().startswith(
        "float32[4096, 1024]")
    # the output box is banded by the rank each quarter came from
    bands = artists(fig, "band:after:0:output_tensor:")
    assert [bands[k].get_facecolor() for k in sorted(bands, key=lambda g: int(
        g.rsplit(":", 1)[1]))] == [colour(r) for r in range(4)]


def test_send_recv_draws_the_message_and_nothing_else():
    fig = drawing("send_recv")
    assert arrows(fig) == [(0, 1)]
    assert cells(fig, "after", 1, "tensor←0") == [(str(i), colour(0)) for i in range(4)]
    assert artists(fig, "title")["title"].get_text() == (
        "dist.send(tensor, dst=1) / dist.recv(tensor, src=0)")


# --- rows and columns ------------------------------------------------------------------------

def _positions(fig, name_prefix: str) -> list[tuple[float, float]]:
    found = artists(fig, f"piece:after:0:{name_prefix}")
    return [(found[k].get_x(), found[k].get_y()) for k in sorted(found)]


def test_row_gather_lands_as_rows_and_column_gather_as_columns():
    rows = _positions(drawing("gather_rows"), "gather_list")
    columns = _positions(drawing("gather_columns"), "gather_list")
    assert len({x for x, _ in rows}) == 1 and len({y for _, y in rows}) == 4
    assert len({y for _, y in columns}) == 1 and len({x for x, _ in columns}) == 4
    assert [x for x, _ in columns] == sorted(x for x, _ in columns)  # [0] on the left


def test_layout_chooses_how_the_blocks_are_placed(runs):
    stacked = _positions(drawing("gather_columns_as_rows"), "gather_list")
    assert len({x for x, _ in stacked}) == 1
    assert [y for _, y in stacked] == sorted((y for _, y in stacked), reverse=True)
    side_by_side = _positions(draw(runs["gather_rows"], layout="columns"), "gather_list")
    assert len({y for _, y in side_by_side}) == 1


# --- at 1 and 8 ranks --------------------------------------------------------------------------

def _overlaps(fig, prefixes: tuple[str, ...]) -> list[tuple[str, str]]:
    renderer = FigureCanvasAgg(fig).get_renderer()
    boxes = [(a.get_gid(), a.get_window_extent(renderer)) for a in fig.axes[0].texts
             if a.get_gid() and a.get_gid().startswith(prefixes)]
    assert len(boxes) >= 8, "too few labels found to check"
    return [(g1, g2) for i, (g1, b1) in enumerate(boxes) for g2, b2 in boxes[i + 1:]
            if b1.overlaps(b2)]


@pytest.mark.parametrize("case", ["all_to_all_single_8_ranks", "ring_all_reduce_8_ranks"])
def test_labels_do_not_overlap_at_eight_ranks(case):
    fig = drawing(case)
    assert _overlaps(fig, ("rank:", "header:", "item:", "note:", "combined:", "step:",
                           "phase:", "title", "subtitle")) == []
    # and every printed value stays inside its cell
    renderer = FigureCanvasAgg(fig).get_renderer()
    texts = artists(fig, "value:")
    assert texts
    for gid, text in texts.items():
        cell = artists(fig, "cell:" + gid[len("value:"):])["cell:" + gid[len("value:"):]]
        box, inside = text.get_window_extent(renderer), cell.get_window_extent(renderer)
        assert inside.x0 - 0.5 <= box.x0 and box.x1 <= inside.x1 + 0.5, gid


def test_single_element_blocks_stay_readable_at_eight_ranks(runs):
    fig = draw(runs["reduce_scatter_scalars_8"])
    assert _overlaps(fig, ("item:", "value:")) == []
    assert min(t.get_fontsize() for t in artists(fig, "value:").values()) >= 6


def test_one_rank_is_drawn_too(runs):
    fig = draw(runs["all_gather_rows_1"])
    assert cells(fig, "after", 0, "tensor_list[0]") == [("0", colour(0))] * 5
    assert arrows(fig) == [] and count(fig, "copy:0->0") == 1


# --- the ring ----------------------------------------------------------------------------------

def test_ring_shows_each_step_with_the_chunks_it_moves(runs):
    fig = drawing("ring_all_reduce")
    assert count(fig, "step:") == 6
    assert count(fig, "arrow:") == 24
    assert sorted(artists(fig, "arrow:1:")) == [f"arrow:1:{r}->{(r + 1) % 4}" for r in range(4)]
    # step 1: every rank sends chunk [rank] of its own data, in its own colour
    for rank in range(4):
        values = [artists(fig, f"value:1:{rank}:{i}")[f"value:1:{rank}:{i}"].get_text()
                  for i in range(2)]
        assert values == [str(10 * rank + 2 * rank), str(10 * rank + 2 * rank + 1)]
        assert artists(fig, f"cell:1:{rank}:0")[f"cell:1:{rank}:0"].get_facecolor() == colour(
            rank)
    # reduce-scatter step k sends a sum of k ranks; all-gather sends the sum of all 4
    for step, summed in zip(range(2, 7), (2, 3, 4, 4, 4)):
        for rank in range(4):
            assert count(fig, f"sum:{step}:{rank}:") == summed, (step, rank)
    # the last all-gather step carries the values the ranks end with
    total = runs["ring_all_reduce"].returns[0].tolist()
    sent = [float(artists(fig, f"value:6:0:{i}")[f"value:6:0:{i}"].get_text()) for i in range(2)]
    assert sent in [total[i:i + 2] for i in range(0, 8, 2)]


def test_ring_from_batch_isend_irecv_draws_shapes_when_values_are_missing(runs):
    fig = draw_ring(runs["ring_batched"])
    assert count(fig, "arrow:") == 24
    labels = artists(fig, "chunk-label:")
    assert labels and {t.get_text() for t in labels.values()} == {"float32[1]"}


def test_ring_refuses_a_run_that_is_not_a_ring(runs):
    with pytest.raises(DrawError, match="step 1, rank\\(s\\) 1, 2, 3 sent nothing"):
        draw_ring(runs["send_recv"])
    with pytest.raises(DrawError, match="made none"):
        draw_ring(runs["gather_rows"])


# --- choosing the call, and errors -------------------------------------------------------------

def test_call_can_be_named_numbered_or_given(runs):
    result = runs["all_reduce_twice"]
    second = result.trace[0][1]
    for call in ("all_reduce #2", 1, second):
        fig = draw(result, call)
        assert count(fig, "cell:after:0:tensor:") == 10, call
    assert count(draw(result), "cell:after:0:tensor:") == 5  # the first by default
    assert arrows(draw(runs["send_recv"], 0)) == [(0, 1)]  # rank 0's send
    assert arrows(draw(runs["send_recv"], runs["send_recv"].trace[1][0])) == [(0, 1)]  # recv
    assert artists(draw(result, title="Sum it"), "title")["title"].get_text() == "Sum it"


@pytest.mark.parametrize("run, kwargs, message", [
    ("untraced", {}, "recorded no tensor values"),
    ("async_all_reduce", {}, "async_op=True"),
    ("gather_rows", {"call": "foo"}, "commlab.draw knows broadcast, scatter, .*'foo' is not "),
    ("gather_rows", {"call": "all_reduce"}, "no all_reduce #1 call; it made: gather #1"),
    ("gather_rows", {"call": "gather #3"}, "no gather #3 call"),
    ("gather_rows", {"call": 5}, "no call number 5"),
    ("gather_rows", {"layout": "diagonal"}, "layout must be one of"),
    ("barrier_and_objects", {}, "nothing to draw: this run made barrier #1, all_gather_object"),
    ("barrier_and_objects", {"call": "all_gather_object"}, "moves Python objects"),
    ("send_recv", {"call": "send #2"}, "at most 1"),
])
def test_a_wrong_call_gets_a_clear_error(runs, run, kwargs, message):
    with pytest.raises(DrawError, match=message):
        draw(runs[run], **kwargs)


def test_something_that_is_not_a_run_gets_a_clear_error():
    with pytest.raises(DrawError, match="takes the result of commlab.run"):
        draw([torch.ones(3)])
    with pytest.raises(ValueError):  # DrawError is a ValueError, for students' except clauses
        draw_ring(None)


# --- the figure itself -------------------------------------------------------------------------

def test_same_run_gives_the_same_image_bytes(runs):
    images = []
    for _ in range(2):
        buffer = io.BytesIO()
        draw(runs["scatter"]).savefig(buffer, format="png", dpi=BASELINE_DPI)
        images.append(buffer.getvalue())
    assert images[0] == images[1]
    fig = draw(runs["scatter"])
    assert tuple(fig.get_size_inches()) == FIGSIZE and fig.dpi == DPI


def test_drawing_needs_neither_pyplot_nor_a_backend_switch():
    code = ("import sys, commlab; commlab.draw, commlab.draw_ring; "
            "print('matplotlib.pyplot' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
    for module in ("drawing.py", "figure_parts.py", "p2p.py", "picture_content.py",
                   "picture_layout.py", "ring.py"):
        source = (Path(commlab.__file__).parent / module).read_text()
        code_lines = re.findall(r"^\s*(?:import matplotlib\.pyplot|from matplotlib import pyplot"
                                r"|matplotlib\.use\().*$", source, re.M)
        assert code_lines == [], module


def test_importing_every_commlab_module_leaves_the_public_names_functions():
    # A module named like a public function (draw.py, run.py) would replace the function with
    # the module as soon as anything imports it.
    code = ("import importlib, inspect, pkgutil, commlab\n"
            "for m in pkgutil.iter_modules(commlab.__path__):\n"
            "    importlib.import_module('commlab.' + m.name)\n"
            "print(' '.join(name for name in ('run', 'device', 'draw', 'draw_ring')\n"
            "               if not inspect.isfunction(getattr(commlab, name))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("case", sorted(CASES))
def test_image_matches_baseline(case, tmp_path):
    baseline = BASELINES / f"{case}.png"
    assert baseline.exists(), f"no baseline for {case}: run make baselines"
    actual = tmp_path / f"{case}.png"
    save_case(case, actual)
    failure = compare_images(str(baseline), str(actual), tol=TOLERANCE)
    assert failure is None, failure


def test_a_drawing_shows_as_an_image_in_a_notebook(kernel):
    run = kernel.execute(
        "import torch, torch.distributed as dist, commlab\n"
        "def example(rank, world_size):\n"
        "    tensor = torch.ones(2) * rank\n"
        "    dist.broadcast(tensor, src=0)\n"
        "commlab.draw(commlab.run(example, 2))")
    assert run.status == "ok", run.error
    assert run.stderr == ""
    assert len(run.images) == 1 and run.images[0].startswith("iVBOR")  # one PNG
