"""The formula language's functions live in one table (expr.functions(), issue 17.2).

Every function in it -- each built-in and a plugin's -- is accepted by a formula, computed by
the generated code as sympy (or the plugin's own implementation) computes it, accepted by
`--where` with the same values, and printed by the Excel printer as a formula a spreadsheet
engine computes to the same number; or, declared without a spreadsheet form, refused by
`export` with one line saying so. The calls are made from the table itself, so a function added
to it is tested here without a change to this file.
"""

from __future__ import annotations

import math
import textwrap

import pytest

from conftest import EXAMPLES

LLAMA = str(EXAMPLES / "llama3-70b.yaml")
TPS = (1, 2, 4, 8)
DP = 128  # tp x dp on the example's 512 GPUs at pp 4

PLUGIN = '''
import math

from dlformula.hookspecs import Function, hookimpl
from dlformula.diskpath import package_folder


def round_up_to(x, m):
    return math.ceil(x / m) * m


def clamp01(x):
    return min(max(x, 0.0), 1.0)


@hookimpl
def formula_folders():
    return [package_folder(__name__) / "formulas"]


@hookimpl
def functions():
    return [Function("round_up_to", python=round_up_to, excel="CEILING", args=2, dims="same"),
            Function("clamp01", python=clamp01)]  # no spreadsheet form
'''
PLUGIN_IMPL = {"round_up_to": lambda x, m: math.ceil(x / m) * m,
               "clamp01": lambda x: min(max(x, 0.0), 1.0)}
PLUGIN_SPECS = {"round_up_to": (2, 2), "clamp01": (1, 1)}


def _arity(lo: int, hi: int | None) -> int:
    """How many arguments the test passes: two where a function takes several (so Max is a
    real Max, not its single argument)."""
    return lo if hi == lo else lo + 1


def _call(name: str, n: int) -> str:
    return f"{name}(" + ", ".join(f"(tp + {i + 1}) / {i + 2}" for i in range(n)) + ")"


def _args(tp: int, n: int) -> list[float]:
    return [(tp + i + 1) / (i + 2) for i in range(n)]


def _calls() -> dict[str, str]:
    """formula name -> a call of it, for every built-in and the test plugin's functions."""
    from dlformula.expr import functions

    calls = {name: _call(name, _arity(s.min_args, s.max_args)) for name, s in functions().items()
             if name not in PLUGIN_SPECS}
    calls.update({name: _call(name, _arity(*span)) for name, span in PLUGIN_SPECS.items()})
    return calls


def _reference(name: str, tp: int) -> float:
    """What the function gives at `tp`: sympy's value for a built-in, the plugin's own code."""
    import sympy

    from dlformula.expr import functions

    spec = functions()[name]
    n = _arity(spec.min_args, spec.max_args)
    if name in PLUGIN_IMPL:
        return float(PLUGIN_IMPL[name](*_args(tp, n)))
    exact = [sympy.Rational(tp + i + 1, i + 2) for i in range(n)]
    return float(sympy.N(spec.build(*exact), 30))


@pytest.fixture(scope="module")
def plugin_engine(tmp_path_factory):
    """An engine with the test plugin: a quantity `f_NAME` calling each function."""
    from dlformula import Engine
    from dlformula.expr import reset_plugin_functions

    folder = tmp_path_factory.mktemp("fn") / "fnplugin"
    (folder / "formulas").mkdir(parents=True)
    (folder / "__init__.py").write_text(PLUGIN)
    (folder / "formulas" / "__init__.py").write_text("")
    body = "quantities:\n" + "".join(
        textwrap.indent(f"f_{name}:\n  expr: {call}\n  unit: 1\n  doc: {name}.\n"
                        "  source: test\n", "  ") for name, call in _calls().items())
    (folder / "formulas" / "calls.yaml").write_text(body)
    eng = Engine(plugins=[str(folder)])
    eng.formula_set  # noqa: B018 (registers the plugin's functions, builds every formula)
    yield eng, str(folder)
    reset_plugin_functions()  # the other tests see the built-ins only


def test_the_calls_cover_the_whole_table(plugin_engine):
    from dlformula.expr import functions

    eng, _ = plugin_engine
    assert set(_calls()) == set(functions())  # built-ins, aliases and the plugin's
    assert {f"f_{n}" for n in functions()} <= set(eng.model.quantities)


