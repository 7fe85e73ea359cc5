"""Excel export: a live workbook in which every estimate is a spreadsheet formula.

    from dlformula import Engine
    from dlformula.excel import export
    export(Engine(), "examples/gpt3-175b.yaml", "plan.xlsx")

Sheets: About, Summary (key results, red when memory does not fit, native charts), Inputs (every
input as a named cell with unit, doc, default and validation; constants; the name mapping),
Hardware (the node catalog; the chosen node's figures are looked up with INDEX/MATCH), one sheet
per formula file with one live formula per quantity, and Checks (the layout constraints).

Every input, constant and quantity cell carries a workbook-level defined name equal to its
dlformula name (or its mangled form, see `excel_printer.excel_names`) and holds the value in the
definition's declared unit, as `dlformula eval --format json` does; human-unit columns sit beside.
Only inputs and constants are pasted as values. docs/excel.md describes the layout.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from typing import Any

from openpyxl import Workbook
from openpyxl.chart import BarChart, Reference
from openpyxl.comments import Comment
from openpyxl.formatting.rule import FormulaRule
from openpyxl.styles import Alignment
from openpyxl.utils import absolute_coordinate, get_column_letter, quote_sheetname
from openpyxl.workbook.defined_name import DefinedName

from . import display
from .core import Engine, Result
from .errors import UsageError
from .excel_about import write_about
from .excel_checks import (
    CheckRow,
    InputCell,
    input_row,
    message_formula,
    node_row,
    numbers_row,
    status_formula,
)
from .excel_human import human_text, readable, render, value_format
from .excel_printer import (
    excel_names,
    excel_string,
    printed_formulas,
    validation_formula,
)
from .excel_sheet import (
    BOLD,
    FILL_BAD,
    FILL_CONST,
    FILL_EDIT,
    FILL_GOOD,
    FILL_LOOKUP,
    FILL_WARN,
    FONT_BAD,
    NOTE,
    TITLE,
    UNLOCKED,
    WRAP,
    Text,
    _autosize,
    _catalog_value,
    _fit_page_width,
    _header,
    _print_setup,
    _protect,
    _put,
    _short_path,
    _titles,
    _validate,
)
from .units import parse_unit

FIXED_SHEETS = ["About", "Summary", "Inputs", "Hardware", "Checks"]
NODE_NAME = "hardware.node"  # a dot: no dlformula name can take it
STATUS_NAME = "status"  # Summary's single status: "all pass", or the first FAIL and its fix
HEADER_ROWS = {"Hardware": 4}  # the row of column titles a printed page repeats (default 4)
FLAG_COL = 10  # hidden column J of a formula sheet: the row when Value is not a number
CHOICE_SUFFIX = ".choice"

MEMORY_ROWS = {"memory_per_gpu", "hbm_capacity_used", "memory_fits", "memory_headroom"}

@dataclass
class ExportInfo:
    """Where things went, for callers and tests: name -> (sheet, cell)."""

    path: str
    cells: dict[str, tuple[str, str]] = field(default_factory=dict)  # named value cells
    choices: dict[str, tuple[str, str]] = field(default_factory=dict)  # label drop-downs
    node_cell: tuple[str, str] | None = None
    names: dict[str, str] = field(default_factory=dict)  # dlformula name -> defined name
    renamed: dict[str, str] = field(default_factory=dict)  # dlformula name -> reason
    sheets: list[str] = field(default_factory=list)
    # breakdown tables on Summary: total -> (sheet, first row, last row) of its parts (column B)
    parts: dict[str, tuple[str, int, int]] = field(default_factory=dict)


def _band_words(result: Result) -> str:
    """Summary's error band: how far validated runs like the exported config were off."""
    from .report import result_band

    band = result_band(result)
    if band is None:
        return ("no comparable validated run: no published run on this node's family was "
                "predicted, so the step time is unchecked (docs/validation.md)")
    return (f"the measured step time was {band.text()}, for the config as exported "
            "(`dlformula eval` gives it for another): training days, GPU-hours, cost and "
            "energy scale with it, throughput and MFU with its inverse")


