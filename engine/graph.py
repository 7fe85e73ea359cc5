"""Graph stage: a thin wrapper over a networkx DiGraph of `dependency -> dependent` edges."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import networkx as nx


class Graph:
    def __init__(self, g: nx.DiGraph) -> None:
        self.g = g

    @classmethod
    def from_deps(cls, deps: Mapping[str, Iterable[str]], names: Iterable[str] = ()) -> Graph:
        g = nx.DiGraph()
        g.add_nodes_from(names)
        for node, used in deps.items():
            g.add_node(node)
            for u in used:
                g.add_edge(u, node)
        return cls(g)

    def cycles(self) -> list[list[str]]:
        """One cycle per strongly connected knot, each starting at its smallest name."""
        out = []
        for comp in nx.strongly_connected_components(self.g):
            if len(comp) == 1:
                (n,) = comp
                if not self.g.has_edge(n, n):
                    continue
            sub = self.g.subgraph(comp)
            edges = nx.find_cycle(sub, source=min(comp))
            cycle = [u for u, _ in edges]
            k = cycle.index(min(cycle))
            out.append(cycle[k:] + cycle[:k])
        return sorted(out)

    def topological(self, only: Iterable[str] | None = None) -> list[str]:
        """Nodes in dependency order (ties broken by name, so the order is stable)."""
        order = list(nx.lexicographical_topological_sort(self.g))
        if only is None:
            return order
        keep = set(only)
        return [n for n in order if n in keep]

    def upstream(self, name: str) -> set[str]:
        return set(nx.ancestors(self.g, name))

    def downstream(self, name: str) -> set[str]:
        return set(nx.descendants(self.g, name))

    def subgraph_edges(self, nodes: set[str]) -> list[tuple[str, str]]:
        return sorted(self.g.subgraph(nodes).edges())


def render(edges: list[tuple[str, str]], kinds: dict[str, str], fmt: str,
           highlight: str | None = None) -> str:
    """Edges as Graphviz dot or Mermaid text; inputs and constants drawn apart from formulas."""
    nodes = sorted(kinds)
    if fmt == "mermaid":
        lines = ["flowchart LR"]
        for n in nodes:
            shape = f"{n}[/{n}/]" if kinds[n] == "input" else f"{n}([{n}])" \
                if kinds[n] == "constant" else f"{n}[{n}]"
            lines.append(f"    {shape}")
        lines += [f"    {a} --> {b}" for a, b in edges]
        if highlight:
            lines.append(f"    style {highlight} stroke-width:3px")
        return "\n".join(lines) + "\n"
    lines = ["digraph dlformula {", "  rankdir=LR;", "  node [fontname=Helvetica];"]
    for n in nodes:
        shape = {"input": "parallelogram", "constant": "ellipse"}.get(kinds[n], "box")
        extra = ", penwidth=3" if n == highlight else ""
        lines.append(f'  "{n}" [shape={shape}{extra}];')
    lines += [f'  "{a}" -> "{b}";' for a, b in edges]
    lines.append("}")
    return "\n".join(lines) + "\n"
