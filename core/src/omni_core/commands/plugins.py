"""`omni list-plugins`: what is installed and what each plugin provides.

Imports nothing heavy: plugin modules register lazy specs, so this stays well under half a second.
"""

from __future__ import annotations

import json

import click


@click.command("list-plugins")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per plugin.")
def list_plugins(as_json: bool) -> None:
    """List installed plugins and what each provides (exits 0 even if some are broken)."""
    from omni_core.plugins import get_host

    infos = get_host().infos()
    if as_json:
        click.echo(json.dumps([i.as_dict() for i in infos], indent=2))
        return
    rows = [("PLUGIN", "DISTRIBUTION", "VERSION", "STATUS", "PROVIDES")]
    for info in infos:
        provides = "; ".join(f"{k}: {', '.join(v)}" for k, v in info.provides.items() if v)
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
