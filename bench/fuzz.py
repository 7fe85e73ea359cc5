"""The long hostile-input run of issue 14: at least 10,000 generated broken or hostile inputs
(configs, mutated example configs, --set values, runs files, formula files through the loader
and through `check`/`--plugin`, Hugging Face configs, plugin hardware nodes and presets, sweep
and search arguments, output files on a failing disk) plus the issue's reproducers run as
separate processes (alias bombs, 40,000-deep nesting, recursive aliases, /dev/zero,
/dev/urandom, FIFOs, huge numbers, a 10^12-config sweep), and prints the outcome counts:
exit codes, internal errors, tracebacks, stray stderr lines, hangs (timeouts), crashes
(signals), corrupt or partial output files, check/eval disagreements and injected code that ran.

    python bench/fuzz.py [--seed N] [--scale F] [--quick]

Inputs are generated with `random` from the seed, so a run is reproducible. Most run in this
process through `dlformula.cli.main` (an alarm bounds each); the reproducers and a sample of
generated inputs run as subprocesses, where a segfault or hang shows as such.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
IN_PROCESS_TIMEOUT = 150  # seconds before a run is a hang (a 2 M-row search -o: 25 s idle)
SUBPROCESS_TIMEOUT = 30

HOSTILE = ["1e308", "9" * 400, "-" + "9" * 30, ".nan", ".inf", "-.inf", "~", "!!float x",
           "!!int 1.5", "!!binary aGk=", "!!python/object:os.system x",
           "!!python/object/apply:os.system ['touch {marker}']", "*a", "&a 1", "[", "]", "{",
           "}", "'", '"', "\t1", "é", "1e-320", "0x10", "0o17", "1_000", "yes", "no", "null",
           "80 GiB", "1 GiB**64", "full", "exp(1000)", "__import__('os')", "2024-01-01",
           "[1, [2, [3]]]", "{a: {b: {c: 1}}}", "-1", "0", "0.5", "1e9", "1e300", "1e305",
           "h100-sxm", "gpt3-175b", "'; rm -rf /'", "${HOME}", "%s%n", "\\x00", "ｆｕｌｌ",
           "<<: *a", "? complex key", "- item", "|", ">", "!custom tag", "&x [*x]",
           "2 ** 10", "NaN", "Infinity", "-0", "+5", "1,024", "4k", "8 GPU", "\u2028"]
KEYS = ["model.preset", "model.layers", "model.hidden", "model.heads", "model.vocab",
        "model.kv_heads", "model.ffn_hidden", "model.glu", "model.norm", "model.head_dim",
        "model.max_position", "hardware.node", "hardware.gpus", "hardware.price_per_gpu_hour",
        "parallelism.tp", "parallelism.pp", "parallelism.dp", "parallelism.cp",
        "parallelism.ep", "parallelism.vpp", "parallelism.zero", "parallelism.sp",
        "parallelism.schedule", "training.seq_len", "training.global_batch",
        "training.micro_batch", "training.tokens", "training.precision",
        "training.recompute", "training.attention_kernel",
        "training.achieved_flops_per_gpu", "moe.experts", "moe.top_k",
        "moe.expert_ffn_hidden", "model.hf_config", "junk.key", "model.junk"]
SECTIONS = ["model", "hardware", "parallelism", "training", "moe", "mla", "junk"]


# commands whose successful runs write a summary to stderr (a failure is still error: lines)
INFORMATIVE = {"sweep_search_output", "process:work_limit", "process:where"}


class Tally:
    """Outcome counts per category and overall, and the first few problems of each kind."""

    PROBLEMS = ("internal_error", "traceback", "stray_stderr", "hang", "crash",
                "corrupt_output", "check_eval_disagree", "injection_ran", "bad_exit")

    def __init__(self) -> None:
        self.inputs = collections.Counter()
        self.exits = collections.Counter()
        self.problems = collections.Counter()
        self.examples: dict[str, list[str]] = collections.defaultdict(list)

    def add(self, category: str, code: int | None, err: str, what: str,
            extra: list[str] = ()) -> None:
        self.inputs[category] += 1
        self.exits[str(code)] += 1
        found = list(extra)
        if code is None:
            found.append("hang")
        elif code < 0 or code >= 128 and code not in (130, 143):
            found.append("crash")
        elif code not in (0, 1, 2):
            found.append("bad_exit")
        if "internal error" in err:
            found.append("internal_error")
        if "Traceback" in err or "Exception ignored" in err:
            found.append("traceback")
        informative = code == 0 and category in INFORMATIVE  # "wrote N rows to ..." is fine
        if not informative and any(
                line.strip() and not line.startswith(("error: ", "warning: ", "progress: "))
                for line in err.splitlines()):
            found.append("stray_stderr")
        for f in found:
            self.problems[f] += 1
            if len(self.examples[f]) < 5:
                self.examples[f].append(f"[{category}] {what[:300]!r} -> {code}: {err[:300]!r}")

    def report(self, seconds: float) -> str:
        lines = [f"inputs: {sum(self.inputs.values()):,} in {seconds:.0f} s"]
        lines += [f"  {k:<24}{v:>7,}" for k, v in sorted(self.inputs.items())]
        lines.append("exit codes: " + ", ".join(f"{k}: {v:,}" for k, v in
                                                sorted(self.exits.items())))
        lines.append("problems:")
        lines += [f"  {k:<24}{self.problems.get(k, 0):>7,}" for k in self.PROBLEMS]
        for kind, examples in self.examples.items():
            lines.append(f"examples of {kind}:")
            lines += [f"  {e}" for e in examples]
        return "\n".join(lines)


class _Hang(BaseException):  # not an Exception: the program must not catch it
    pass


def _alarm(signum, frame):
    raise _Hang()


def run_cli(*args: str) -> tuple[int | None, str, str]:
    """dlformula in this process, bounded by an alarm; (None, ...) on a hang."""
    from dlformula.cli import main

    out, err = io.StringIO(), io.StringIO()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(IN_PROCESS_TIMEOUT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    except _Hang:
        code = None
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # anything escaping main is a crash of the program
        err.write(f"Traceback (escaped main): {type(exc).__name__}: {exc}\n")
        code = -1
    finally:
        signal.alarm(0)
    return code, out.getvalue(), err.getvalue()


def run_process(args: list[str], stdin: bytes | None = None) -> tuple[int | None, str]:
    try:
        proc = subprocess.run([sys.executable, "-m", "dlformula", *args], input=stdin,
                              capture_output=True, timeout=SUBPROCESS_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, ""
    return proc.returncode, proc.stderr.decode("utf-8", "replace")


# -- generators ---------------------------------------------------------------------------------
class Gen:
    def __init__(self, rng: random.Random, marker: Path) -> None:
        self.rng, self.marker = rng, marker

    def scalar(self) -> str:
        r = self.rng
        kind = r.random()
        if kind < 0.5:
            return r.choice(HOSTILE).replace("{marker}", str(self.marker))
        if kind < 0.65:
            return str(r.choice([r.randint(-10, 10), r.randint(0, 10**6), 10 ** r.randint(0, 400),
                                 -(10 ** r.randint(0, 30))]))
        if kind < 0.8:
            return repr(r.choice([r.random() * 10 ** r.randint(-320, 308), float("inf"),
                                  float("nan"), -0.0, 5e-324]))
        alphabet = "abcxyz019 .:-_[]{}&*!|>%@#'\"\\\t\u00e9\u2028"
        return "".join(r.choice(alphabet) for _ in range(r.randint(0, 12)))

    def config(self) -> str:
        r = self.rng
        lines = []
        for section in r.sample(SECTIONS, r.randint(0, 5)):
            lines.append(f"{section}:")
            for _ in range(r.randint(0, 6)):
                key = r.choice([k.split(".")[1] for k in KEYS] + ["x", "preset", "node"])
                lines.append(f"  {key}: {self.scalar().replace(chr(10), ' ')}")
        return "\n".join(lines) + "\n"

    def mutated(self, text: str) -> str:
        r = self.rng
        lines = text.splitlines()
        for _ in range(r.randint(1, 3)):
            i = r.randint(0, len(lines))
            how = r.random()
            snippet = self.scalar().replace("\n", " ")
            if how < 0.3 or i == len(lines):
                lines.insert(i, snippet)
            elif how < 0.5:
                lines[i] = snippet
            elif how < 0.7:
                lines[i] = lines[i].rstrip() + " " + snippet
            elif how < 0.8:
                del lines[i]
            elif how < 0.9:  # cut in the middle of a line
                lines[i] = lines[i][:r.randint(0, len(lines[i]))]
            else:
                lines[i] = "  " * r.randint(0, 30) + lines[i]
        return "\n".join(lines) + r.choice(["\n", "", "\r\n", "\t"])

    def expression(self, depth: int = 3) -> str:
        r = self.rng
        atoms = ["layers", "hidden", "heads", "seq_len", "0", "1", "2", "0.5", "1e308",
                 "1e-320", "-1", "glu", "(recompute == 'full')", "tp", "gpus"]
        if depth == 0 or r.random() < 0.3:
            return r.choice(atoms)
        a, b = self.expression(depth - 1), self.expression(depth - 1)
        k = r.random()
        if k < 0.4:
            return f"({a} {r.choice(['+', '-', '*', '/', '//', '%', '**'])} {b})"
        if k < 0.6:
            f = r.choice(["Max", "Min", "ceil", "floor", "Abs", "log", "log2", "exp", "sqrt",
                          "Mod"])
            return f"{f}({a}, {b})" if f in ("Max", "Min", "Mod") else f"{f}({a})"
        if k < 0.7:
            return f"({a} if {b} > 1 else {a})"
        if k < 0.9:
            m = self.marker
            return r.choice([
                f"__import__('os').system('touch {m}')", f"open('{m}', 'w')",
                "().__class__.__bases__[0].__subclasses__()", "lambda: 1", "[1][0]",
                "layers.real", "layers @ layers", "~layers", "layers & 1", "layers is 1",
                "10 ** 10 ** 10", "9" * 400, "exp(exp(exp(layers)))", "log(0)", "Mod(layers, 0)",
                f"exec(\"open('{m}','w')\")", "x := 1", "f'{layers}'", "{1: 2}", "...",
                "Piecewise((1, layers > 1))", "Max()", "'text'", "None", "True + 1",
                "layers % 0", "1e308 * 10", "exp(1000)", "1 / 0", "0 ** -1",
            ])
        return f"-{a}"

    def formula_file(self) -> tuple[str, str]:
        r = self.rng
        name = r.choice(["q", "lambda", "None", "True", "class", "_q", "__q", "evaluate",
                         "constraints", "_in", "math", "inf", "nan", "\u00e9t\u00e9", "ﬁ",
                         "q" * 300, "1q", "layers", "step_time", "fuzz_q"])
        unit = r.choice(["1", "layer", "GiB", "byte**2", "GiB**64", "s", "FLOP/s", "bogus",
                         "B/" * 120 + "B", "USD/(GPU*h)", "1/0", "1"])
        override = r.random() < 0.1
        text = (f"quantities:\n  {json.dumps(name)}:\n    expr: {json.dumps(self.expression())}\n"
                f"    unit: {json.dumps(unit)}\n    doc: d\n    source: s\n")
        if override:
            text += "    override: true\n"
        if r.random() < 0.2:
            text = self.mutated(text)
        return name, text

    def set_args(self) -> list[str]:
        r = self.rng
        args = []
        for _ in range(r.randint(1, 3)):
            key = r.choice(KEYS)
            if r.random() < 0.05:
                key = r.choice(["", ".", "a..b", "model", "=", "model.layers.x", "1.2"])
            args += ["--set", f"{key}={self.scalar()}"]
        return args

    def runs_file(self) -> str:
        r = self.rng
        base = {"model": {"layers": 24, "hidden": 2304, "heads": 24, "ffn_hidden": 9216,
                          "vocab": 51200, "seq_len": 2048},
                "hardware": {"gpu": "A100-SXM4-80GB", "count": 32},
                "parallel": {"tp": 1, "pp": 1, "dp": 32},
                "batch": {"global_batch_sequences": 512},
                "target": {"step_time_s": 3.53}}
        out = []
        for i in range(r.randint(1, 4)):
            out.append(f"- id: run{i}\n  source: fuzz")
            for section, fields in base.items():
                out.append(f"  {section}:")
                for k, v in fields.items():
                    value = self.scalar() if r.random() < 0.3 else v
                    out.append(f"    {k}: {str(value).replace(chr(10), ' ')}")
                if r.random() < 0.2:
                    out.append(f"    {r.choice(['ep', 'cp', 'vpp', 'zero', 'mfu', 'x'])}: "
                               f"{self.scalar().replace(chr(10), ' ')}")
        text = "\n".join(out) + "\n"
        return self.mutated(text) if r.random() < 0.3 else text

    def hf_config(self) -> str:
        r = self.rng
        data = json.loads((ROOT / "tests" / "data" / "hf" / "llama3.1-8b.json").read_text())
        for _ in range(r.randint(1, 4)):
            k = r.choice(list(data) + ["model_type", "architectures", "n_embd", "junk"])
            how = r.random()
            if how < 0.3:
                data.pop(k, None)
            else:
                data[k] = r.choice([self.scalar(), 10 ** 400, -1, 0, None, [], {}, True, 1e308,
                                    "gpt2", "mixtral", "starcoder2", ["GPT2LMHeadModel"]])
        text = json.dumps(data)
        if r.random() < 0.15:
            text = text[:r.randint(0, len(text))]
        if r.random() < 0.05:
            text = "[" * 5000 + "]" * 5000
        return text

    def node_file(self) -> str:
        core = (ROOT / "hardware" / "h100-sxm.yaml").read_text()
        text = self.mutated(core)
        return ("override: true\n" if self.rng.random() < 0.7 else "") + text

    def preset_file(self) -> str:
        core = (ROOT / "presets" / "llama3-70b.yaml").read_text()
        return ("override: true\n" if self.rng.random() < 0.7 else "") + self.mutated(core)

    def vary(self) -> list[str]:
        r = self.rng
        values = r.choice(["1,2,4,8", "1..8", "1..64:x2", "0..1:0.25", "1..1e12", "a,b",
                           "1..", "..", "8..1", "1..8:0", "1..8:-1", "full,selective",
                           "h100-sxm,b200", "1e308,1", "", "1,,2", "9" * 50])
        key = r.choice(["parallelism.tp", "parallelism.pp", "training.micro_batch",
                        "training.recompute", "hardware.node", "junk.x", "model.layers"])
        args = ["--vary", f"{key}={values}"]
        if r.random() < 0.5:
            args += ["--where", r.choice(["memory_per_gpu < 80 GiB", "step_time @ step_time",
                                          "mfu > 0.5 and", "recompute == 'full'",
                                          "__import__('os')", "layers in layers",
                                          "step_time > 1e400", "bogus > 1",
                                          "recompute == 'nonsense'", "mfu", "1", "(", ""])]
        return args


# -- categories -------------------------------------------------------------------------------
def check_output(path: Path, old: bytes | None, code: int | None) -> list[str]:
    """A sweep/search/export output: complete and readable when the run succeeded, the old
    file (or nothing) when it failed; never a temporary file left over."""
    problems = []
    leftovers = [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    if leftovers:
        problems.append("corrupt_output")
    if code == 0 and path.exists() and path.read_bytes() != old:
        try:
            if path.suffix == ".json":
                json.loads(path.read_text())
            elif path.suffix == ".csv":
                rows = path.read_text().splitlines()
                width = rows[0].count(",")
                if any(row.count(",") != width for row in rows if '"' not in row):
                    problems.append("corrupt_output")
            elif path.suffix == ".xlsx":
                from openpyxl import load_workbook

                load_workbook(path, read_only=True).close()
        except Exception:
            problems.append("corrupt_output")
    elif code != 0:
        now = path.read_bytes() if path.exists() else None
        if now != old:
            problems.append("corrupt_output")
    return problems


def fuzz(scale: float, seed: int, quick: bool) -> Tally:
    from dlformula.errors import DlfError
    from dlformula.faults import full_disk
    from dlformula.loader import load_formula_set
    from dlformula.model import compile_model
    from dlformula.sources import Source

    rng = random.Random(seed)
    tally = Tally()
    work = Path(tempfile.mkdtemp(prefix="dlformula-fuzz-"))
    marker = work / "INJECTED"
    gen = Gen(rng, marker)
    examples = sorted(EXAMPLES.glob("*.yaml"))
    cfg = str(EXAMPLES / "gpt3-175b.yaml")

    def n(count: int) -> int:
        return max(1, int(count * scale))

    def note_injection(category: str) -> list[str]:
        if marker.exists():
            marker.unlink()
            return ["injection_ran"]
        return []

    # 1. generated configs
    for i in range(n(2500)):
        p = work / f"c{i % 7}.yaml"
        text = gen.config()
        p.write_bytes(text.encode("utf-8", "surrogatepass"))
        code, _, err = run_cli("eval", str(p), "--brief")
        tally.add("config", code, err, text, note_injection("config"))
    # 2. mutated examples
    for i in range(n(2500)):
        p = work / f"m{i % 7}.yaml"
        text = gen.mutated(rng.choice(examples).read_text())
        p.write_bytes(text.encode("utf-8", "surrogatepass"))
        code, _, err = run_cli("eval", str(p), "--brief")
        tally.add("mutated_config", code, err, text, note_injection("mutated"))
    # 3. --set
    for _ in range(n(2000)):
        args = gen.set_args()
        code, _, err = run_cli("eval", str(rng.choice(examples)), "--brief", *args)
        tally.add("set", code, err, " ".join(args), note_injection("set"))
    # 4. runs files
    for i in range(n(800)):
        p = work / f"r{i % 7}.yaml"
        text = gen.runs_file()
        p.write_bytes(text.encode("utf-8", "surrogatepass"))
        code, _, err = run_cli("validate", str(p))
        tally.add("runs_file", code, err, text, note_injection("runs"))
    # 5. formula files through the loader: check agrees with eval
    small = """inputs:
  layers: {unit: layer, domain: integer >= 1, default: 4, doc: d}
  hidden: {unit: 1, domain: number > 0, default: 512.0, doc: d}
  heads: {unit: head, domain: integer >= 1, default: 8, doc: d}
  seq_len: {unit: token, domain: integer >= 1, default: 2048, doc: d}
  tp: {unit: GPU, domain: integer >= 1, default: 2, doc: d}
  gpus: {unit: GPU, domain: integer >= 1, default: 8, doc: d}
  glu: {unit: 1, default: true, domain: boolean, doc: d}
  recompute: {unit: 1, default: full, choices: {full: 0, none: 1}, doc: d}
