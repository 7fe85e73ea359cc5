"""Explain stage: how a quantity is derived, step by step, down to the inputs.

Each quantity is shown once, as written in its formula file, with its doc, source and location;
with a config, the same formula with the numbers substituted and the value with its unit. Later
references to an already-explained name say so instead of repeating it. Nothing is inlined
symbolically: substituting the whole graph into itself is what makes naive tools take minutes.

Everything printed here comes from the compiled model (the formula text as written, doc, source,
location, dependencies, the definitions an override replaced, which plugin a file comes from),
so a warm `explain` reads the model cache and imports no sympy; only `--latex` builds the sympy
expressions.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from .errors import UsageError, did_you_mean, display_path
from .humanize import human

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .core import Engine, Result


def _value_text(value: Any, unit: str) -> str:
    n, u = human(value, unit)
    return f"{n} {u}".strip()


def _substituted(expr_text: str, values: dict[str, Any]) -> str:
    """The formula text with every name replaced by its number (calls keep their names)."""
    text = " ".join(expr_text.split())
    tree = ast.parse(text, mode="eval")
    calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and id(node) not in calls and node.id in values:
            spans.append((node.col_offset, node.end_col_offset, node.id))
    out = text
    for start, end, name in sorted(spans, reverse=True):
        v = values[name]
        if isinstance(v, str):
            out = out[:start] + v + out[end:]
            continue
        try:
            fv = float(v)
            s = f"{fv:.4g}" if fv != int(fv) or abs(fv) >= 1e6 else str(int(fv))
        except (TypeError, ValueError, OverflowError):
            s = str(v)
        out = out[:start] + s + out[end:]
    return out


def latex_text(expr: Any, inputs: Mapping[str, Any]) -> str:
    """LaTeX of a formula as it reads in the YAML: names upright and whole
    (`\\mathrm{peak\\_flops}`, not sympy's subscript `peak_{flops}`), and a choice compared
    with its label (`precision = \\text{fp8}`), not the code the generated code uses."""
    import sympy

    def name(s: Any) -> str:
        return "\\mathrm{" + s.name.replace("_", "\\_") + "}"

    shown: dict[Any, str] = {}

    def label_of(e: Any) -> Any:
        inp = inputs.get(str(e.lhs))
        labels = {code: label for label, code in inp.choices} if inp is not None else {}
        if not (isinstance(e.rhs, sympy.Integer) and int(e.rhs) in labels):
            return e
        # one symbol for the whole comparison: sympy would reorder a rebuilt Eq
        op = "=" if isinstance(e, sympy.Eq) else "\\neq"
        text = f"{name(e.lhs)} {op} \\text{{{labels[int(e.rhs)]}}}"
        symbol = sympy.Symbol(f"_cmp{len(shown)}")
        shown[symbol] = text
        return symbol

    expr = expr.replace(lambda e: isinstance(e, (sympy.Eq, sympy.Ne))
                        and isinstance(e.lhs, sympy.Symbol), label_of)
    names = {s: shown.get(s) or name(s) for s in expr.free_symbols if isinstance(s, sympy.Symbol)}
    return sympy.latex(expr, symbol_names=names)


def explain(engine: Engine, name: str, result: Result | None = None, depth: int | None = None,
            latex: bool = False) -> str:
    fs = engine.model
    if name not in fs.quantities and name not in fs.inputs and name not in fs.constants:
        names = [*fs.inputs, *fs.constants, *fs.quantities]
        raise UsageError(f"no quantity or input named '{name}'"
                         f"{did_you_mean(name, names)}; `dlformula list` shows them all")
    exprs = engine.formula_set.exprs if latex else {}
    lines: list[str] = []
    seen: set[str] = set()
    origins = fs.origins
    values = result.values if result else {}
    # What a reader sees substituted: choice labels and true/false rather than their codes.
    shown_values: dict[str, Any] = dict(values)
    if result is not None:
        for n, label in result.config.labels.items():
            if isinstance(label, bool):
                shown_values[n] = "True" if label else "False"
            elif isinstance(label, str):
                shown_values[n] = repr(label)

    def describe(n: str, prefix: str, level: int) -> None:
        head = prefix
        if n in fs.inputs:
            inp = fs.inputs[n]
            text = f"{head}{n}: input, {inp.config}"
            if result is not None:
                label = result.config.labels.get(n, values.get(n))
                shown = (str(label).lower() if isinstance(label, bool) else label
                         if isinstance(label, str) else _value_text(label, inp.unit))
                text += f" = {shown}  [{result.config.origins.get(n, 'default')}]"
            lines.append(text)
            lines.append(f"{_cont(prefix)}  {inp.doc}")
            return
        if n in fs.constants:
            c = fs.constants[n]
            lines.append(f"{head}{n}: constant = {_value_text(c.value, c.unit)}  ({c.doc})")
            return
        q = fs.quantities[n]
        if n in seen:
            lines.append(f"{head}{n}: see above")
            return
        seen.add(n)
        expr_text = " ".join(q.expr.split())
        lines.append(f"{head}{n} = {expr_text}")
        pad = _cont(prefix) + "  "
        if latex:
            lines.append(f"{pad}latex: {latex_text(exprs[n], fs.inputs)}")
        lines.append(f"{pad}{q.doc}")
        lines.append(f"{pad}source: {q.source}")
        lines.append(f"{pad}defined at {display_path(q.path)}:{q.line}  [{q.unit}]")
        for old_path, old_line, old_expr in fs.replaced.get(n, []):
            by = origins.get(q.path, "")
            who = f"overridden by plugin '{by}'" if by and by != "dlformula" else "overrides"
            lines.append(f"{pad}{who}, was {display_path(old_path)}:{old_line}: {old_expr}")
        if result is not None:
            lines.append(f"{pad}= {_substituted(q.expr, shown_values)}")
            lines.append(f"{pad}= {_value_text(values[n], q.unit)}")
        deps = fs.deps.get(n, [])
        if depth is not None and level >= depth:
            if deps:
                lines.append(f"{pad}uses: {', '.join(deps)}")
            return
        for i, dep in enumerate(deps):
            last = i == len(deps) - 1
            describe(dep, _cont(prefix) + ("└── " if last else "├── "), level + 1)

    describe(name, "", 0)
    return "\n".join(lines) + "\n"


def _cont(prefix: str) -> str:
    """The prefix that continues a tree branch below a node."""
    return prefix.replace("├── ", "│   ").replace("└── ", "    ")
