"""The Checks sheet's rows and the workbook's single status, as spreadsheet formulas.

Rows, in the order the status reads them (the first FAIL is the one it names):

1. every input's domain (integer, bounds, choice membership, true/false, a known node), so a
   value pasted or written by a script, which data validation never sees, still shows FAIL with
   the engine's own message (`training.micro_batch = 1.5: must be an integer (...)`);
2. the formula files' constraints and warnings, messages in human units;
3. one row per formula sheet: every result cell holds a number (no error value, no text typed
   over a formula), naming the first cell that does not.

`status_formula` is the text of the `status` cell on Summary: "all pass" only when no row fails,
no row warns and no result cell holds an error value (ISERROR summed with SUMPRODUCT over every
result range); otherwise the first FAIL with the cell to fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .excel_human import placeholder

MAX_LITERAL = 250  # Excel refuses a string constant over 255 characters in a formula


def lit(text: str) -> str:
    """A string literal for a formula, split into pieces Excel accepts."""
    if not text:
        return '""'
    pieces = [text[i:i + MAX_LITERAL] for i in range(0, len(text), MAX_LITERAL)]
    return "&".join('"' + p.replace('"', '""') + '"' for p in pieces)


@dataclass
class CheckRow:
    name: str  # the config key of an input, a constraint's name, or "numbers: SHEET"
    kind: str  # input | constraint | warning | numbers
    cond: str  # Excel expression, TRUE when the check passes
    message: str  # Excel expression shown when it does not
    fix: str  # where to fix it (text)
    condition: str  # as written (for the Condition column)
    where: str  # file:line or the sheet


@dataclass
class InputCell:
    """Where the builder put one input: its value cell and, for a choice, its Choose cell."""

    name: str
    d: Any  # InputDef
    value: str  # defined name of the value cell
    address: str  # "Inputs!B30"
    choice: str | None = None  # defined name of the Choose cell
    choice_address: str | None = None
    lookup: bool = False  # looked up from the Hardware sheet for the chosen node


def _doc(d: Any) -> str:
    return f" ({d.doc.rstrip('.')})" if d.doc else ""


def input_row(c: InputCell, node_fix: str) -> CheckRow:
    """The domain check of one input, with the message `dlformula eval` gives for the value."""
    d, x = c.d, c.value
    key = d.config
    doc = lit(_doc(d))
    if c.choice is not None and d.choices:
        labels = "{" + ",".join('"' + lb.replace('"', '""') + '"' for lb, _ in d.choices) + "}"
        codes = "{" + ",".join(str(code) for _, code in d.choices) + "}"
        m = f"MATCH({c.choice},{labels},0)"
        options = ", ".join(lb for lb, _ in d.choices)
        cond = f"IF(ISNA({m}),FALSE,AND(ISNUMBER({x}),{x}=INDEX({codes},{m})))"
        msg = (f"IF(ISNA({m}),{lit(key + ' = ')}&IF(ISBLANK({c.choice}),\"''\","
               f"\"'\"&{c.choice}&\"'\")&{lit(': must be one of ' + options)}&{doc},"
               f"{_overwritten(c)})")
        return CheckRow(key, "input", cond, msg, c.choice_address or c.address,
                        f"one of {options}", "Inputs")
    if c.choice is not None:  # boolean
        known = f"AND(NOT(ISBLANK({c.choice})),OR({c.choice}=TRUE,{c.choice}=FALSE))"
        cond = f"IF({known},AND(ISNUMBER({x}),{x}=IF({c.choice},1,0)),FALSE)"
        msg = (f"IF({known},{_overwritten(c)},{lit(key + ' = ')}&IF(ISBLANK({c.choice}),"
               f"\"''\",\"'\"&{c.choice}&\"'\")&{lit(': must be true or false')}&{doc})")
        return CheckRow(key, "input", cond, msg, c.choice_address or c.address, "true or false",
                        "Inputs")
    dom = d.domain
    parts = [f"{x}=INT({x})"] if dom.kind == "integer" else []
    from .excel_printer import number_text

    if dom.lo is not None:
        parts.append(f"{x}{'>=' if dom.lo_inclusive else '>'}{number_text(dom.lo)}")
    if dom.hi is not None:
        parts.append(f"{x}{'<=' if dom.hi_inclusive else '<'}{number_text(dom.hi)}")
    cond = f"IF(ISNUMBER({x}),AND({','.join(parts)}),FALSE)" if parts else f"ISNUMBER({x})"
    kind = "an integer" if dom.kind == "integer" else "a number"
    bounds = lit(f": must be {dom.text}")
    if dom.kind == "integer":
        bounds = f'IF({x}<>INT({x}),{lit(": must be an integer")},{bounds})'
    error = lit(f"{key} cannot be looked up: the chosen node is not in the Hardware sheet; "
                "pick one" if c.lookup else f"{key} holds an error value")
    msg = (f"IF(ISERROR({x}),{error},IF(ISBLANK({x}),{lit(key + ' is missing a value')},"
           f"IF(ISNUMBER({x}),{lit(key + ' = ')}&{x}&{bounds},"
           f"{lit(key + ' = ')}&\"'\"&{x}&\"'\"&{lit(': must be ' + kind)})))&{doc}")
    return CheckRow(key, "input", cond, msg, node_fix if c.lookup else c.address,
                    dom.text or kind, "Inputs")


def _overwritten(c: InputCell) -> str:
    return lit(f"{c.d.config}: its Value cell {c.address} must stay the formula over its Choose "
               f"cell {c.choice_address}; undo the edit there")


def node_row(node: str, ids: str, address: str) -> CheckRow:
    cond = f"ISNUMBER(MATCH({node},{ids},0))"
    msg = (f"IF(ISBLANK({node}),{lit('hardware.node is missing a value')},"
           f"{lit('unknown hardware node ')}&\"'\"&{node}&\"'\"&"
           f"{lit('; pick one of the ids on the Hardware sheet')})")
    return CheckRow("hardware.node", "input", cond, msg, address, "an id on the Hardware sheet",
                    "Inputs")


def message_formula(message: str, names: dict[str, str], model: Any,
                    choices: dict[str, str]) -> str:
    """A constraint's message with its {name} placeholders as live values in human units."""
    import re

    parts, pos = [], 0
    for mt in re.finditer(r"\{([A-Za-z][A-Za-z0-9_]*)\}", message):
        name = mt.group(1)
        if name not in names:
            continue
        d = model.inputs.get(name)
        unit = d.unit if d is not None else (
            model.quantities[name].unit if name in model.quantities else "1")
        boolean = d is not None and d.domain.kind == "boolean"
        choice = choices.get(name) if d is not None and (d.choices or boolean) else None
        parts += [lit(message[pos:mt.start()]), placeholder(names[name], unit, choice, boolean)]
        pos = mt.end()
    parts.append(lit(message[pos:]))
    return "&".join(p for p in parts if p != '""') or '""'