def _goodput_formula(names: dict[str, str]) -> str:
    """Summary's goodput line, live: the share training_days assumes and where it comes from
    (the goodput input, or interruptions at Llama 3's rate for the GPU count; report.py's
    goodput_words in words)."""
    from .report import GOODPUT_ESTIMATE

    share, given = names["goodput_share"], names["goodput"]
    return (f'="training_days assumes "&TEXT({share},"0.0%")&" goodput"&IF({given}>0,'
            f'", as given (goodput on Inputs)",", {GOODPUT_ESTIMATE}: set goodput on Inputs")')


def export(engine: Engine, config: str | None, output: str,
           sets: list[str] | tuple[str, ...] = (), hf_config: str | None = None) -> ExportInfo:
    """Evaluate `config` and write the workbook to `output` (an .xlsx path)."""
    if not str(output).lower().endswith(".xlsx"):
        raise UsageError(f"output '{output}' must end in .xlsx (an Excel workbook)")
    result = engine.evaluate(config, sets, hf_config)
    wb, info = build_workbook(engine, result, sets=sets, hf_config=hf_config)
    info.path = str(output)
    from .atomic import write_file  # whole or not at all, also on Ctrl-C or a full disk

    write_file(str(output), wb.save)
    return info


def build_workbook(engine: Engine, result: Result, sets: list[str] | tuple[str, ...] = (),
                   hf_config: str | None = None) -> tuple[Workbook, ExportInfo]:
    """The workbook for one evaluated config (not yet saved)."""
    return _Builder(engine, result, tuple(sets), hf_config).build()


