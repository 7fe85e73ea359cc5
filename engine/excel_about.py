"""The workbook's About sheet: what the plan was exported from, and how to use the workbook."""

from __future__ import annotations

from typing import Any

from .excel_sheet import BOLD, TITLE, WRAP, _fit_page_width, _put


def write_about(ws: Any, facts: list[tuple[str, Any]]) -> None:
    """The title, the export's facts (config, overrides, node, version, ...) and the guide."""
    _fit_page_width(ws)
    _put(ws, 1, 1, "dlformula training plan").font = TITLE
    _put(ws, 2, 2, ABOUT_INTRO)
    row = 3
    for label, text in [*facts, ("", ""), *ABOUT_TEXT]:
        a = _put(ws, row, 1, label)
        a.font, a.alignment = BOLD, WRAP
        _put(ws, row, 2, text).alignment = WRAP
        lines = -(-len(str(text)) // 130)  # spreadsheets do not size wrapped rows on load
        if lines > 1:
            ws.row_dimensions[row].height = 15 * lines
        row += 1


ABOUT_INTRO = ("A live workbook: every estimate is a spreadsheet formula over named cells. "
               "Change an input and every figure recomputes.")
ABOUT_TEXT = [
    ("How to use", "1. On Inputs, type over the yellow cells; pick categorical settings "
                   "(recompute, precision, ...) and the node type from the drop-downs."),
    ("", "2. Read the key results and the charts on Summary; a red memory row means the run "
         "does not fit in the accelerator's memory. Summary's error band says how far "
         "published runs like the exported config were off."),
    ("", "3. The status on Summary must read 'all pass'. Otherwise it names the first failing "
         "check (an input out of its domain, a layout that cannot run, a result that is not a "
         "number) and the cell to fix; the Checks sheet lists them all."),
    ("", "4. Every quantity sheet shows the formula's definition, doc and source; "
         "`dlformula explain NAME` shows the derivation step by step."),
    ("", ""),
    ("Sheets", "Summary: key results, memory and step-time breakdowns. Inputs: every input as a "
               "named cell, then constants and the names changed for Excel. Hardware: the node "
               "catalog, looked up with INDEX/MATCH. One sheet per formula file (Model, "
               "Training, ...): one live formula per quantity. Checks: the layout constraints."),
    ("Colours", "Yellow: type here. Green: looked up from Hardware. Grey: a constant. White: a "
                "formula."),
    ("Names", "Each input and quantity cell has a workbook-level defined name equal to its "
              "dlformula name, so formulas read like the formula files. Names a spreadsheet "
              "would misread (h100, tp1, r, c) get a leading '_'; the table at the bottom of "
              "Inputs lists them."),
    ("Units", "'Value' columns hold each figure in its declared unit (SI base units: byte, s, "
              "FLOP) exactly as `dlformula eval --format json` prints it, the unit in the number "
              "format (B is always a billion, bytes read 'byte'); 'Readable' columns beside "
              "show GiB, ms, TFLOP/s, days, ... as the CLI does."),
    ("Status", "Summary's status is 'all pass' only when every check on Checks passes and no "
               "result holds an error; otherwise it names the first problem and the cell to "
               "fix. Sheets are protected without a password: only input cells are unlocked "
               "(Review > Unprotect Sheet to change a formula on purpose)."),
    ("Categorical inputs", "The drop-down label ('Choose') becomes the code the formulas use "
                           "through an INDEX/MATCH (or IF) formula in 'Value'."),
]