def numbers_row(sheet: str, first: int, last: int, flag_col: str) -> CheckRow:
    """Every result cell of a formula sheet holds a number; names the first that does not."""
    from openpyxl.utils import quote_sheetname

    s = quote_sheetname(sheet)
    flags = f"{s}!${flag_col}${first}:${flag_col}${last}"
    row = f"MIN({flags})"
    cond = f"COUNT({flags})=0"
    msg = (f"{lit(sheet + '!B')}&{row}&\" (\"&INDEX({s}!$A$1:$A${last},{row})&\") \"&"
           f"IF(ISERROR(INDEX({s}!$B$1:$B${last},{row})),{lit('holds an error value')},"
           f"{lit('is not a number (text typed over its formula?)')})&"
           f"{lit(': fix the first FAIL above, or undo the edit of that cell')}")
    return CheckRow(f"numbers: {sheet}", "numbers", cond, msg, f"{sheet}!B{first}:B{last}",
                    "every result is a number", sheet)


def status_formula(first: int, last: int, result_ranges: list[str]) -> str:
    """The single status: the first FAIL (or error, or warning) with the cell to fix."""
    s, c, a, f = (f"Checks!${col}${first}:${col}${last}" for col in "BCAD")

    def first_of(word: str, label: str) -> str:
        m = f'MATCH("{word}",{s},0)'
        return (f'"{label} ("&INDEX({a},{m})&"): "&INDEX({c},{m})&'
                f'IF(INDEX({f},{m})="",""," -> fix "&INDEX({f},{m}))')

    errors = "+".join(f"SUMPRODUCT(ISERROR({r})*1)" for r in result_ranges) or "0"
    return (f'=IF(COUNTIF({s},"FAIL")>0,{first_of("FAIL", "FAIL")},'
            f'IF(COUNTIF({s},"error")>0,{first_of("error", "ERROR")},'
            f'IF({errors}>0,"ERROR: "&({errors})&" result cell(s) hold error values; see Checks",'
            f'IF(COUNTIF({s},"warning")>0,{first_of("warning", "warning")},"all pass"))))')