class _Builder:
    def __init__(self, engine: Engine, result: Result, sets: tuple[str, ...],
                 hf_config: str | None) -> None:
        self.engine, self.result, self.sets, self.hf_config = engine, result, sets, hf_config
        self.model = m = result.model
        self.names, self.renamed = excel_names([*m.inputs, *m.constants, *m.quantities])
        printed = printed_formulas(engine, self.names)
        self.formulas, self.conditions = printed["quantities"], printed["checks"]
        self.flags = set(printed["flags"])
        self.wb = Workbook()
        self.info = ExportInfo("", names=dict(self.names), renamed=dict(self.renamed))
        # totals whose parts Summary tables and charts: [(name as in eval, Excel text, what)]
        self.breakdowns: dict[str, list[Any]] = printed.get("breakdowns", {})
        self.parts_cells = self.info.parts
        self.hints: dict[tuple[str, str], str] = {}  # (sheet, cell) -> the text it shows
        spec_keys = {k for nid in engine.catalog.node_ids()
                     for k in engine.catalog.node(nid).specs}
        # Inputs fed by a node figure: one column each on the Hardware sheet.
        self.hw_inputs = {d.config.split(".", 1)[1]: d for d in m.inputs.values()
                          if d.config.startswith("hardware.")
                          and d.config.split(".", 1)[1] in spec_keys}
        self.check_range: str | None = None
        self.input_cells: list[InputCell] = []  # in Inputs order, for the domain checks
        self.result_sheets: list[tuple[str, int, int]] = []  # (sheet, first row, last row)
        self.inputs_rows: tuple[int, int] = (5, 5)
        self.node_address: str | None = None
        self.check_rows: tuple[int, int] | None = None
        self.catalog_rows = 0  # last row of the Hardware catalog table

    def _define(self, name: str, sheet: str, first: str, last: str | None = None) -> None:
        ref = absolute_coordinate(first) + (f":{absolute_coordinate(last)}" if last else "")
        self.wb.defined_names[name] = DefinedName(name, attr_text=f"{quote_sheetname(sheet)}!"
                                                                  f"{ref}")

    def _name_cell(self, ws: Any, row: int, name: str, shown_at: int, unit: str = "1",
                   integer: bool = False) -> None:
        """Give column B of `row` the defined name of `name` and a number format with its unit;
        show a changed name."""
        self._define(self.names[name], ws.title, f"B{row}")
        self.info.cells[name] = (ws.title, f"B{row}")
        value = self._value(name)
        cell = ws.cell(row=row, column=2)
        if not isinstance(value, (bool, str)) and value is not None:
            cell.number_format = value_format(value, unit, integer)
            self.hints[(ws.title, cell.coordinate)] = render(value, cell.number_format)
        if name in self.renamed:
            ws.cell(row=row, column=shown_at, value=self.names[name])

    def _value(self, name: str) -> Any:
        v = self.result.values.get(name)
        return self.result.config.values.get(name) if v is None else v

    def _human(self, ws: Any, row: int, col: int, name: str, unit: str) -> None:
        """The value of a named cell in the CLI's human units, live: one text cell."""
        ref = self.names[name]
        if name in self.flags:
            text, shown = f'=IF({ref}=1,"yes","no")', "yes"
        else:
            text = "=" + human_text(ref, unit)
            shown = readable(self._value(name), unit)
        _put(ws, row, col, text)
        self.hints[(ws.title, ws.cell(row=row, column=col).coordinate)] = shown

    # -- the workbook -------------------------------------------------------------------------
    def build(self) -> tuple[Workbook, ExportInfo]:
        wb = self.wb
        about = wb.active
        about.title = "About"
        summary = wb.create_sheet("Summary")
        self._inputs(wb.create_sheet("Inputs"))
        self._hardware(wb.create_sheet("Hardware"))
        for group, title in self._groups():
            self._group_sheet(wb.create_sheet(title), group)
        self._checks(wb.create_sheet("Checks"))
        self._summary(summary)  # last but one: it reads the Checks range
        self._about(about)
        wb.calculation.fullCalcOnLoad = True  # no cached values: compute on open
        for ws in wb.worksheets:
            _protect(ws)
            if ws.title != "About":
                _autosize(ws, self.hints)
            _print_setup(ws, HEADER_ROWS.get(ws.title, 4) if ws.title not in ("About",
                                                                               "Summary") else None)
        wb["Summary"].page_setup.fitToHeight = 1  # the one-page dashboard
        if self.catalog_rows:  # the catalog prints; the figures' sources stay on screen
            hw = wb["Hardware"]
            hw.print_area = f"A1:{get_column_letter(hw.max_column)}{self.catalog_rows}"
        self.info.sheets = wb.sheetnames
        return wb, self.info

    def _groups(self) -> list[tuple[str, str]]:
        """(formula file stem, sheet title) in a planner's order, titles unique."""
        taken = {s.upper() for s in FIXED_SHEETS}
        out = []
        for g in display.ordered_groups(self.model, {q.group for q in
                                                     self.model.quantities.values()}):
            title = display.group_title(self.model, g)  # its formula files' `title:`
            title = re.sub(r"[\[\]:*?/\\']", " ", title)[:28].strip() or "Formulas"
            base, n = title, 2
            while title.upper() in taken:
                title, n = f"{base} {n}", n + 1
            taken.add(title.upper())
            out.append((g, title))
        return out

    # -- Inputs -------------------------------------------------------------------------------
    def _inputs(self, ws: Any) -> None:
        m = self.model
        _titles(ws, "Inputs", "Type in the yellow cells (categorical settings: pick from the "
                "drop-down in 'Choose'). Green cells are looked up from the Hardware sheet for "
                "the node chosen below. 'Value' is in the unit shown; formulas read it by name.")
        _header(ws, 4, ["Name", "Value", "Choose", "Unit", "Readable", "Default", "Domain",
                        "Config key", "From", "Doc", "Source", "Excel name"])
        row = 5
        for group in display.ordered_groups(m, {d.group for d in m.inputs.values()}):
            _put(ws, row, 1, group).font = BOLD
            row += 1
            if group == "hardware":
                row = self._node_row(ws, row)
            for name, d in m.inputs.items():
                if d.group == group:
                    self._input_row(ws, row, name, d)
                    row += 1
        self.inputs_rows = (5, row)
        _put(ws, row + 1, 1, "Constants").font = BOLD
        row += 2
        for name, c in m.constants.items():
            _put(ws, row, 1, name, c.value).offset(column=1).fill = FILL_CONST
            _put(ws, row, 4, c.unit)
            _put(ws, row, 9, f"{_short_path(c.path)}:{c.line}", Text(c.doc), Text(c.source))
            self._name_cell(ws, row, name, 12, c.unit)
            row += 1
        _put(ws, row + 1, 1, "Names changed for Excel").font = BOLD
        _put(ws, row + 1, 2, "A defined name must not read as a cell reference (h100, tp1), an "
             "R1C1 reference (r, c, R1C1) or a keyword; such names get a leading '_'.").font = NOTE
        row += 2
        if not self.renamed:
            _put(ws, row, 1, "(none: every name is used as it is)").font = NOTE
        for name, reason in self.renamed.items():
            _put(ws, row, 1, name, self.names[name], None, reason)
            row += 1

    def _node_row(self, ws: Any, row: int) -> int:
        node = self.result.config.node
        _put(ws, row, 1, "node")
        c = _put(ws, row, 3, node.id if node else None)
        c.fill, c.font = FILL_EDIT, BOLD
        self._define(NODE_NAME, ws.title, f"C{row}")
        self.info.node_cell = (ws.title, f"C{row}")
        self.node_address = f"{ws.title}!C{row}"
        _validate(ws, f"C{row}", "list", "hardware.ids", "Unknown node",
                  "Pick a node id listed on the Hardware sheet.")
        c.protection = UNLOCKED
        _put(ws, row, 8, NODE_NAME, "config" if node else "not set",
             "Hardware node type (an id from the Hardware sheet). Choosing another switches "
             "every green figure below; figures the config sets itself stay as pasted.",
             None, NODE_NAME)
        return row + 1

    def _input_row(self, ws: Any, row: int, name: str, d: Any) -> None:
        cfg = self.result.config
        value, origin = cfg.values[name], cfg.origins.get(name)
        kind = origin.kind if origin else "default"
        where = str(origin) if origin else "default"
        if origin and kind in ("preset", "node") and origin.path:
            where = f"{kind} {_short_path(origin.path)}:{origin.line}"
        key = d.config.split(".", 1)[1] if d.config.startswith("hardware.") else None
        categorical = bool(d.choices) or d.domain.kind == "boolean"
        vcell = _put(ws, row, 1, name, None).offset(column=1)
        if key in self.hw_inputs and cfg.node is not None and kind in ("node", "default"):
            vcell.value = (f"=INDEX(hardware.table,MATCH({NODE_NAME},hardware.ids,0),"
                           f"MATCH({excel_string(key)},hardware.keys,0))")
            vcell.fill = FILL_LOOKUP
            where = "looked up on Hardware for the chosen node"
            self.input_cells.append(InputCell(name, d, self.names[name], f"{ws.title}!B{row}",
                                              lookup=True))
        elif categorical:
            label = cfg.labels.get(name, d.label(value))
            choice = _put(ws, row, 3, Text(label) if isinstance(label, str) else label)
            choice.fill = FILL_EDIT
            if isinstance(label, bool):  # LibreOffice shows a bare boolean cell as 0/1
                choice.number_format = '"TRUE";"TRUE";"FALSE"'
            cname = self.names[name] + CHOICE_SUFFIX
            self._define(cname, ws.title, f"C{row}")
            self.info.choices[name] = (ws.title, f"C{row}")
            if d.choices:
                labels = ",".join(excel_string(lb) for lb, _ in d.choices)
                codes = ",".join(str(c) for _, c in d.choices)
                vcell.value = f"=INDEX({{{codes}}},MATCH({cname},{{{labels}}},0))"
                options = ",".join(lb for lb, _ in d.choices)
            else:
                vcell.value, options = f"=IF({cname},1,0)", "TRUE,FALSE"
            if len(options) < 250 and '"' not in options:  # the limits of an inline list
                _validate(ws, f"C{row}", "list", f'"{options}"', name,
                          f"Choose one of: {options}")
            choice.protection = UNLOCKED
            self.input_cells.append(InputCell(name, d, self.names[name], f"{ws.title}!B{row}",
                                              cname, f"{ws.title}!C{row}"))
        else:
            vcell.value, vcell.fill, vcell.protection = value, FILL_EDIT, UNLOCKED
            self.input_cells.append(InputCell(name, d, self.names[name], f"{ws.title}!B{row}"))
            if key in self.hw_inputs and kind not in ("node", "default"):
                where += " (set by the config: overrides the node's figure)"
            rule = validation_formula(d.domain, f"B{row}")
            if rule:
                _validate(ws, f"B{row}", "custom", rule, name, f"{name} must be {d.domain.text}")
        self._name_cell(ws, row, name, 12, d.unit, d.domain.kind in ("integer", "choice",
                                                                      "boolean"))
        _put(ws, row, 4, d.unit)
        if not categorical:
            self._human(ws, row, 5, name, d.unit)
        default = str(d.default).upper() if isinstance(d.default, bool) else d.default
        _put(ws, row, 6, default, d.domain.text, d.config, where, Text(d.doc), Text(d.source))

    # -- Hardware -----------------------------------------------------------------------------
    def _hardware(self, ws: Any) -> None:
        cat, keys = self.engine.catalog, list(self.hw_inputs)
        _titles(ws, "Hardware catalog", "One row per node type, figures in the unit of the "
                "input they feed (row 5). The node chosen on Inputs is highlighted; its figures "
                "are looked up by INDEX/MATCH. Sources are listed below the table.")
        _put(ws, 3, 1, "Chosen node:", f"={NODE_NAME}").font = BOLD
        _header(ws, 4, ["Node id", "Name", "Vendor", *keys])
        ws.freeze_panes = "B6"
        for i, key in enumerate(keys):
            _put(ws, 5, 4 + i, self.hw_inputs[key].unit).font = NOTE
        nodes = [cat.node(nid) for nid in cat.node_ids()]
        first, last = 6, 6 + max(len(nodes), 1) - 1
        for r, node in enumerate(nodes, start=first):
            _put(ws, r, 1, node.id, Text(node.name), Text(node.vendor), *(
                _catalog_value(node.specs.get(k), self.hw_inputs[k]) for k in keys))
        for i, key in enumerate(keys):  # one format per column, from its largest figure
            col = [ws.cell(row=r, column=4 + i) for r in range(first, last + 1)]
            nums = [c.value for c in col if isinstance(c.value, (int, float))
                    and not isinstance(c.value, bool)]
            if nums:
                d = self.hw_inputs[key]
                fmt = value_format(max(nums, key=abs), d.unit, d.domain.kind == "integer"
                                   or all(float(v) == int(v) for v in nums))
                for c in col:
                    c.number_format = fmt
        lastcol = get_column_letter(3 + max(len(keys), 1))
        self._define("hardware.ids", ws.title, f"A{first}", f"A{last}")
        self._define("hardware.keys", ws.title, "D4", f"{lastcol}4")
        self._define("hardware.table", ws.title, f"D{first}", f"{lastcol}{last}")
        self.catalog_rows = last
        ws.conditional_formatting.add(f"A{first}:{lastcol}{last}", FormulaRule(
            formula=[f"$A{first}={NODE_NAME}"], fill=FILL_EDIT, font=BOLD))
        r = last + 3
        _put(ws, r, 1, "Figures as written in the node files (on screen only: not printed)"
             ).font = BOLD
        _header(ws, r + 1, ["Node id", "Figure", "Value", "Unit", "Source", "File"])
        ws.freeze_panes = "B6"
        r += 1
        for node in nodes:
            for key in keys:
                r += 1
                spec = node.specs.get(key)
                if spec is None:
                    _put(ws, r, 1, node.id, key, None, None, "not given: the default is used")
                else:
                    _put(ws, r, 1, node.id, key, spec.value, spec.unit, Text(spec.source),
                         f"{_short_path(node.path)}:{spec.line}")

    # -- one sheet per formula file -----------------------------------------------------------
    def _group_sheet(self, ws: Any, group: str) -> None:
        m = self.model
        names = [n for n, q in m.quantities.items() if q.group == group]
        paths = sorted({_short_path(m.quantities[n].path) for n in names})
        _titles(ws, f"{ws.title}: formulas from {', '.join(paths)}", "Every 'Value' cell is a "
                "live formula over named cells, in the unit shown (SI as in `dlformula eval "
                "--format json`, its unit in the number format); 'Readable' shows it as the CLI "
                "does.")
        _header(ws, 4, ["Name", "Value", "Unit", "Readable", "Definition", "Doc", "Source",
                        "Defined at", "Excel name"])
        for row, name in enumerate(names, start=5):
            q = m.quantities[name]
            _put(ws, row, 1, name, self.formulas[name], q.unit)
            value = self._value(name)
            whole = q.unit not in ("1", "") and isinstance(value, (int, float)) and (
                float(value) == int(value) and not any(parse_unit(q.unit).dim))
            self._name_cell(ws, row, name, 9, q.unit, whole)
            self._human(ws, row, 4, name, q.unit)
            _put(ws, row, 5, Text(" ".join(q.expr.split())), Text(q.doc), Text(q.source),
                 f"{_short_path(q.path)}:{q.line}")
            # The row number when Value is not a number (an error, or text typed over it): the
            # Checks sheet names the first such cell. Hidden: it is bookkeeping.
            _put(ws, row, FLAG_COL, f'=IF(ISNUMBER(B{row}),"",ROW())')
        if names:
            self.result_sheets.append((ws.title, 5, 4 + len(names)))
            ws.column_dimensions[get_column_letter(FLAG_COL)].hidden = True

    # -- Checks -------------------------------------------------------------------------------
    def _check_rows(self) -> list[CheckRow]:
        rows: list[CheckRow] = []
        if self.node_address and any(c.lookup for c in self.input_cells):
            rows.append(node_row(NODE_NAME, "hardware.ids", self.node_address))
        node_fix = f"{self.node_address} (hardware.node)"
        rows += [input_row(c, node_fix) for c in self.input_cells]
        where = {c.name: c.choice_address or c.address for c in self.input_cells}
        involved = dict(zip((c.name for c in self.model.constraints),
                            self.model.constraint_names, strict=True))
        choices = {c.name: c.choice for c in self.input_cells if c.choice}
        for c in self.conditions:
            fix = ", ".join(f"{where[n]} ({n})" for n in involved.get(c["name"], ())
                            if n in where)
            kind = "warning" if c["kind"] == "warning" else "constraint"
            rows.append(CheckRow(c["name"], kind, c["excel"],
                                 message_formula(c["message"], self.names, self.model, choices),
                                 fix, c["check"], _short_path(c["where"])))
        rows += [numbers_row(sheet, first, last, get_column_letter(FLAG_COL))
                 for sheet, first, last in self.result_sheets]
        return rows

    def _checks(self, ws: Any) -> None:
        _titles(ws, "Checks: every input's domain, the conditions a layout must meet to run, "
                "warnings, and that every result is a number",
                "A FAIL means the workbook cannot be trusted as set; a warning means it runs but "
                "deserves a look. The message says what is wrong, 'Fix' where to change it.")
        _header(ws, 4, ["Check", "Status", "Message", "Fix", "Condition", "Defined at"])
        rows = self._check_rows()
        for row, c in enumerate(rows, start=5):
            bad = "warning" if c.kind == "warning" else "FAIL"
            _put(ws, row, 1, c.name, f'=IFERROR(IF({c.cond},"ok","{bad}"),"error")',
                 f'=IFERROR(IF({c.cond},"",{c.message}),"cannot be checked: a cell it reads '
                 'holds an error value or text")', c.fix, Text(c.condition), c.where)
        if rows:
            last = 4 + len(rows)
            self.check_rows = (5, last)
            self.check_range = f"Checks!$B$5:$B${last}"
            ws.conditional_formatting.add(f"B5:C{last}", FormulaRule(
                formula=['OR($B5="FAIL",$B5="error")'], fill=FILL_BAD, font=FONT_BAD))
            ws.conditional_formatting.add(f"B5:C{last}", FormulaRule(
                formula=['$B5="warning"'], fill=FILL_WARN))

    # -- Summary ------------------------------------------------------------------------------
    def _summary(self, ws: Any) -> None:
        m, cfg, names = self.model, self.result.config, self.names
        have = set(m.quantities) | set(m.inputs)
        _put(ws, 1, 1, "Summary").font = TITLE
        for col, width in zip("ABCDE", (30, 18, 14, 26, 50), strict=True):
            ws.column_dimensions[col].width = width
        info = [("Config", Text(cfg.path)), ("Model preset", cfg.preset.id if cfg.preset else "-"),
                ("Hardware node", f"={NODE_NAME}")]
        if "gpus" in have:
            info.append(("GPUs", f"={names['gpus']}"))
        layout = [n for n in ("tp", "pp", "dp", "cp", "ep", "vpp") if n in m.inputs]
        if layout:
            info.append(("Layout", "=" + '&" "&'.join(f'"{n.upper()}="&{names[n]}'
                                                      for n in layout)))
        info.append(("Error band", _band_words(self.result)))
        if {"goodput_share", "goodput", "training_days"} <= have:
            info.append(("Goodput", _goodput_formula(names)))
        if self.check_rows:
            ranges = [f"{quote_sheetname(t)}!$B${a}:$B${b}" for t, a, b in self.result_sheets]
            ranges.append(f"Inputs!$B${self.inputs_rows[0]}:$B${self.inputs_rows[1]}")
            info.append(("Status", status_formula(*self.check_rows, ranges)))
        for r, (label, value) in enumerate(info, start=3):
            _put(ws, r, 1, label, value).font = BOLD
            ws.cell(row=r, column=1).alignment = Alignment(vertical="top")
        if self.check_rows:
            self._define(STATUS_NAME, ws.title, f"B{r}")
            ws.cell(row=r, column=2).alignment = WRAP
            ws.row_dimensions[r].height = 45
            ws.merge_cells(start_row=r, start_column=2, end_row=r, end_column=5)
            for word, fill, font in (("all pass", FILL_GOOD, BOLD), ("warning", FILL_WARN, BOLD),
                                     ("FAIL", FILL_BAD, FONT_BAD), ("ERROR", FILL_BAD, FONT_BAD)):
                test = (f'{STATUS_NAME}="all pass"' if word == "all pass"
                        else f'LEFT({STATUS_NAME},{len(word)})="{word}"')
                ws.conditional_formatting.add(f"A{r}:E{r}", FormulaRule(
                    formula=[test], fill=fill, font=font))
        row = r + 2
        _put(ws, row, 1, "Key results").font = TITLE
        _header(ws, row + 1, ["Result", "Value", "Exact value", "Name", "Doc"])
        ws.freeze_panes = None
        row += 1
        keys = [n for n in m.summary if n in have]  # by their `summary:` rank
        fits = "memory_per_gpu" in have and "hbm_capacity" in have
        for name in keys:
            row += 1
            d = m.quantities.get(name) or m.inputs[name]
            _put(ws, row, 1, display.title(d), None, None, name, Text(d.doc))
            if getattr(d, "display", "") == "percent":  # the quantity's YAML says so
                _put(ws, row, 2, f"={names[name]}").number_format = "0.0%"
                self.hints[(ws.title, f"B{row}")] = f"{self._value(name) * 100:.1f}%"
            else:
                self._human(ws, row, 2, name, d.unit)
            exact = _put(ws, row, 3, f"={names[name]}")
            exact.number_format = value_format(self._value(name), d.unit, False)
            self.hints[(ws.title, f"C{row}")] = render(self._value(name), exact.number_format)
            ws.cell(row=row, column=2).font = BOLD
            if fits and name in MEMORY_ROWS | {"hbm_capacity"}:
                mem, cap = names["memory_per_gpu"], names["hbm_capacity"]
                ws.conditional_formatting.add(f"A{row}:C{row}", FormulaRule(
                    formula=[f"{mem}>{cap}"], fill=FILL_BAD, font=FONT_BAD))
                ws.conditional_formatting.add(f"A{row}:C{row}", FormulaRule(
                    formula=[f"{mem}<={cap}"], fill=FILL_GOOD))
        row += 2
        top = row  # the tables stacked in A:B, their charts side by side beside them
        for (total, title, unit, divisor), anchor in zip(
                (("memory_per_gpu", "Memory per GPU", "GiB", 2**30),
                 ("step_time", "Step time", "s", 1)), ("C", "E"), strict=True):
            row = self._chart(ws, row, total, title, unit, divisor, f"{anchor}{top}")
        _fit_page_width(ws)

    def _chart(self, ws: Any, row: int, total: str, title: str, unit: str,
               divisor: int, anchor: str) -> int:
        """A live table of the parts `total` adds up (named as in `eval`, read from its
        formula), the total beneath, and a native bar chart of the parts beside; returns the
        next free row."""
        parts = self.breakdowns.get(total)
        if not parts or total not in self.names:
            return row
        per = f"/{divisor}" if divisor != 1 else ""
        _put(ws, row, 1, f"{title} ({unit})", unit).font = BOLD
        for i, (label, text, what) in enumerate(parts, start=row + 1):
            cell = _put(ws, i, 1, label, f"=({text}){per}" if per else f"={text}")
            if what != label:  # an overhead on other parts: say which
                cell.comment = Comment(f"{label} = {what}", "dlformula")
            ws.cell(row=i, column=2).number_format = "#,##0.00"
        last = row + len(parts)
        _put(ws, last + 1, 1, f"{total} (the sum)", f"={self.names[total]}{per}").font = BOLD
        ws.cell(row=last + 1, column=2).number_format = "#,##0.00"
        ws.cell(row=last + 1, column=2).font = BOLD
        self.parts_cells[total] = (ws.title, row + 1, last)
        chart = BarChart()
        chart.type, chart.title, chart.legend = "bar", f"{title} ({unit})", None
        chart.y_axis.title = unit
        # Explicitly not deleted: openpyxl writes <c:delete val="1"/> by default, which some
        # Excel builds honour by hiding both axes.
        chart.x_axis.delete = chart.y_axis.delete = False
        chart.add_data(Reference(ws, min_col=2, min_row=row, max_row=last),
                       titles_from_data=True)
        chart.set_categories(Reference(ws, min_col=1, min_row=row + 1, max_row=last))
        chart.height, chart.width = 7.5, 10
        ws.add_chart(chart, anchor)
        return last + 3

    # -- About --------------------------------------------------------------------------------
    def _about(self, ws: Any) -> None:
        from . import __version__

        cfg = self.result.config
        ws.column_dimensions["A"].width, ws.column_dimensions["B"].width = 22, 110
        facts = [
            ("Config", Text(cfg.path)),
            ("Overrides", " ".join(f"--set {s}" for s in self.sets) or "none"),
            ("Hugging Face config", self.hf_config or "none"),
            ("Model preset", cfg.preset.id if cfg.preset else "none"),
            ("Hardware node", cfg.node.id if cfg.node else "none (the config gives the figures)"),
            ("dlformula version", __version__),
            ("Formula digest", self.model.digest[:16]),
            ("Formula sources", ", ".join(sorted({s.origin for s in self.engine.sources}))),
            ("Exported", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
        ]
        write_about(ws, facts)
