"""A compiled model: definitions plus generated code, cached on disk.

A model is cached under the content digest of every loaded formula file (and the dlformula and
Python versions and the code-generating modules), so editing a formula, adding a plugin or
upgrading invalidates it. A second, small index maps the files' *stamps* (inode, size and
modification time of each, see `cache.file_stamp`) to that digest, so a warm start reads no
formula file at all: it lists the formula folders, stats their files and reads one marshal
file. A stamp that changed without the content changing (a `git checkout`, a `touch`) costs
one reading of the texts, not a rebuild. No YAML parsing of formulas, no sympy, no networkx.
"""

from __future__ import annotations

import marshal
import os
import sys
from functools import lru_cache
from typing import Any

from . import cache
from .cache import Key, file_stamp
from .defs import ConstantDef, ConstraintDef, Domain, InputDef, QuantityDef
from .errors import ModelError, display_path
from .runtime import numpy_namespace, scalar_namespace

CACHE_FORMAT = 6  # bump when the cached layout or the generated code changes shape
_CODE_MODULES = ("codegen.py", "expr.py", "loader.py", "defs.py", "model.py", "runtime.py",
                 "core_functions.py")
MODELS_KEPT = 16  # compiled models kept in the cache folder (the newest)


@lru_cache(maxsize=64)
def _compiled(source: str, filename: str) -> Any:
    """Generated text compiled once per process (a code object is immutable; each model execs it
    in a namespace of its own): a second Engine, search or pruned evaluator of the same formulas
    skips compile(), some 20 ms a function."""
    return compile(source, filename, "exec")


