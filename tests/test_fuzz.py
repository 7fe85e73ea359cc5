"""Property-based fuzzing of everything a user feeds dlformula (issue 14): config files,
`--set` values, formula files and runs files. Whatever the input, the CLI exits 0, 1 or 2;
every stderr line is an `error:` or `warning:` line (or sweep's `progress:`); never an
"internal error" or a traceback; each run is quick. A formula file `check` accepts is one the
generated code can compile and evaluate (check agrees with eval). bench/fuzz.py is the long
version (10,000+ inputs, with devices, FIFOs and the issue's reproducers)."""

from __future__ import annotations

import contextlib
import io
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import EXAMPLES

BASE = (EXAMPLES / "gpt3-175b.yaml").read_text()
SLOW = 5.0  # seconds one in-process run may take (a normal eval takes milliseconds)
# The same inputs every run (derandomize); a hundred per kind here, bench/fuzz.py runs 11,000+.
FUZZ = settings(max_examples=100, deadline=None, derandomize=True,
                suppress_health_check=list(HealthCheck))

HOSTILE = ["1e308", "9" * 400, "-9" * 30, ".nan", ".inf", "-.inf", "~", "!!float x", "!!int 1.5",
           "!!binary aGk=", "!!python/object:os.system x", "*a", "&a 1", "[", "]", "{", "}",
           "'", '"', "\t1", "é", "1e-320", "0x10", "0o17", "1_000", "yes", "no", "null", "80 GiB",
           "1 GiB**64", "full", "exp(1000)", "__import__('os')", "2024-01-01", "[1, [2, [3]]]",
           "{a: {b: {c: 1}}}", "-1", "0", "0.5", "1e9", "1e300", "h100-sxm", "gpt3-175b",
           "'; rm -rf /'", "${HOME}", "%s%n", "\\x00", "ｆｕｌｌ"]
KNOWN_KEYS = ["model.preset", "model.layers", "model.hidden", "model.heads", "model.vocab",
              "model.kv_heads", "model.glu", "model.norm", "hardware.node", "hardware.gpus",
              "parallelism.tp", "parallelism.pp", "parallelism.dp", "parallelism.cp",
              "parallelism.zero", "parallelism.sp", "training.seq_len",
              "training.global_batch", "training.micro_batch", "training.tokens",
              "training.precision", "training.recompute", "moe.experts", "moe.top_k",
              "model.hf_config", "hardware.price_per_gpu_hour"]

scalars = st.one_of(
    st.sampled_from(HOSTILE),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12),
)
keys = st.one_of(st.sampled_from(KNOWN_KEYS),
                 st.from_regex(r"[a-z_]{1,8}\.[a-z_]{1,8}", fullmatch=True))


def run_cli(*args: str) -> tuple[int, str, str, float]:
    from dlformula.cli import main

    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - start


def assert_clean(code: int, err: str, seconds: float, what: str) -> None:
    assert code in (0, 1, 2), (what, code, err)
    assert "internal error" not in err, (what, err)
    assert "Traceback" not in err and "Exception ignored" not in err, (what, err)
    for line in err.splitlines():
        assert line.startswith(("error: ", "warning: ", "progress: ")) or not line.strip(), \
            (what, line)
    assert seconds < SLOW, (what, seconds)


def _config_text(sections: dict[str, dict[str, str]]) -> str:
    lines = []
    for section, items in sections.items():
        lines.append(f"{section}:")
        lines += [f"  {k}: {v}" for k, v in items.items()]
    return "\n".join(lines) + "\n"


configs = st.dictionaries(
    st.sampled_from(["model", "hardware", "parallelism", "training", "moe", "junk"]),
    st.dictionaries(st.from_regex(r"[a-z_]{1,12}", fullmatch=True)
                    | st.sampled_from([k.split(".")[1] for k in KNOWN_KEYS]),
                    scalars.map(lambda s: s.replace("\n", " ")), max_size=6),
    max_size=5)


@FUZZ
@given(configs)
def test_fuzz_generated_configs(tmp_path_factory, sections):
    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_text(_config_text(sections), encoding="utf-8", errors="surrogatepass")
    code, _, err, seconds = run_cli("eval", str(path), "--brief")
    assert_clean(code, err, seconds, _config_text(sections))