"""
    values = {"layers": 4, "hidden": 512.0, "heads": 8, "seq_len": 2048, "tp": 2, "gpus": 8,
              "glu": True, "recompute": 0}
    for _ in range(n(2000)):
        _, text = gen.formula_file()
        problems: list[str] = []
        err = ""
        code: int | None = 0
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(IN_PROCESS_TIMEOUT)
        try:
            try:
                fs = load_formula_set([Source("/fuzz/inputs.yaml", small, "check"),
                                       Source("/fuzz/q.yaml", text, "check")])
            except DlfError as exc:
                code = exc.exit_code
                err = "".join(f"error: {line}\n" for line in exc.lines())
            else:
                try:
                    model = compile_model(fs)
                    compile(model.source, "<fuzz>", "exec")
                    model.evaluate(values)
                except DlfError as exc:
                    if "evaluating" not in str(exc):
                        problems.append("check_eval_disagree")
                    code = exc.exit_code
                except Exception as exc:  # check said ok, eval cannot run it
                    problems.append("check_eval_disagree")
                    err = f"internal error: {type(exc).__name__}: {exc}\n"
                    code = 1
        except _Hang:
            code = None
        except Exception as exc:
            err = f"internal error: {type(exc).__name__}: {exc}\n"
            code = 1
        finally:
            signal.alarm(0)
        tally.add("formula_loader", code, err, text, problems + note_injection("formula"))
    # 6. formula files through the CLI: check FILE and --plugin DIR eval (recompiles: few)
    for i in range(n(24 if not quick else 6)):
        _, text = gen.formula_file()
        plugin = work / f"plug{i}"
        (plugin / "formulas").mkdir(parents=True)
        f = plugin / "formulas" / "x.yaml"
        f.write_bytes(text.encode("utf-8", "surrogatepass"))
        c_code, _, c_err = run_cli("check", str(f))
        tally.add("formula_check_cli", c_code, c_err, text, note_injection("check"))
        e_code, _, e_err = run_cli("--plugin", str(plugin), "eval", cfg, "--brief")
        disagree = []
        if c_code != 0 and e_code == 0:
            disagree.append("check_eval_disagree")
        if c_code == 0 and e_code not in (0,) and "evaluating" not in e_err \
                and "x.yaml" in e_err:
            disagree.append("check_eval_disagree")
        tally.add("formula_plugin_cli", e_code, e_err, text, disagree + note_injection("eval"))
    # 7. Hugging Face configs
    for i in range(n(600)):
        p = work / f"hf{i % 7}.json"
        text = gen.hf_config()
        p.write_text(text)
        code, _, err = run_cli("eval", cfg, "--brief", "--hf-config", str(p))
        tally.add("hf_config", code, err, text)
    # 8. plugin hardware nodes and presets
    for i in range(n(200)):
        plugin = work / f"hw{i}"
        (plugin / "hardware").mkdir(parents=True)
        (plugin / "presets").mkdir()
        if rng.random() < 0.5:
            (plugin / "hardware" / "h100-sxm.yaml").write_text(gen.node_file())
        else:
            (plugin / "presets" / "llama3-70b.yaml").write_text(gen.preset_file())
        for args in (["eval", str(EXAMPLES / "llama3-70b.yaml"), "--brief"], ["presets"],
                     ["hardware", "h100-sxm"], ["plugins"]):
            code, _, err = run_cli("--plugin", str(plugin), *args)
            tally.add("plugin_data", code, err, " ".join(args))
    # 9. sweep and search arguments, with outputs (some on a failing disk)
    for i in range(n(500)):
        folder = work / f"out{i}"
        folder.mkdir()
        suffix = rng.choice(["csv", "json", "xlsx", "txt", ""])
        target = folder / f"s.{suffix}" if suffix else folder / "s"
        old = b"previous contents" if rng.random() < 0.5 else None
        if old is not None:
            target.write_bytes(old)
        full = rng.random() < 0.3
        disk = (full_disk(rng.choice([0, 100, 2000, 20000])) if full
                else contextlib.nullcontext())
        with disk:
            if rng.random() < 0.8:
                args = ["sweep", cfg, *gen.vary(), *gen.vary()[:2]]
            else:
                args = ["search", cfg, "--gpus", rng.choice(["64", "0", "-1", "1e9", "x",
                                                             "8,16", "1..1024"])]
            code, _, err = run_cli(*args, "-o", str(target))
        tally.add("sweep_search_output", code, err, " ".join(args) + f" full={full}",
                  check_output(target, old, code))
    # 10. the reproducers and a sample of generated inputs, as separate processes
    for kind, args, stdin in reproducers(work, gen, rng, n(60)):
        code, err = run_process(args, stdin)
        tally.add(f"process:{kind}", code, err, " ".join(args)[:200],
                  note_injection("process"))
    return tally


def _bomb(levels: int, tail: str) -> str:
    rows = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    rows += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(rows) + "\n" + tail


def reproducers(work: Path, gen: Gen, rng: random.Random, sample: int):
    cfg = str(EXAMPLES / "gpt3-175b.yaml")
    d = work / "repro"
    d.mkdir()

    def file(name: str, text: str | bytes) -> str:
        p = d / name
        p.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8",
                                                                        "surrogatepass"))
        return str(p)

    fifo = d / "fifo.yaml"
    os.mkfifo(fifo)
    plugin = d / "plug"
    for sub in ("formulas", "hardware", "presets"):
        (plugin / sub).mkdir(parents=True)
    for levels in (7, 9):
        bomb = _bomb(levels, "model: {preset: gpt3-175b}\n")
        yield "alias_bomb", ["eval", file(f"bomb{levels}.yaml", bomb)], None
        yield "alias_bomb", ["check", file(f"fbomb{levels}.yaml", bomb)], None
        yield "alias_bomb", ["validate", file(f"rbomb{levels}.yaml", bomb)], None
        (plugin / "hardware" / "bomb.yaml").write_text(bomb)
        yield "alias_bomb", ["--plugin", str(plugin), "hardware", "bomb"], None
        (plugin / "hardware" / "bomb.yaml").unlink()
    for depth in (65, 500, 40000):
        deep = "model: " + "[" * depth + "]" * depth + "\n"
        yield "deep_nesting", ["eval", file(f"deep{depth}.yaml", deep)], None
        yield "deep_nesting", ["check", file(f"fdeep{depth}.yaml", deep)], None
        yield "deep_nesting", ["eval", cfg, "--hf-config",
                               file(f"deep{depth}.json", "[" * depth + "]" * depth)], None
    block = "".join("  " * i + f"k{i}:\n" for i in range(300)) + "  " * 300 + "v: 1\n"
    yield "deep_nesting", ["eval", file("block.yaml", block)], None
    yield "recursive_alias", ["eval", file("rec.yaml",
                                           "model: &m {preset: gpt3-175b, x: *m}\n")], None
    yield "recursive_alias", ["eval", file("rec2.yaml", "a: &a [*a]\n")], None
    base = (EXAMPLES / "gpt3-175b.yaml").read_text()
    yield "merge_key", ["eval", file("merge.yaml", base + "b: &b {x: 1}\nc:\n  <<: *b\n")], None
    yield "bad_tag", ["eval", file("tag.yaml", base.replace("seq_len: 2048",
                                                            "seq_len: !!float x"))], None
    yield "latin1", ["eval", file("latin.yaml", base.encode() + b"x: caf\xe9\n")], None
    for dev in ("/dev/zero", "/dev/urandom", str(fifo), str(d)):
        for args in (["eval", dev], ["check", dev], ["validate", dev],
                     ["eval", cfg, "--hf-config", dev]):
            yield "device_fifo_folder", args, None
    big = "9" * 400
    for key in ("parallelism.tp", "training.micro_batch", "training.tokens", "hardware.gpus"):
        for value in (big, "1e308", "1e300", "-1e308"):
            yield "huge_number", ["eval", cfg, "--set", f"{key}={value}"], None
    yield "huge_number", ["eval", file("tp.yaml", base.replace("tp: 8", "tp: 1e308"))], None
    yield "work_limit", ["sweep", cfg, "--vary", "training.tokens=1..1000000",
                         "--vary", "training.seq_len=1..1000000"], None
    yield "where", ["sweep", cfg, "--vary", "parallelism.tp=1,2", "--where",
                    "step_time @ step_time"], None
    for i in range(sample):
        r = rng.random()
        if r < 0.4:
            yield "generated_config", ["eval", file(f"g{i}.yaml", gen.config())], None
        elif r < 0.7:
            yield "generated_set", ["eval", cfg, *gen.set_args()], None
        else:
            yield "generated_mutation", ["eval", file(f"gm{i}.yaml", gen.mutated(base))], None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply the number of generated inputs (1.0: about 11,000)")
    parser.add_argument("--quick", action="store_true", help="a tenth of the inputs")
    a = parser.parse_args()
    os.environ.setdefault("DLFORMULA_CACHE_DIR", tempfile.mkdtemp(prefix="dlformula-fuzz-c-"))
    os.environ["DLFORMULA_LOAD_PLUGINS"] = ""
    scale = a.scale * (0.1 if a.quick else 1.0)
    start = time.perf_counter()
    tally = fuzz(scale, a.seed, a.quick)
    print(tally.report(time.perf_counter() - start))
    return 1 if sum(tally.problems.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