class CompiledModel:
    """Definitions plus the generated code that evaluates them. (A plain class, not a
    dataclass: this module is on every command's start-up path.)"""

    def __init__(self, inputs: dict[str, InputDef], constants: dict[str, ConstantDef],
                 quantities: dict[str, QuantityDef], constraints: list[ConstraintDef],
                 constraint_names: list[list[str]], summary: list[str], order: list[str],
                 deps: dict[str, list[str]], digest: str, source: str,
                 line_of: dict[int, str], overrides: dict[str, list[str]] | None = None,
                 warning_defs: list[ConstraintDef] | None = None,
                 replaced: dict[str, list[tuple[str, int, str]]] | None = None,
                 origins: dict[str, str] | None = None,
                 groups: dict[str, Any] | None = None) -> None:
        self.inputs = inputs
        self.constants = constants
        self.quantities = quantities
        self.constraints = constraints
        self.constraint_names = constraint_names  # inputs each constraint depends on
        self.summary = summary
        self.order = order
        self.deps = deps
        self.digest = digest
        self.source = source  # the generated Python text
        self.line_of = line_of
        self.overrides = overrides or {}  # name -> ["path:line" it replaced]
        self.warning_defs = warning_defs or []
        # What `explain` prints that the definitions alone do not hold, kept so a warm explain
        # needs no sympy: each replaced definition (path, line, formula text) of an override,
        # and which plugin each formula file comes from.
        self.replaced = replaced or {}
        self.origins = origins or {}
        self.groups = groups or {}  # group -> (title, rank) its formula files give (display.py)
        self._code: Any = None
        self._fns: dict[Any, Any] = {}  # (kind, vectorized, only) -> functions
        # Plugin functions the generated code calls: runtime name -> (scalar, numpy or None).
        # Bound by the Engine from its plugin set; never cached (they are code, not data).
        self.plugin_functions: dict[str, tuple[Any, Any]] = {}

    def bind_functions(self, helpers: dict[str, tuple[Any, Any]]) -> None:
        """Bind plugin functions (runtime name -> (scalar, numpy)) for the generated code."""
        self.plugin_functions = dict(helpers)
        self._fns.clear()

    def _helpers(self, vectorized: bool) -> dict[str, Any]:
        if not vectorized:
            return {name: py for name, (py, _) in self.plugin_functions.items()}
        from .runtime import vectorized as vectorize

        return {name: np_impl if np_impl is not None else vectorize(py)
                for name, (py, np_impl) in self.plugin_functions.items()}

    @property
    def code(self) -> Any:
        if self._code is None:
            self._code = _compiled(self.source, f"<dlformula {self.digest[:12]}>")
        return self._code

    def functions(self, vectorized: bool = False,
                  only: list[str] | tuple[str, ...] | None = None) -> tuple[Any, Any]:
        """(evaluate, constraints) bound to plain-Python or NumPy helpers.

        With `only`, `evaluate` computes just those names and what they depend on (and returns
        only them): a sweep that ranks by step time need not compute the cost model.
        """
        key = (vectorized, tuple(only) if only else None)
        if key not in self._fns:
            code = self.code if not only else _compiled(self._pruned_source(only),
                                                        "<dlformula pruned>")
            # (our own generated text, never user text)
            if vectorized:
                ns = numpy_namespace(self._helpers(True))
                exec(code, ns)
                fns = {n: _quiet(ns[n]) for n in ("evaluate", "constraints", "warnings")}
            else:
                fast = scalar_namespace(self._helpers(False), fast=True)
                safe = scalar_namespace(self._helpers(False))
                exec(code, fast)
                exec(code, safe)
                fns = {n: _fast_or_safe(fast[n], safe[n])
                       for n in ("evaluate", "constraints", "warnings")}
            self._fns[key] = (fns["evaluate"], fns["constraints"])
            self._fns[("warnings", vectorized, key[1])] = fns["warnings"]
        return self._fns[key]

    def warnings(self, values: dict[str, Any]) -> list[str]:
        """Messages of the warnings whose condition fails for these evaluated values."""
        self.functions()
        fn = self._fns[("warnings", False, None)]
        return [self.fill_message(w.message, values)
                for ok, w in zip(fn(values), self.warning_defs) if not ok]

    def fill_message(self, message: str, values: dict[str, Any]) -> str:
        """A constraint's or warning's message with each `{name}` replaced by its value: choice
        labels, true/false, small whole numbers as they are, the rest in human units."""
        import re

        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in values:
                return m.group(0)
            v = values[name]
            d = self.inputs.get(name)
            if d is not None:
                v = d.label(v)
            unit = d.unit if d is not None else (self.quantities[name].unit
                                                 if name in self.quantities else "1")
            if isinstance(v, (bool, str)):
                return str(v).lower() if isinstance(v, bool) else v
            if isinstance(v, float) and abs(v) < 1e4 and v == int(v):
                v = int(v)
            if isinstance(v, int) and abs(v) < 1e4:
                return str(v)
            from .humanize import human

            n, u = human(v, unit)
            return f"{n} {u}".strip()

        return re.sub(r"\{([A-Za-z][A-Za-z0-9_]*)\}", sub, message)

    def _pruned_source(self, only: list[str] | tuple[str, ...]) -> str:
        unknown = [n for n in only if n not in self.inputs and n not in self.constants
                   and n not in self.quantities]
        if unknown:
            raise ModelError(f"unknown names: {', '.join(unknown)}")
        return _prune_function(self.source, "evaluate", lambda line: "    return {" + ", ".join(
            f"{n!r}: {n}" for n in only) + "}", set(only))

    def checks(self, which: list[int] | tuple[int, ...], vectorized: bool = True) -> Any:
        """A function of the inputs computing only the constraints `which` (indices into
        `constraints`), returning their truth values in that order: a search checks each
        constraint as soon as its inputs are joined, without computing the others."""
        key = ("checks", vectorized, tuple(which))
        if key not in self._fns:
            entries = _split_list(self._return_line("constraints")[len("    return ["):-1])
            chosen = [entries[i] for i in which]
            names = set()
            import re

            for text in chosen:
                names.update(re.findall(r"[A-Za-z_]\w*", text))
            source = _prune_function(self.source, "constraints",
                                     lambda line: "    return [" + ", ".join(chosen) + "]", names)
            ns = (numpy_namespace(self._helpers(True)) if vectorized
                  else scalar_namespace(self._helpers(False)))
            exec(_compiled(source, "<dlformula checks>"), ns)  # (our own generated text)
            self._fns[key] = _quiet(ns["constraints"]) if vectorized else ns["constraints"]
        return self._fns[key]

    def _return_line(self, function: str) -> str:
        lines = self.source.splitlines()
        first = next(i for i, line in enumerate(lines) if line.startswith(f"def {function}("))
        return next(line for line in lines[first + 1:] if line.startswith("    return "))

    def evaluate(self, values: dict[str, Any]) -> dict[str, Any]:
        """Every input, constant and quantity for one config (numbers in, numbers out)."""
        fn, _ = self.functions()
        try:
            return fn(values)
        except (ZeroDivisionError, OverflowError, ValueError, TypeError) as exc:
            raise ModelError(self._where_failed(exc)) from None

    def check(self, inputs: dict[str, Any], vectorized: bool = False) -> list[Any]:
        """One truth value (or array) per constraint, computed from the inputs alone."""
        _, fn = self.functions(vectorized)
        try:
            return fn(inputs)
        except (ZeroDivisionError, OverflowError, ValueError, TypeError) as exc:
            raise ModelError(self._where_failed(exc)) from None

    def _where_failed(self, exc: Exception) -> str:
        tb = exc.__traceback__
        name = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename.startswith("<dlformula"):
                name = self.line_of.get(tb.tb_lineno)
            tb = tb.tb_next
        if name:
            q = self.quantities[name]
            return (f"{display_path(q.path)}:{q.line}: evaluating '{name}' failed ({exc}); "
                    "check the inputs "
                    "it depends on (dlformula explain " + name + ")")
        return f"evaluation failed: {exc}"

    def names(self) -> list[str]:
        return [*self.inputs, *self.constants, *self.order]

    # -- cache ---------------------------------------------------------------------------------
    def pack(self) -> bytes:
        """The model as marshal data: definitions as plain tuples (rebuilt with `_make`, no
        keyword matching), the generated text and its compiled code object."""
        meta = {
            "format": CACHE_FORMAT,
            "inputs": [_flat(d) for d in self.inputs.values()],
            "constants": [tuple(d) for d in self.constants.values()],
            "quantities": [tuple(d) for d in self.quantities.values()],
            "constraints": [tuple(d) for d in self.constraints],
            "constraint_names": self.constraint_names,
            "summary": self.summary, "order": self.order, "deps": self.deps,
            "digest": self.digest, "source": self.source,
            "line_of": list(self.line_of.items()), "overrides": self.overrides,
            "replaced": self.replaced, "origins": self.origins, "groups": self.groups,
            "warnings": [tuple(d) for d in self.warning_defs],
            "code": self.code,
        }
        return marshal.dumps(meta)

    @classmethod
    def unpack(cls, data: bytes) -> CompiledModel:
        m = marshal.loads(data)
        if m.get("format") != CACHE_FORMAT:
            raise ValueError("stale cache format")
        inputs = {}
        for t in m["inputs"]:
            d = InputDef._make(t)
            inputs[d.name] = d._replace(domain=Domain._make(d.domain))
        make_c, make_q, make_k = ConstantDef._make, QuantityDef._make, ConstraintDef._make
        model = cls(
            inputs,
            {t[0]: make_c(t) for t in m["constants"]},
            {t[0]: make_q(t) for t in m["quantities"]},
            [make_k(t) for t in m["constraints"]],
            m["constraint_names"], m["summary"], m["order"], m["deps"], m["digest"],
            m["source"], dict(m["line_of"]), m["overrides"],
            [make_k(t) for t in m["warnings"]], m["replaced"], m["origins"], m["groups"],
        )
        model._code = m["code"]
        return model


