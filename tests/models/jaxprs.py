"""Reading a traced program's structure in tests: which primitives it runs, at what shapes."""

from __future__ import annotations


def equations(jaxpr, primitive: str) -> list:
    """Every ``primitive`` equation of a jaxpr, nested jaxprs (jit, scan, custom_vjp) included."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == primitive:
            found.append(eqn)
        for value in eqn.params.values():
            for sub in value if isinstance(value, list | tuple) else [value]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    found.extend(equations(inner, primitive))
    return found


def output_shapes(jaxpr, primitive: str) -> list[tuple[int, ...]]:
    """Output shapes of every ``primitive`` equation in a jaxpr, nested jaxprs (jit, scan, custom_vjp) included."""
    return [tuple(eqn.outvars[0].aval.shape) for eqn in equations(jaxpr, primitive)]