@FUZZ
@given(st.integers(min_value=0, max_value=len(BASE.splitlines())), scalars,
       st.sampled_from(["insert", "replace", "append_value"]))
def test_fuzz_mutated_example_config(tmp_path_factory, where, snippet, how):
    lines = BASE.splitlines()
    snippet = snippet.replace("\n", " ")
    if how == "insert":
        lines.insert(where, snippet)
    elif how == "replace" and where < len(lines):
        lines[where] = snippet
    elif where < len(lines):
        lines[where] = lines[where].rstrip() + " " + snippet
    text = "\n".join(lines) + "\n"
    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    code, _, err, seconds = run_cli("eval", str(path), "--brief")
    assert_clean(code, err, seconds, text)


@FUZZ
@given(st.lists(st.tuples(keys, scalars), min_size=1, max_size=3))
def test_fuzz_set_values(pairs):
    args = []
    for key, value in pairs:
        args += ["--set", f"{key}={value}"]
    code, _, err, seconds = run_cli("eval", str(EXAMPLES / "gpt3-175b.yaml"), "--brief", *args)
    assert_clean(code, err, seconds, repr(args))


RUN_FIELDS = {
    "model": ["layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len", "kv_heads"],
    "hardware": ["gpu", "count", "gpus_per_node"],
    "parallel": ["tp", "pp", "dp", "cp", "ep", "sp", "zero", "recompute", "vpp"],
    "batch": ["global_batch_sequences", "micro_batch"],
    "target": ["step_time_s", "mfu"],
}
GOOD_RUN = {"model": {"layers": "24", "hidden": "2304", "heads": "24", "ffn_hidden": "9216",
                      "vocab": "51200", "seq_len": "2048"},
            "hardware": {"gpu": "A100-SXM4-80GB", "count": "32"},
            "parallel": {"tp": "1", "pp": "1", "dp": "32"},
            "batch": {"global_batch_sequences": "512"},
            "target": {"step_time_s": "3.53"}}

runs = st.lists(
    st.fixed_dictionaries({
        section: st.dictionaries(st.sampled_from(fields), scalars, max_size=len(fields))
        for section, fields in RUN_FIELDS.items()}),
    min_size=1, max_size=3)


def _runs_text(rows: list[dict[str, dict[str, str]]]) -> str:
    out = []
    for i, row in enumerate(rows):
        out.append(f"- id: run{i}\n  source: fuzz")
        for section, items in row.items():
            merged = {**GOOD_RUN.get(section, {}), **items}
            out.append(f"  {section}:")
            out += [f"    {k}: {str(v).replace(chr(10), ' ')}" for k, v in merged.items()]
    return "\n".join(out) + "\n"


@settings(FUZZ, max_examples=40)
@given(runs)
def test_fuzz_runs_files(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("runs") / "r.yaml"
    text = _runs_text(rows)
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    code, _, err, seconds = run_cli("validate", str(path))
    assert_clean(code, err, seconds, text)


# -- formula files: check agrees with eval ------------------------------------------------------
INPUTS = """inputs:
  layers: {unit: layer, domain: integer >= 1, default: 4, doc: d}
  hidden: {unit: 1, domain: number > 0, default: 512.0, doc: d}
  mode: {unit: 1, default: a, choices: {a: 0, b: 1}, doc: d}
  flag: {unit: 1, default: true, domain: boolean, doc: d}
constants:
  big: {value: 1.0e300, unit: 1, doc: d, source: s}
"""
ATOMS = ["layers", "hidden", "big", "0", "1", "2", "0.5", "1e308", "1e-320", "10", "-1",
         "flag", "(mode == 'a')", "(mode in ('a', 'b'))"]
HOSTILE_EXPRS = ["__import__('os').system('true')", "().__class__", "lambda: 1", "[1][0]",
                 "layers.real", "{}", "f'{layers}'", "layers @ layers", "~layers", "layers & 1",
                 "layers is 1", "10 ** 10 ** 10", "9" * 400, "exp(exp(exp(layers)))",
                 "log(0)", "log(-1)", "sqrt(-1)", "Mod(layers, 0)", "1 if flag else 'x'",
                 "Piecewise((1, layers > 1))", "Max()", "open('/etc/passwd')", "x:=1"]
FUNCS = ["Max", "Min", "ceil", "floor", "Abs", "log", "log2", "exp", "sqrt", "Mod"]


@st.composite
def expressions(draw, depth=3):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(ATOMS))
    kind = draw(st.integers(0, 4))
    a = draw(expressions(depth=depth - 1))
    b = draw(expressions(depth=depth - 1))
    if kind == 0:
        return f"({a} {draw(st.sampled_from(['+', '-', '*', '/', '//', '%', '**']))} {b})"
    if kind == 1:
        f = draw(st.sampled_from(FUNCS))
        return f"{f}({a}, {b})" if f in ("Max", "Min", "Mod") else f"{f}({a})"
    if kind == 2:
        return f"({a} if {b} > {draw(st.sampled_from(ATOMS))} else {b})"
    if kind == 3:
        return draw(st.sampled_from(HOSTILE_EXPRS))
    return f"-{a}"


