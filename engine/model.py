"""A compiled model: definitions plus generated code, cached on disk.

The cache is keyed by a hash of every loaded formula file (and the dlformula and Python
versions), so editing a formula, adding a plugin or upgrading invalidates it. A warm load reads
one marshal file: no YAML parsing of formulas, no sympy, no networkx.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
from pathlib import Path
from typing import Any

from .defs import ConstantDef, ConstraintDef, Domain, InputDef, QuantityDef
from .errors import ModelError, display_path
from .runtime import numpy_namespace, scalar_namespace

CACHE_FORMAT = 5  # bump when the cached layout or the generated code changes shape
_CODE_MODULES = ("codegen.py", "expr.py", "loader.py", "defs.py", "model.py", "runtime.py")


class CompiledModel:
    """Definitions plus the generated code that evaluates them. (A plain class, not a
    dataclass: this module is on every command's start-up path.)"""

    def __init__(self, inputs: dict[str, InputDef], constants: dict[str, ConstantDef],
                 quantities: dict[str, QuantityDef], constraints: list[ConstraintDef],
                 constraint_names: list[list[str]], summary: list[str], order: list[str],
                 deps: dict[str, list[str]], digest: str, source: str,
                 line_of: dict[int, str], overrides: dict[str, list[str]] | None = None,
                 warning_defs: list[ConstraintDef] | None = None) -> None:
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
        self._code: Any = None
        self._fns: dict[Any, tuple[Any, Any]] = {}
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
            self._code = compile(self.source, f"<dlformula {self.digest[:12]}>", "exec")
        return self._code

    def functions(self, vectorized: bool = False,
                  only: list[str] | tuple[str, ...] | None = None) -> tuple[Any, Any]:
        """(evaluate, constraints) bound to plain-Python or NumPy helpers.

        With `only`, `evaluate` computes just those names and what they depend on (and returns
        only them): a sweep that ranks by step time need not compute the cost model.
        """
        key = (vectorized, tuple(only) if only else None)
        if key not in self._fns:
            ns = (numpy_namespace(self._helpers(True)) if vectorized
                  else scalar_namespace(self._helpers(False)))
            exec(self.code if not only else compile(self._pruned_source(only),
                                                    "<dlformula pruned>", "exec"), ns)
            # (our own generated text, never user text)
            self._fns[key] = (ns["evaluate"], ns["constraints"])
            self._fns[("warnings", vectorized, key[1])] = ns["warnings"]
        return self._fns[key]

    def warnings(self, values: dict[str, Any]) -> list[str]:
        """Messages of the warnings whose condition fails for these evaluated values."""
        self.functions()
        fn = self._fns[("warnings", False, None)]
        from .config import fill_message

        return [fill_message(w.message, values, self)
                for ok, w in zip(fn(values), self.warning_defs) if not ok]

    def _pruned_source(self, only: list[str] | tuple[str, ...]) -> str:
        unknown = [n for n in only if n not in self.inputs and n not in self.constants
                   and n not in self.quantities]
        if unknown:
            raise ModelError(f"unknown names: {', '.join(unknown)}")
        import re

        # Backwards through `evaluate`: a line stays if a later kept line (or `only`) reads the
        # name it assigns, quantities and the shared subexpressions (`_tN`) alike.
        lines = self.source.splitlines()
        first = next(i for i, line in enumerate(lines) if line.startswith("def evaluate"))
        last = next((i for i in range(first + 1, len(lines)) if lines[i].startswith("def ")),
                    len(lines))
        live, drop = set(only), set()
        for i in range(last - 1, first, -1):
            line = lines[i]
            if line.startswith("    return {"):
                lines[i] = "    return {" + ", ".join(f"{n!r}: {n}" for n in only) + "}"
            elif line.startswith("    ") and " = " in line:
                name, text = line[4:].split(" = ", 1)
                if name in live:
                    live.update(re.findall(r"[A-Za-z_]\w*", text))
                else:
                    drop.add(i)
        return "\n".join(line for i, line in enumerate(lines) if i not in drop) + "\n"

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
        return fn(inputs)

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

    # -- cache ----------------------------------------------------------------------------------
    def pack(self) -> bytes:
        meta = {
            "format": CACHE_FORMAT,
            "inputs": [_pack(d) for d in self.inputs.values()],
            "constants": [_pack(d) for d in self.constants.values()],
            "quantities": [_pack(d) for d in self.quantities.values()],
            "constraints": [_pack(d) for d in self.constraints],
            "constraint_names": self.constraint_names,
            "summary": self.summary, "order": self.order, "deps": self.deps,
            "digest": self.digest, "source": self.source,
            "line_of": list(self.line_of.items()), "overrides": self.overrides,
            "warnings": [_pack(d) for d in self.warning_defs],
            "code": self.code,
        }
        return marshal.dumps(meta)

    @classmethod
    def unpack(cls, data: bytes) -> CompiledModel:
        m = marshal.loads(data)
        if m.get("format") != CACHE_FORMAT:
            raise ValueError("stale cache format")
        model = cls(
            {d["name"]: _unpack(InputDef, d) for d in m["inputs"]},
            {d["name"]: _unpack(ConstantDef, d) for d in m["constants"]},
            {d["name"]: _unpack(QuantityDef, d) for d in m["quantities"]},
            [_unpack(ConstraintDef, d) for d in m["constraints"]],
            m["constraint_names"], m["summary"], m["order"], m["deps"], m["digest"],
            m["source"], dict(m["line_of"]), m["overrides"],
            [_unpack(ConstraintDef, d) for d in m["warnings"]],
        )
        model._code = m["code"]
        return model


def _pack(d: Any) -> dict[str, Any]:
    return {k: (v._asdict() if isinstance(v, Domain) else v) for k, v in d._asdict().items()}


def _unpack(cls: type, d: dict[str, Any]) -> Any:
    d = dict(d)
    if "domain" in d:
        d["domain"] = Domain(**d["domain"])
    if "choices" in d:
        d["choices"] = tuple(tuple(c) for c in d["choices"])
    return cls(**d)


def cache_dir() -> Path:
    env = os.environ.get("DLFORMULA_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dlformula"


def cache_path(digest: str) -> Path:
    from . import __version__

    h = hashlib.sha256(f"{digest}|{__version__}|{sys.version}|{CACHE_FORMAT}".encode())
    # The generated code also depends on the code that generates it: hash those modules too,
    # so an edited engine (editable installs) never runs stale generated code.
    here = Path(__file__).parent
    for module in _CODE_MODULES:
        try:
            h.update((here / module).read_bytes())
        except OSError:
            pass
    key = h.hexdigest()
    return cache_dir() / f"model-{key[:32]}.marshal"


def load_cached(digest: str) -> CompiledModel | None:
    path = cache_path(digest)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        return CompiledModel.unpack(data)
    except Exception:  # a corrupt or foreign cache file is simply rebuilt
        return None


def store_cached(model: CompiledModel) -> None:
    path = cache_path(model.digest)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(model.pack())
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home still works, only slower


def compile_model(fs: Any) -> CompiledModel:
    """FormulaSet -> CompiledModel (imports sympy through codegen)."""
    from .codegen import generate

    source, line_of = generate(fs)
    overrides = {n: [f"{d.path}:{d.line}" for d in ds] for n, ds in fs.overridden.items()}
    checks = [(d, c) for d, c in zip(fs.constraints, fs.conditions) if d.kind == "constraint"]
    names = [_inputs_behind({s.name for s in c.free_symbols}, fs) for _, c in checks]
    warns = [d for d in fs.constraints if d.kind == "warning"]
    return CompiledModel(fs.inputs, fs.constants, fs.quantities, [d for d, _ in checks], names,
                         fs.summary, fs.order, fs.deps, fs.digest, source, line_of, overrides,
                         warns)


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
