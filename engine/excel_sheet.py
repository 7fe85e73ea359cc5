"""Sheet-level helpers of the workbook: styles, writing cells, titles and headers, print
set-up, column sizing, protection and data validation. excel.py builds the sheets with them."""

from __future__ import annotations

from typing import Any

from openpyxl.styles import Alignment, Font, PatternFill, Protection
from openpyxl.utils import get_column_letter
from openpyxl.worksheet.datavalidation import DataValidation

from .excel_human import render
from .units import parse_unit

BOLD = Font(bold=True)
TITLE = Font(bold=True, size=14)
NOTE = Font(italic=True, color="595959")
FILL_EDIT = PatternFill("solid", fgColor="FFF2CC")  # yellow: type here
FILL_LOOKUP = PatternFill("solid", fgColor="E2EFDA")  # green: looked up from Hardware
FILL_CONST = PatternFill("solid", fgColor="EDEDED")  # grey: fixed
FILL_HEAD = PatternFill("solid", fgColor="D9E1F2")
FILL_BAD = PatternFill("solid", fgColor="FFC7CE")
FILL_GOOD = PatternFill("solid", fgColor="C6EFCE")
FILL_WARN = PatternFill("solid", fgColor="FFEB9C")
FONT_BAD = Font(bold=True, color="9C0006")
UNLOCKED = Protection(locked=False)
WRAP = Alignment(wrap_text=True, vertical="top")



class Text(str):
    """Text from a formula, node or config file: never read as a formula, even after '='."""


def _put(ws: Any, row: int, col: int, *values: Any) -> Any:
    """Write `values` into consecutive cells of `row` from `col`; return the first cell."""
    cells = [ws.cell(row=row, column=col + i, value=v) for i, v in enumerate(values)]
    for cell, v in zip(cells, values, strict=True):
        if isinstance(v, Text):
            cell.data_type = "s"
    return cells[0]


def _titles(ws: Any, title: str, note: str) -> None:
    ws["A1"], ws["A2"] = title, note
    ws["A1"].font, ws["A2"].font = TITLE, NOTE


def _header(ws: Any, row: int, titles: list[str], widths: list[int] | None = None) -> None:
    for i, t in enumerate(titles, start=1):
        c = ws.cell(row=row, column=i, value=t)
        c.font, c.fill = BOLD, FILL_HEAD
        if widths:
            ws.column_dimensions[get_column_letter(i)].width = widths[i - 1]
    ws.freeze_panes = ws.cell(row=row + 1, column=2)


def _fit_page_width(ws: Any) -> None:
    """Print on landscape pages one sheet wide."""
    ws.page_setup.orientation = "landscape"
    ws.sheet_properties.pageSetUpPr.fitToPage = True
    ws.page_setup.fitToWidth, ws.page_setup.fitToHeight = 1, 0


def _print_setup(ws: Any, header_row: int | None) -> None:
    """Landscape, one page wide, the header rows repeated on every page, a print area over
    what the sheet holds (the hidden bookkeeping column left out), small margins."""
    _fit_page_width(ws)
    ws.page_margins.left = ws.page_margins.right = 0.3
    ws.page_margins.top, ws.page_margins.bottom = 0.3, 0.45
    ws.page_margins.header, ws.page_margins.footer = 0.1, 0.15
    if header_row:
        ws.print_title_rows = f"{header_row}:{header_row}"
    last_col = ws.max_column
    while last_col > 1 and ws.column_dimensions[get_column_letter(last_col)].hidden:
        last_col -= 1
    if header_row:  # the page stops after the doc: sources and file:line stay on screen
        heads = [ws.cell(row=header_row, column=c).value for c in range(1, last_col + 1)]
        for stop in ("Doc",):
            if stop in heads:
                last_col = heads.index(stop) + 1
    ws.print_area = f"A1:{get_column_letter(last_col)}{ws.max_row}"
    ws.oddFooter.center.text = "&A: page &P of &N"


WIDTH_CAPS = {"Doc": 50, "Source": 40, "Definition": 50, "Message": 70, "Condition": 40,
              "Name": 44, "From": 30, "Fix": 30}


def _autosize(ws: Any, hints: dict[tuple[str, str], str]) -> None:
    """Size each column to the longest text it shows (formulas by the text their exported
    value shows, numbers under their format), so no number reads ###; long prose is capped."""
    widths: dict[int, int] = {}
    heads: dict[int, str] = {}
    title = ws.title
    for row in ws.iter_rows(min_row=3):
        for c in row:
            v = c.value
            if v is None:
                continue
            text = hints.get((title, c.coordinate))
            if text is None:
                if isinstance(v, str) and (not v.startswith("=") or isinstance(v, Text)):
                    if c.has_style and c.font.i:  # a note: it may run over its neighbours
                        continue
                    text = v
                    if c.has_style and c.fill.fgColor.rgb == FILL_HEAD.fgColor.rgb:  # a title
                        heads.setdefault(c.column, v)
                elif isinstance(v, (int, float)) and not isinstance(v, bool):
                    text = render(v, c.number_format)
                else:
                    continue
            n = len(text) * (1.2 if c.has_style and c.font.b else 1.0)
            widths[c.column] = max(widths.get(c.column, 0), int(n + 2.5))
    for col, width in widths.items():
        letter = get_column_letter(col)
        cap = WIDTH_CAPS.get(heads.get(col, ""), 50)
        dim = ws.column_dimensions[letter]
        if not dim.hidden:
            dim.width = max(8, min(cap, width)) if col > 1 else max(10, min(44, width))


def _protect(ws: Any) -> None:
    """Lock every cell but the unlocked inputs; no password, so a planner can still unprotect
    the sheet deliberately (Review > Unprotect Sheet). Resizing and selecting stay allowed."""
    p = ws.protection
    p.sheet = True
    p.formatColumns = p.formatRows = p.formatCells = False  # False: allowed
    p.selectLockedCells = p.selectUnlockedCells = False


def _validate(ws: Any, cell: str, kind: str, formula: str, title: str, error: str,
              blank: bool = False) -> None:
    # Excel refuses (and "repairs") a title over 32 characters or a message over 255.
    dv = DataValidation(type=kind, formula1=formula, allow_blank=blank, showErrorMessage=True,
                        errorTitle=title[:32], error=error[:255])
    ws.add_data_validation(dv)
    dv.add(cell)


def _catalog_value(spec: Any, d: Any) -> Any:
    """A node's figure in the unit of the input it feeds (its default when the node is silent),
    with the same arithmetic config resolution uses, so looked-up figures equal the engine's."""
    if spec is None:
        return d.default
    a, b = parse_unit(spec.unit), parse_unit(d.unit)
    if a.dim != b.dim:
        return None  # the engine refuses this node too, saying why
    return spec.value if a.scale == b.scale else spec.value * a.scale / b.scale


def _short_path(path: str) -> str:
    """`formulas/memory.yaml` rather than where this machine keeps it."""
    return "/".join(str(path).replace("\\", "/").split("/")[-2:])