def test_generated_code_computes_every_function(plugin_engine):
    eng, _ = plugin_engine
    for tp in TPS:
        r = eng.evaluate(LLAMA, {"parallelism.tp": tp, "parallelism.dp": DP // tp})
        for name in _calls():
            assert r[f"f_{name}"] == pytest.approx(_reference(name, tp), rel=1e-12), (name, tp)


def test_where_computes_every_function(plugin_engine):
    from dlformula.sweep import sweep

    eng, _ = plugin_engine
    for name, call in _calls().items():
        refs = {tp: _reference(name, tp) for tp in TPS}
        cut = sorted(refs.values())[len(TPS) // 2]
        t = sweep(LLAMA, vary=[f"parallelism.tp={','.join(map(str, TPS))}"],
                  paired=[f"parallelism.dp={','.join(str(DP // tp) for tp in TPS)}"],
                  where=[f"{call} >= {cut!r}"], engine=eng, columns=["step_time"])
        assert sorted(int(v) for v in t["tp"]) == [tp for tp in TPS if refs[tp] >= cut], name


def test_the_excel_printer_prints_every_function_or_says_it_cannot(plugin_engine):
    """Each formula printed with tp's value in its place and computed by the `formulas`
    package (an independent spreadsheet engine) gives the engine's number."""
    from dlformula.excel_printer import ExcelPrinter, ExcelPrintError
    from dlformula.excel_recalc import formulas_package
    from dlformula.expr import functions

    parser = formulas_package().Parser()

    eng, _ = plugin_engine
    fs = eng.formula_set
    for name in _calls():
        spec = functions()[name]
        for tp in (2, 8):
            printer = ExcelPrinter({"tp": str(tp)})
            if not spec.excel:
                with pytest.raises(ExcelPrintError, match=rf"the function {name}\(\) has no "
                                   "spreadsheet form"):
                    printer.formula(fs.exprs[f"f_{name}"])
                continue
            text = printer.formula(fs.exprs[f"f_{name}"])
            assert text.startswith("=" + spec.excel.split("(")[0]) or name in ("log2", "sqrt")
            value = float(parser.ast(text)[1].compile()())
            assert value == pytest.approx(_reference(name, tp), rel=1e-12), (name, text)


def test_export_refuses_a_function_without_a_spreadsheet_form(plugin_engine, run, tmp_path):
    _, folder = plugin_engine
    code, _, err = run("--plugin", folder, "export", LLAMA, "-o", str(tmp_path / "x.xlsx"))
    assert code == 1
    assert "calls.yaml:" in err and "cannot export quantity 'f_clamp01' to Excel: the " \
        "function clamp01() has no spreadsheet form (a plugin function gives one as its " \
        "`excel` name)" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "x.xlsx").exists()


def test_the_core_declares_its_functions_through_the_plugin_hook(run):
    """Issue 17.2: the built-ins are declared by the core through the `functions` hook a plugin
    implements (core_functions.py, as datasette registers its own SQL functions), and that
    declaration is what every stage reads: the formula language's table, and the functions
    generated code calls, for one config and for arrays."""
    import json

    from dlformula.expr import _BUILTIN_NAMES, functions
    from dlformula.plugin_manager import CORE, PluginSet
    from dlformula.runtime import numpy_namespace, scalar_namespace

    plugins = PluginSet.load(entry_points=False, env={})
    declared = {fn.name: fn for owner, fn in plugins.functions() if owner == CORE}
    assert set(declared) == _BUILTIN_NAMES and {"Max", "Mod", "log2", "ceil"} <= set(declared)
    scalar, arrays = scalar_namespace(), numpy_namespace()
    for name, fn in declared.items():
        spec = functions()[name]
        lo, hi = fn.args if isinstance(fn.args, tuple) else (fn.args, fn.args)
        assert (spec.min_args, spec.max_args, spec.dims, spec.excel, spec.doc) == (
            lo, hi, fn.dims, fn.excel, fn.doc), name
        assert scalar[spec.runtime] is fn.python and arrays[spec.runtime] is fn.numpy, name
    # Mod by zero is nan, as its declaration computes it, in generated code
    from dlformula.loader import load_formula_set
    from dlformula.model import compile_model
    from dlformula.sources import Source

    text = ("inputs:\n  x: {unit: 1, default: 7, domain: number >= 0, config: a.x, doc: x, "
            "source: test}\nquantities:\n  r:\n    expr: Mod(x, x - 7)\n    unit: 1\n"
            "    doc: r\n    source: test\n")
    model = compile_model(load_formula_set([Source("/virtual/m.yaml", text, "test")]))
    assert "_fn_Mod(" in model.source and math.isnan(model.evaluate({"x": 7})["r"])
    code, out, err = run("plugins", "--format", "json")
    assert code == 0, err
    core = next(e for e in json.loads(out)["plugins"] if e["name"] == CORE)
    assert core["functions"] == list(declared) and "functions" in core["hooks"]