def _fast_or_safe(fast: Any, safe: Any) -> Any:
    """A scalar function run with C division (runtime.scalar_namespace's `fast` flavour), and
    again with the division that gives inf or nan when a divisor is zero."""

    def run(values: Any) -> Any:
        try:
            return fast(values)
        except ZeroDivisionError:
            return safe(values)

    return run


def _quiet(fn: Any) -> Any:
    """A vectorized function run with NumPy's division warnings off (see runtime.py)."""
    import numpy as np

    def run(values: Any) -> Any:
        with np.errstate(divide="ignore", invalid="ignore"):
            return fn(values)

    return run


def _prune_function(source: str, function: str, new_return: Any, live: set[str]) -> str:
    """The generated `source` with `function`'s return line replaced by `new_return(line)` and
    every assignment in it that nothing live reads dropped. Backwards through the function: a
    line stays if a later kept line (or the return) reads the name it assigns, quantities and
    the shared subexpressions (`_tN`) alike."""
    import re

    lines = source.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(f"def {function}("))
    last = next((i for i in range(first + 1, len(lines)) if lines[i].startswith("def ")),
                len(lines))
    live, drop = set(live), set()
    for i in range(last - 1, first, -1):
        line = lines[i]
        if line.startswith("    return "):
            lines[i] = new_return(line)
        elif line.startswith("    ") and " = " in line:
            name, text = line[4:].split(" = ", 1)
            if name in live:
                live.update(re.findall(r"[A-Za-z_]\w*", text))
            else:
                drop.add(i)
    return "\n".join(line for i, line in enumerate(lines) if i not in drop) + "\n"


