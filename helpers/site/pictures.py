"""What a chapter's picture shows, in words: the alt text of each picture on the website.

A picture on a chapter page is the PNG a solution cell drew, and the PNG itself carries no
words (matplotlib writes none of the figure's text into it). So the words come from the cell
that drew it, read (never run) with :mod:`ast`: the drawing call (``commlab.draw_ring``,
``draw_timeline``, ...), the title given to it, and for ``commlab.draw`` of a run with no title,
the collective the run's function calls and on how many ranks, found in the cells above.
"""

from __future__ import annotations

import ast

# What each of the course's drawing functions shows, as a screen reader should say it
DESCRIPTIONS = {
    "draw": "each rank's tensors before the call (top) and after it (bottom), coloured by the "
            "rank each value came from, with an arrow for each message between ranks",
    "draw_ring": "a ring all-reduce step by step, one column per step: the chunk each rank "
                 "sends to the next, and coloured squares naming the ranks it already sums",
    "draw_groups": "the ranks as a grid, a frame around each process group its calls ran on",
    "draw_timeline": "each rank's compute and communication on one time axis",
    "draw_pipeline": "the pipeline's schedule: each stage's forward and backward steps per "
                     "micro-batch, and the idle time between them",
    "draw_kv_ring": "ring attention step by step: whose keys and values each rank holds at "
                    "each step, and the transfers to the next rank",
    "draw_layout": "which rank holds which heads and positions of the attention tensors",
}
MATPLOTLIB_TITLES = ("suptitle", "set_title", "title")
# torch.distributed's calls that move data, as the run's function may call them
COLLECTIVES = ("broadcast", "scatter", "gather", "all_gather", "all_gather_into_tensor",
               "reduce", "all_reduce", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
               "all_to_all_single", "send", "recv", "isend", "irecv", "batch_isend_irecv")


def picture_alt(sources: list[str], index: int) -> str:
    """The alt text of the picture that code cell ``sources[index]`` drew.

    Args:
        sources: the source of every code cell of the notebook, in order.
        index: the picture's cell in ``sources``.

    Returns:
        One sentence: the picture's title (or what the drawn call did), what the picture shows,
        and the call that drew it. Never empty, never a file name.
    """
    tree = _parse(sources[index])
    call = _shown_call(tree) if tree else None
    if call is None:
        return "A picture drawn by the code cell above it"
    name = _name(call.func)
    drawn_by = ast.unparse(call.func)
    title = _text(_keyword(call, "title"))
    if name not in DESCRIPTIONS:  # matplotlib's own figure (plt.show(), a figure object)
        titles = [_text(node.args[0]) for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and _name(node.func) in MATPLOTLIB_TITLES
                  and node.args]
        found = next((text for text in titles if text), "")
        return f"{found or 'A plot'}: a plot made with matplotlib (drawn by {drawn_by})"
    describe = DESCRIPTIONS[name]
    panels = _keyword(call, "titles")
    if isinstance(panels, ast.List):
        named = [_text(element) for element in panels.elts]
        describe += " (" + "; ".join(text for text in named if text) + ")"
    if not title and name == "draw":
        title = _drawn_collective(sources, index, call)
    if not title:
        title = _run_of(sources, index, call) or "What the run above did"
    return f"{title}: {describe} (drawn by {drawn_by})"


def _parse(source: str) -> ast.Module | None:
    # a notebook cell may hold IPython's own syntax (%magic, !command): those lines say
    # nothing of the picture
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _shown_call(tree: ast.Module) -> ast.Call | None:
    """The call whose value the cell shows: its last statement, an expression."""
    if tree.body and isinstance(tree.body[-1], ast.Expr) and isinstance(tree.body[-1].value,
                                                                        ast.Call):
        return tree.body[-1].value
    return None


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((keyword.value for keyword in call.keywords if keyword.arg == name), None)


def _text(node: ast.expr | None) -> str:
    """A string literal's text; an f-string's, with each replacement field as its code."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant)
                       else "{" + ast.unparse(part.value) + "}" for part in node.values)
    return ""


def _drawn_collective(sources: list[str], index: int, call: ast.Call) -> str:
    """"dist.broadcast on 4 ranks" for ``commlab.draw(result)``: the call it draws (given, or
    the first that the run's function makes) and the run's world size, from the cells above."""
    asked = _text(call.args[1]) if len(call.args) > 1 else _text(_keyword(call, "call"))
    if not call.args or not isinstance(call.args[0], ast.Name):
        return ""
    run = _assigned_run(sources, index, call.args[0].id)
    if run is None:
        return f"dist.{asked.split('#')[0].strip()}" if asked else ""
    ranks = _keyword(run, "world_size") or (run.args[1] if len(run.args) > 1 else None)
    on = f" on {ranks.value} ranks" if isinstance(ranks, ast.Constant) else ""
    if asked:
        return f"dist.{asked.split('#')[0].strip()}{on}"
    if not run.args or not isinstance(run.args[0], ast.Name):
        return ""
    made = _calls_of(sources, index, run.args[0].id)
    return f"dist.{made[0]}{on}" if made else ""


def _run_of(sources: list[str], index: int, call: ast.Call) -> str:
    """"The run of ring_example on 4 ranks", when the drawn result is a ``commlab.run``'s."""
    if not call.args or not isinstance(call.args[0], ast.Name):
        return ""
    run = _assigned_run(sources, index, call.args[0].id)
    if run is None or not run.args or not isinstance(run.args[0], ast.Name):
        return ""
    ranks = _keyword(run, "world_size") or (run.args[1] if len(run.args) > 1 else None)
    on = f" on {ranks.value} ranks" if isinstance(ranks, ast.Constant) else ""
    return f"The run of {run.args[0].id}{on}"


def _assigned_run(sources: list[str], index: int, variable: str) -> ast.Call | None:
    """The latest ``variable = commlab.run(...)`` in this cell or the ones above."""
    for source in reversed(sources[:index + 1]):
        tree = _parse(source)
        for node in reversed(list(ast.walk(tree)) if tree else []):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and _name(node.value.func) == "run"
                    and any(isinstance(t, ast.Name) and t.id == variable
                            for t in node.targets)):
                return node.value
    return None


def _calls_of(sources: list[str], index: int, function: str) -> list[str]:
    """The torch.distributed calls that move data in the latest ``def function`` above, in
    the order they are written."""
    for source in reversed(sources[:index + 1]):
        tree = _parse(source)
        defined = [node for node in (ast.walk(tree) if tree else [])
                   if isinstance(node, ast.FunctionDef) and node.name == function]
        if defined:
            calls = sorted((node.lineno, node.col_offset, node.func.attr)
                           for node in ast.walk(defined[-1])
                           if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                           and isinstance(node.func.value, ast.Name)
                           and node.func.value.id == "dist" and node.func.attr in COLLECTIVES)
            return [name for _, _, name in calls]
    return []