names = st.one_of(st.sampled_from(["q", "lambda", "None", "True", "class", "in", "_q", "__q",
                                   "evaluate", "constraints", "_in", "math", "inf", "nan",
                                   "\u00e9t\u00e9", "ﬁ", "q" * 300, "1q", "layers"]),
                  st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True))
units = st.sampled_from(["1", "layer", "GiB", "byte**2", "GiB**64", "s", "FLOP/s", "bogus",
                         "B/" * 120 + "B", "USD/(GPU*h)", "1/0"])


@settings(FUZZ, max_examples=200)
@given(names, expressions(), units)
def test_fuzz_formula_check_agrees_with_eval(name, expr, unit):
    import json

    from dlformula.errors import DlfError
    from dlformula.loader import load_formula_set
    from dlformula.model import compile_model
    from dlformula.sources import Source

    text = ("quantities:\n  " + json.dumps(name) + ":\n    expr: " + json.dumps(expr)
            + "\n    unit: " + json.dumps(unit) + "\n    doc: d\n    source: s\n")
    sources = [Source("/fuzz/inputs.yaml", INPUTS, "check"), Source("/fuzz/q.yaml", text,
                                                                     "check")]
    try:
        fs = load_formula_set(sources)  # what `check` runs
    except DlfError as exc:
        assert all(line.startswith("/fuzz/") for line in exc.lines()), exc.lines()
        return
    # check said ok: the generated code must compile and evaluate (or fail as a model error
    # on these particular values, never with a syntax or name error)
    model = compile_model(fs)
    compile(model.source, "<fuzz>", "exec")
    values = {"layers": 4, "hidden": 512.0, "mode": 0, "flag": True}
    try:
        model.evaluate(values)
    except DlfError as exc:
        assert "evaluating" in str(exc), str(exc)


@pytest.mark.parametrize("template", [
    "__import__('os').system('touch {m}')", "open('{m}', 'w')",
    "exec(\"open('{m}', 'w')\")", "eval(\"open('{m}', 'w')\")",
    "().__class__.__base__.__subclasses__()", "[open('{m}', 'w') for x in (1,)]",
    "(lambda: open('{m}', 'w'))()", "getattr(__builtins__, 'open')('{m}', 'w')",
])
def test_injection_formulas_never_run(tmp_path, template):
    """Formulas that would write a file if they ran: refused, and nothing is written."""
    from dlformula.errors import DlfError
    from dlformula.loader import load_formula_set
    from dlformula.model import compile_model
    from dlformula.sources import Source

    marker = tmp_path / "ran"
    expr = template.format(m=marker)
    text = f"quantities:\n  q:\n    expr: {expr!r}\n    unit: '1'\n    doc: d\n    source: s\n"
    with pytest.raises(DlfError):
        fs = load_formula_set([Source("/fuzz/inputs.yaml", INPUTS, "check"),
                               Source("/fuzz/q.yaml", text, "check")])
        compile_model(fs).evaluate({"layers": 4, "hidden": 512.0, "mode": 0, "flag": True})
    assert not marker.exists()