def _split_list(text: str) -> list[str]:
    """The top-level items of a generated list's text (commas inside parentheses stay)."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        items.append(text[start:].strip())
    return items


def _flat(d: InputDef) -> tuple[Any, ...]:
    return tuple(tuple(v) if isinstance(v, Domain) else v for v in d)


# -- the model cache -------------------------------------------------------------------------------
def _code_stamps() -> str:
    """The generated code also depends on the code that generates it: an edited engine (an
    editable install) never runs stale generated code. Each module by its file stamp."""
    here = os.path.dirname(os.path.abspath(__file__))
    return "|".join(file_stamp(os.path.join(here, m)) for m in _CODE_MODULES)


def _base_key(kind: str) -> Key:
    from . import __version__

    return Key(kind, str(CACHE_FORMAT), __version__, sys.version, _code_stamps())


def content_entry(digest: str) -> str:
    """The cache entry of the model built from formula files with this content digest."""
    return f"model-{_base_key('model').add(digest).hex()}.marshal"


def stamp_entry(stamp: str) -> str:
    """The index entry that maps a stamp of the formula files (see `folder_stamp`) to the
    content digest of the model built from them."""
    return f"models/{_base_key('stamp').add(stamp).hex()}.marshal"


def load_cached(digest: str) -> CompiledModel | None:
    """The model built from formula files with this content digest, if cached."""
    data = cache.read_bytes(content_entry(digest))
    if data is None:
        return None
    try:
        return CompiledModel.unpack(data)
    except Exception:  # a corrupt or foreign cache file is simply rebuilt
        return None


def load_stamped(stamp: str) -> CompiledModel | None:
    """The model for formula files whose stamps are `stamp`: no formula file is read."""
    digest = cache.load(stamp_entry(stamp))
    if not isinstance(digest, str):
        return None
    model = load_cached(digest)
    return model if model is not None and model.digest == digest else None


def store_cached(model: CompiledModel, stamp: str | None = None) -> None:
    """Keep the model under its content digest (and, given the files' stamp, index it)."""
    cache.write_bytes(content_entry(model.digest), model.pack())
    if stamp is not None:
        remember_stamp(stamp, model.digest)
    prune_models()


def remember_stamp(stamp: str, digest: str) -> None:
    cache.store(stamp_entry(stamp), digest)
    cache.prune("models", 4 * MODELS_KEPT)


def prune_models() -> None:
    """Keep the newest MODELS_KEPT compiled models (every formula edit adds one)."""
    cache.prune("", MODELS_KEPT, prefix="model-")


def compile_model(fs: Any) -> CompiledModel:
    """FormulaSet -> CompiledModel (imports sympy through codegen)."""
    from .codegen import generate

    source, line_of = generate(fs)
    overrides = {n: [f"{d.path}:{d.line}" for d in ds] for n, ds in fs.overridden.items()}
    replaced = {n: [(d.path, d.line, " ".join(getattr(d, "expr", "").split())) for d in ds]
                for n, ds in fs.overridden.items()}
    origins = {s.path: s.origin for s in fs.sources}
    checks = [(d, c) for d, c in zip(fs.constraints, fs.conditions) if d.kind == "constraint"]
    names = [_inputs_behind({s.name for s in c.free_symbols}, fs) for _, c in checks]
    warns = [d for d in fs.constraints if d.kind == "warning"]
    return CompiledModel(fs.inputs, fs.constants, fs.quantities, [d for d, _ in checks], names,
                         fs.summary, fs.order, fs.deps, fs.digest, source, line_of, overrides,
                         warns, replaced, origins, fs.groups)


def _inputs_behind(names: set[str], fs: Any) -> list[str]:
    """The inputs a constraint depends on, through any quantities it names."""
    seen, stack = set(), list(names)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(fs.deps.get(n, ()))
    return sorted(n for n in seen if n in fs.inputs)
