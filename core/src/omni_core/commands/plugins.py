"""`omni list-plugins`: what is installed and what each plugin provides.

Every registry kind is listed, in the registry's order (pipelines, attention backends, cache
backends, quantizers, platforms, denoisers, benchmarks): the JSON has every kind under
``provides`` (empty lists included), the table the non-empty ones.

Imports nothing heavy: plugin modules register lazy specs, so this stays well under half a second.
"""

from __future__ import annotations

import json

import click


@click.command("list-plugins")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per plugin.")
def list_plugins(as_json: bool) -> None:
    """List installed plugins and what each provides (exits 0 even if some are broken)."""
    from omni_core.contract.host import get_host

    host = get_host()
    infos = host.infos()
    # Fallback pipelines (e.g. the generic diffusers adapter) serve only what no first-class
    # plugin claims; say so, so nobody mistakes them for a model family's plugin.
    fallbacks = {name for name, spec in host.registry.pipelines.items() if spec.fallback}
    if as_json:
        out = []
        for info in infos:
            entry = info.as_dict()
            pipelines = entry["provides"].get("pipelines", [])
            entry["fallback_pipelines"] = [p for p in pipelines if p in fallbacks]
            out.append(entry)
        click.echo(json.dumps(out, indent=2))
        return
    rows = [("PLUGIN", "DISTRIBUTION", "VERSION", "STATUS", "PROVIDES")]
    for info in infos:
        provides = "; ".join(
            f"{k}: {', '.join(_label(n, k, fallbacks) for n in v)}"
            for k, v in info.provides.items()
            if v
        )
        if not provides:
            provides = "(built-in) -" if info.builtin else "-"
        elif info.builtin:
            provides = f"(built-in) {provides}"
        rows.append(
            (info.name, info.distribution or "-", info.version or "-", info.status, provides)
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        cells = "  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True))
        click.echo(f"{cells}  {row[4]}")
    broken = [info for info in infos if info.status != "ok"]
    if broken:
        click.echo("")
    for info in broken:
        click.secho(f"{info.name}: {info.error}", fg="red")


def _label(name: str, kind: str, fallbacks: set[str]) -> str:
    return f"{name} (fallback)" if kind == "pipelines" and name in fallbacks else name
